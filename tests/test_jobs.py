"""Launch's background batches, Step's sessions, the form checks and the serve login rule."""

from __future__ import annotations

import asyncio
import html
import socket
import time
from dataclasses import replace
from typing import Any

import pytest

from dashboard.background.jobs import CANCELLED, FAILED, FINISHED, JobManager, LoopThread
from dashboard.background.stepping import Sessions
from dashboard.controls import fork_table, loop_table
from dashboard.server import is_loopback, parse_auth, resolve_auth
from engine import BackendSettings, plan_run
from engine.backends.base import GenerationRequest
from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.errors import ConfigError
from engine.presets import PRESETS, format_knob, parse_knob
from engine.records.episode import Generation
from engine.store import EpisodeFilter, Store

SCRIPTED = BackendSettings(policy="scripted", mistake_rate=0.3)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


class SlowBackend:
    """The scripted policy, but each generation waits: long enough to cancel a batch mid-way."""

    name = "slow"

    def __init__(self, inner: ScriptedBackend, delay: float) -> None:
        self.inner = inner
        self.delay = delay

    async def generate(self, request: GenerationRequest) -> Generation:
        await asyncio.sleep(self.delay)
        return await self.inner.generate(request)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


def _wait(job: Any, timeout: float = 60.0) -> None:
    assert job.wait(timeout), f"job {job.job_id} still {job.status().state} after {timeout}s"


def test_a_batch_runs_in_the_background_and_is_stored(tmp_path):
    store = Store(tmp_path / "r.db")
    plan = plan_run("math", "0:3", 2, "auto", "max_turns = 2\n# a comment\nturn_discount: 0.5", 3, SCRIPTED)
    assert plan.total == 6 and plan.preset == "areal-math" and plan.config.max_turns == 2
    assert plan.config.turn_discount == 0.5 and plan.config.feedback_wrong == PRESETS["areal-math"].feedback_wrong
    job = JobManager().start(plan, store)
    _wait(job)
    st = job.status()
    assert st.state == FINISHED and st.done == 6 and not st.active and st.run_id
    assert sum(st.counts().values()) == 6 and st.mean_reward is not None
    assert store.count(EpisodeFilter(run_id=st.run_id)) == 6
    assert {r.id for r in st.rows} == {s.id for s in store.list_episodes(EpisodeFilter(run_id=st.run_id))}


def test_cancel_keeps_finished_episodes_and_interrupts_the_rest(tmp_path, smol_tokenizer):
    store = Store(tmp_path / "r.db")
    plan = plan_run("math", "0:8", 1, "areal-math", "max_turns=5", 2, SCRIPTED)
    slow = SlowBackend(ScriptedBackend(MathEnv().reference_reply, smol_tokenizer), 0.05)
    job = JobManager().start(plan, store, backend=slow)
    deadline = time.time() + 30
    while job.status().done < 2 and time.time() < deadline:
        time.sleep(0.02)
    assert job.cancel()
    _wait(job)
    st = job.status()
    assert st.state == CANCELLED and 2 <= st.done < 8
    stored = {s.id: s.status for s in store.list_episodes(EpisodeFilter(run_id=st.run_id), limit=50)}
    assert all(stored[r.id] == r.status for r in st.rows)  # finished episodes stay as they ended
    interrupted = [i for i, s in stored.items() if s == "interrupted"]
    assert len(interrupted) == st.interrupted >= 1
    assert not job.cancel()  # nothing left to cancel


def test_cancel_stops_a_policy_that_never_waits(tmp_path):
    # The scripted policy never suspends: without a yield per turn, the whole
    # batch would run inside one pass of the event loop before Cancel arrived.
    store = Store(tmp_path / "r.db")
    job = JobManager().start(plan_run("retail", "all", 1, "auto", None, 1, SCRIPTED), store)
    deadline = time.time() + 30
    while job.status().done < 2 and time.time() < deadline:
        time.sleep(0.01)
    job.cancel()
    _wait(job, 10)
    st = job.status()
    assert st.state == CANCELLED and st.done < 20 and st.interrupted == 1


def test_a_cancel_during_setup_runs_nothing(tmp_path):
    store = Store(tmp_path / "r.db")
    job = JobManager().start(plan_run("math", "0:2", 1, "auto", None, 1, SCRIPTED), store)
    job.cancel()
    _wait(job)
    assert job.status().state in (CANCELLED, FINISHED)  # setup may already be over: then it finishes or cancels


def test_a_setup_failure_is_shown_not_raised(tmp_path):
    store = Store(tmp_path / "r.db")
    plan = plan_run("math", "0:2", 1, "auto", None, 1,
                       BackendSettings(policy="local", model=str(tmp_path / "no-such-model")))
    job = JobManager().start(plan, store)
    _wait(job)
    st = job.status()
    assert st.state == FAILED and "no-such-model" in st.error and "Traceback" not in st.error


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"env": "nope"}, "unknown env 'nope'"),
    ({"tasks": "5:2"}, "task range '5:2'"),
    ({"tasks": "0:x"}, "bad task range"),
    ({"tasks": "999"}, "outside the env's"),
    ({"samples": 0}, "samples per task must be at least 1"),
    ({"samples": 1.5}, "whole number"),
    ({"preset": "nope"}, "unknown preset"),
    ({"settings": "max_turns = -1"}, "max_turns must be at least 1"),
    ({"settings": "max_turns = many"}, "max_turns takes a whole number, not 'many'"),
    ({"settings": "turn_discount 0.9"}, "line 1: write `knob = value`"),
    ({"settings": "\nmax_turns = 2\nmax_turns = 3"}, "line 3: max_turns is set twice"),
    ({"settings": "discount = 0.9"}, "unknown knob 'discount'"),
    ({"settings": "token_mode = slim"}, "token_mode must be one of"),
    ({"settings": 'tool_instruction = "unclosed'}, "not a JSON string"),
])
def test_bad_launch_settings_are_sentences(kwargs, message):
    args = {"env": "math", "tasks": "0:2", "samples": 1, "preset": "auto", "settings": "", "concurrency": 2}
    args.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        plan_run(args["env"], args["tasks"], args["samples"], args["preset"], args["settings"],
                    args["concurrency"], SCRIPTED)


def test_backend_settings_are_checked():
    with pytest.raises(ConfigError, match="needs the server's URL"):
        BackendSettings.parse("sglang", "", "", "completions", "", 1, 1, 256, 0, 0)
    with pytest.raises(ConfigError, match="served model's name"):
        BackendSettings.parse("openai", "", "http://x", "completions", "", 1, 1, 256, 0, 0)
    with pytest.raises(ConfigError, match="top_p must be above 0"):
        BackendSettings.parse("scripted", "", "", "completions", "", 1, 0, 256, 0, 0)
    with pytest.raises(ConfigError, match="temperature: 'hot' is not a number"):
        BackendSettings.parse("scripted", "", "", "completions", "", "hot", 1, 256, 0, 0)
    s = BackendSettings.parse("local", "/models/x", "", "completions", "", None, None, None, None, None)
    assert s.tokenizer_spec == "/models/x" and s.temperature == 1.0 and s.max_new_tokens == 256
    assert s.top_logprobs == 0 and s.sampling().top_logprobs == 0


def test_top_logprobs_reach_the_sampling_and_the_scripted_policy_refuses_them():
    """The Launch and Step forms' top-logprobs field (the last of ``BackendControls.inputs``): a model's policy
    records them; the scripted one has no distribution, so asking it for them is refused, not silently empty."""
    s = BackendSettings.parse("local", "", "", "completions", "", 1, 1, 64, 0, 0, 60, 3, "5")
    assert s.top_logprobs == 5 and s.sampling(seed=1).top_logprobs == 5 and "top 5 logprobs" in s.describe()
    with pytest.raises(ConfigError, match="scripted policy .* no distribution to record"):
        BackendSettings.parse("scripted", "", "", "completions", "", 1, 1, 64, 0, 0, 60, 3, 5)
    assert BackendSettings.parse("scripted", "", "", "completions", "", 1, 1, 64, 0, 0, 60, 3, 0).top_logprobs == 0
    with pytest.raises(ConfigError, match="top logprobs"):
        BackendSettings.parse("local", "", "", "completions", "", 1, 1, 64, 0, 0, 60, 3, 21)


def test_the_policy_form_asks_for_top_logprobs_where_a_model_can_give_them():
    import gradio as gr

    from dashboard.controls import _visibility, backend_controls, parse

    with gr.Blocks():
        form = backend_controls("t", policy="local")
    assert form.inputs[-1] is form.top_logprobs and form.top_logprobs.visible
    values = ["local", "", "", "completions", "", 1.0, 1.0, 64, 0.0, 0, 60, 3, 4]
    assert len(values) == len(form.inputs) and parse(*values).top_logprobs == 4
    assert _visibility("scripted")["top_logprobs"].visible is False
    assert _visibility("sglang")["top_logprobs"].visible is True


def test_an_unreachable_server_is_reported_before_the_batch(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    settings = BackendSettings.parse("sglang", "", url, "completions", "", 1, 1, 64, 0, 0)
    with pytest.raises(ConfigError, match="cannot reach http://127.0.0.1:.*is the server running"):
        plan_run("math", "0:2", 1, "auto", None, 1, settings)
    bad = BackendSettings.parse("sglang", "", "ftp://x", "completions", "", 1, 1, 64, 0, 0)
    with pytest.raises(ConfigError, match="http:// or https://"):
        bad.preflight()


def test_the_loop_thread_runs_coroutines_and_raises_their_errors():
    loop = LoopThread("test-loop")
    try:
        async def add(a: int, b: int) -> int:
            await asyncio.sleep(0)
            return a + b

        async def boom() -> None:
            raise ConfigError("bad")

        assert loop.run(add(2, 3), 5) == 5
        with pytest.raises(ConfigError, match="bad"):
            loop.run(boom(), 5)
    finally:
        loop.close()


def test_step_sessions_start_generate_commit_save_and_fork(tmp_path):
    store = Store(tmp_path / "r.db")
    sessions = Sessions(limit=2)
    s = sessions.start_new("math", "1", "areal-math", "max_turns = 3", "scripted", BackendSettings(policy="scripted"))
    _, gen = sessions.generate(s.key)
    _, turn = sessions.commit(s.key, s.hand.text_of(gen), None)
    assert turn.index == 0 and turn.reward == 1.0
    _, saved = sessions.save(s.key, store)
    assert store.get_episode(saved.id).n_turns == 1
    store.set_tags(saved.id, ["keep"])
    _, gen = sessions.generate(s.key)
    sessions.commit(s.key, "I give up.", None)
    _, again = sessions.save(s.key, store)
    assert again.id == saved.id and store.get_episode(saved.id).n_turns == 2
    assert store.get_episode(saved.id).tags == ("keep",)  # a second save keeps the tags set in between

    with pytest.raises(ConfigError, match="turn_discount takes a number"):
        sessions.start_fork(store, saved.id[:8], 1, "scripted", "turn_discount = high", BackendSettings())
    f = sessions.start_fork(store, saved.id[:8], 1, "scripted", "max_turns = 4", BackendSettings(policy="scripted"))
    assert f.hand.report.ok and f.hand.turn == 1 and f.fork_turn == 1
    _, child = sessions.save(f.key, store)
    assert child.parent_id == saved.id and child.fork_turn == 1
    # The fork runs under the parent's config with the change: the stored config says so.
    assert child.config.loop.max_turns == 4 and saved.config.loop.max_turns == 3
    assert child.config.loop == replace(saved.config.loop, max_turns=4)
    with pytest.raises(ConfigError, match="choose one task"):
        sessions.start_new("math", "0:3", "auto", None, "scripted", BackendSettings())
    sessions.start_new("math", "2", "auto", None, "scripted", BackendSettings())  # a third: the first is forgotten
    with pytest.raises(ConfigError, match="start one or fork"):
        sessions.get(s.key)


def test_serving_beyond_loopback_needs_a_login(monkeypatch):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    assert resolve_auth("127.0.0.1", None, {}) is None
    assert resolve_auth("0.0.0.0", "ann:s3:cret", {}) == ("ann", "s3:cret")
    assert resolve_auth("0.0.0.0", None, {"ROLLSCOPE_AUTH": "bob:pw"}) == ("bob", "pw")
    with pytest.raises(ConfigError, match="--auth user:password"):
        resolve_auth("0.0.0.0", None, {})
    with pytest.raises(ConfigError, match="user:password"):
        parse_auth("nopassword")

    from engine.cli import main

    monkeypatch.delenv("ROLLSCOPE_AUTH", raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == 2


def _knob_rows(html_text: str) -> dict[str, tuple[str, bool]]:
    """knob -> (shown value, marked changed) from a knob table."""
    import re

    rows = re.findall(r'<tr class="([^"]*)" data-knob="([^"]+)"><th>[^<]*</th><td class="rs-knob-v"><code>([^<]*)</code>',
                      html_text)
    return {name: (html.unescape(value), "changed" in cls) for cls, name, value in rows}


def test_the_knob_table_shows_every_knob_of_the_preset_and_marks_changes(tmp_path):
    table = _knob_rows(loop_table("auto", "retail", ""))
    slime = PRESETS["slime-tau"].to_dict()
    assert set(table) == set(slime) and not any(changed for _, changed in table.values())
    # What the table shows is what a settings line would have to say: it reads back as the preset's value.
    assert all(parse_knob(k, v) == slime[k] for k, (v, _) in table.items())
    assert "preset slime-tau (the usual one for retail)" in loop_table("auto", "retail", "")

    changed_html = loop_table("areal-math", "math", "max_turns = 9\nfeedback_wrong = \"Try again.\"")
    changed = _knob_rows(changed_html)
    assert changed["max_turns"] == ("9", True) and changed["feedback_wrong"] == ("Try again.", True)
    assert changed["turn_discount"] == (format_knob(PRESETS["areal-math"].turn_discount), False)
    assert "2 knobs changed from preset areal-math" in changed_html and "was 5" in changed_html

    bad = loop_table("tito", "math", "max_turns = 0")
    assert "max_turns must be at least 1" in bad and 'class="rs-note rs-error"' in bad
    assert "&lt;script&gt;" in loop_table("tito", "math", "tool_instruction = <script>")


def test_a_fork_table_starts_from_the_parent_config(tmp_path):
    store = Store(tmp_path / "r.db")
    sessions = Sessions(limit=2)
    s = sessions.start_new("math", "1", "tito", "max_turns = 3\nturn_discount = 0.7", "scripted",
                           BackendSettings(policy="scripted"))
    _, gen = sessions.generate(s.key)
    sessions.commit(s.key, s.hand.text_of(gen), None)
    _, saved = sessions.save(s.key, store)
    rows = _knob_rows(fork_table(store, saved.id[:8], "max_turns = 6"))
    assert rows["turn_discount"] == ("0.7", False) and rows["max_turns"] == ("6", True)
    assert "no episode" in fork_table(store, "zzzz", "").lower()
    assert "Give the episode to fork" in fork_table(store, "", "")


def _stepped_retail(sessions, store, turns):
    """A retail conversation stepped ``turns`` turns through the Step tab's sessions, saved."""
    s = sessions.start_new("retail", "0", "tito", "", "scripted", BackendSettings(policy="scripted"))
    for _ in range(turns):
        _, gen = sessions.generate(s.key)
        sessions.commit(s.key, s.hand.text_of(gen), None)
    return sessions.save(s.key, store)[1]


def test_a_dashboard_fork_of_an_episode_whose_user_was_a_model_replays_it_then_gives_the_chosen_user(tmp_path):
    store = Store(tmp_path / "r.db")
    sessions = Sessions(limit=2)
    saved = _stepped_retail(sessions, store, 2)
    # As if a model had played the user: its replies exist only in the record.
    config = replace(saved.config, env=replace(saved.config.env, user="llm"))
    store.save_episode(store.get_episode(saved.id).evolve(config=config))
    f = sessions.start_fork(store, saved.id, 1, "human", "", BackendSettings(policy="scripted"))
    assert f.hand.plays_user and f.hand.report.ok
    assert any("played by a model" in n for n in f.hand.report.notes)
    f = sessions.start_fork(store, saved.id, 1, "scripted", "", BackendSettings(policy="scripted"))
    assert not f.hand.plays_user and f.hand.report.ok
    assert "the env's simulated user answers from the fork on" in f.hand.report.notes


def test_the_step_tab_forks_an_imported_episode_with_the_recorded_user(tmp_path):
    from engine import formats

    store = Store(tmp_path / "r.db")
    sessions = Sessions(limit=2)
    saved = _stepped_retail(sessions, store, 3)
    formats.export([store.get_episode(saved.id)], "messages", tmp_path / "m.jsonl")
    imported = Store(tmp_path / "i.db")
    formats.import_path(tmp_path / "m.jsonl", "messages", imported, env="retail")
    parent = next(imported.iter_episodes())
    f = sessions.start_fork(imported, parent.id, 2, "recorded", "", BackendSettings(policy="scripted"))
    assert f.hand.report.ok and f.hand.plays_user and f.hand.turn == 2, f.hand.report.summary()
    assert any("imported with it" in n for n in f.hand.report.notes)
    with pytest.raises(ConfigError, match="the recorded user is for forks"):
        sessions.start_new("retail", "0", "tito", "", "recorded", BackendSettings(policy="scripted"))
