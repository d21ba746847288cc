"""Every episode's outcome: why it earned its reward, at the turn, as the env that scored it says.

Retail mistakes are planted by the scripted policy at a known turn (the reference reply replaced once), run
through the real loop, and the outcome must name that turn, tool and argument; math answers are planted per
turn; tau-bench results are written here in the shape its run.py writes.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
from collections import Counter

import pytest

from engine import Store, formats
from engine.analysis.replays import replay_summary
from engine.backends.scripted import ScriptedBackend
from engine.checks.diagnosis import read_episode
from engine.envs.math import MathEnv
from engine.envs.outcomes import explain
from engine.envs.retail import RetailEnv
from engine.envs.retail.data import base_db
from engine.envs.retail.kinds import ANYTHING_ELSE
from engine.envs.retail.reference import tool_call_text
from engine.envs.retail.tasks import get_task
from engine.envs.retail.tools import CANCEL_REASONS
from engine.loop.replay import replay_stored
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Action, Status
from engine.records.outcome import DbChange, OutcomeCall
from tests.conftest import ROOT
from tests.fakes import openai_tool_call, tau_cancel_result
from tests.planted_outcomes import math_episode, planted


def _write(task_id: str) -> Action:
    return next(a for a in get_task(task_id).actions if a.name == "cancel_pending_order")


def test_a_write_with_a_wrong_argument_is_named_at_its_turn_with_both_values(smol_tokenizer):
    ref = _write("cancel-00")
    other = next(r for r in CANCEL_REASONS if r != ref.arguments["reason"])
    slip = Action(ref.name, {**ref.arguments, "reason": other})
    ep, at = planted(smol_tokenizer, "cancel-00", lambda r, h: tool_call_text(slip) if r == tool_call_text(ref) else None)
    o = ep.outcome
    assert ep.status is Status.COMPLETED and ep.reward == 0.0 and len(at) == 1
    assert (o.kind, o.turn, o.differing_arguments) == ("wrong_arguments", at[0], ("reason",))
    assert o.expected == OutcomeCall(ref.name, ref.arguments) and o.taken == OutcomeCall(ref.name, slip.arguments)
    assert DbChange("orders", ref.arguments["order_id"], "cancel_reason", other, ref.arguments["reason"]) in o.db_diff
    assert f"turn {at[0]}: cancel_pending_order was called with reason={other!r}" in o.text
    assert ep.turns[at[0]].tool_calls[0].arguments["reason"] == other  # the turn named is the one that did it


def test_a_write_never_made_is_not_called(smol_tokenizer):
    ref = _write("cancel-00")
    ep, at = planted(smol_tokenizer, "cancel-00", lambda r, h: ANYTHING_ELSE if r == tool_call_text(ref) else None)
    o = ep.outcome
    assert ep.reward == 0.0 and at
    assert (o.kind, o.turn, o.taken, o.differing_arguments) == ("not_called", None, None, ())
    assert o.expected == OutcomeCall(ref.name, ref.arguments)
    assert o.db_diff and all(c.table == "orders" and c.key == ref.arguments["order_id"] for c in o.db_diff)


def test_a_write_the_reference_lacks_is_an_extra_write(smol_tokenizer):
    task = get_task("cancel-00")
    user = base_db()["users"][task.user_id]
    extra = Action("modify_user_address", {"user_id": task.user_id, **{**user["address"], "zip": "99999"}})
    last = task.script[-1].text

    def plant(reply, history):
        done = any(m.role == "assistant" and '"modify_user_address"' in m.content for m in history)
        return tool_call_text(extra) if reply == last and not done else None

    ep, at = planted(smol_tokenizer, "cancel-00", plant)
    o = ep.outcome
    assert ep.reward == 0.0 and len(at) == 1
    assert (o.kind, o.turn, o.expected) == ("extra_write", at[0], None)
    assert o.taken == OutcomeCall("modify_user_address", extra.arguments)
    assert DbChange("users", task.user_id, "address.zip", "99999", user["address"]["zip"]) in o.db_diff


def test_an_output_never_said_is_a_missing_output(smol_tokenizer):
    task = get_task("tracking-00")  # its tracking number is said only in the last reply
    last = task.script[-1].text
    assert task.outputs and task.outputs[0] in last
    ep, at = planted(smol_tokenizer, "tracking-00", lambda r, h: ANYTHING_ELSE if r == last else None)
    o = ep.outcome
    assert ep.reward == 0.0 and at
    assert (o.kind, o.missing_outputs, o.db_diff, o.expected, o.taken) == ("missing_output", task.outputs, (), None, None)


def test_the_reference_run_is_a_success(smol_tokenizer):
    ep, at = planted(smol_tokenizer, "return-00", lambda r, h: None)
    assert ep.reward == 1.0 and not at
    assert (ep.outcome.kind, ep.outcome.turn, ep.outcome.db_diff) == ("success", None, ())


def test_a_call_to_a_tool_the_episode_does_not_offer_is_no_write(smol_tokenizer):
    """A record whose answers do not say a call failed (a chat import, an env that echoes) may hold a call to a tool
    that does not exist: it wrote nothing, so it is no extra write, where the episode lists its tools. Where it
    lists none, every name is taken for a tool."""
    import dataclasses

    from engine.records.episode import Message, ToolCall

    ep, _ = planted(smol_tokenizer, "return-00", lambda r, h: None)
    assert ep.tools and ep.outcome.kind == "success"
    k = next(t.index for t in ep.turns if t.tool_calls)  # a turn that called a tool: one more call, answered "done"
    turns = list(ep.turns)
    turns[k] = dataclasses.replace(turns[k], tool_calls=turns[k].tool_calls + (
        ToolCall("delete_all_orders", {"confirm": True}),), observation=turns[k].observation + (
        Message("tool", "done", name="delete_all_orders"),))
    chat = dataclasses.replace(ep, turns=tuple(turns))
    assert explain(chat).kind == "success"
    listed_none = explain(dataclasses.replace(chat, tools=()))
    assert (listed_none.kind, listed_none.taken) == ("extra_write", OutcomeCall("delete_all_orders", {"confirm": True}))


def test_at_a_mistake_rate_every_completed_episode_is_explained_as_its_reward_says(smol_tokenizer):
    kinds: Counter[str] = Counter()
    for task_id in RetailEnv().tasks[:30]:
        backend = ScriptedBackend(RetailEnv().reference_reply, smol_tokenizer, mistake_rate=0.3, seed=3)
        ep = asyncio.run(run_episode(RetailEnv(), backend, smol_tokenizer, PRESETS["slime-tau"], task_id))
        kinds[ep.outcome.kind] += 1
        if ep.status is Status.COMPLETED:
            assert (ep.reward == 1.0) == (ep.outcome.kind == "success"), (task_id, ep.outcome)
            assert ep.outcome.db_diff == () or ep.reward == 0.0
        # What the env computed live is what the record gives again (a stored episode's fill).
        assert explain(ep) == ep.outcome
    assert kinds["success"] >= 10 and sum(kinds.values()) - kinds["success"] >= 3


# -- math ------------------------------------------------------------------------


def test_math_outcomes_name_each_case(smol_tokenizer):
    right = "Let me see.\nThe answer is \\boxed{{{}}}."
    task_answer = MathEnv().task(MathEnv().tasks[0]).solutions[0]
    wrong = right.format(int(task_answer) + 1)
    ok = right.format(task_answer)
    ep, ref = math_episode(smol_tokenizer, [ok])
    assert (ep.outcome.kind, ep.outcome.turn, ep.outcome.reference_answer) == ("correct", 0, ref)
    ep, _ = math_episode(smol_tokenizer, [wrong, ok, wrong])
    o = ep.outcome
    assert (o.kind, o.turn) == ("right_answer_not_scored", 1)
    assert [(a.turn, a.extracted, a.correct) for a in o.answers] == [
        (0, str(int(ref) + 1), False), (1, ref, True), (2, str(int(ref) + 1), False)]
    ep, _ = math_episode(smol_tokenizer, [wrong, wrong])
    assert (ep.outcome.kind, ep.outcome.turn) == ("wrong_answer", 1)
    ep, _ = math_episode(smol_tokenizer, [f"The answer is {ref}."])
    assert (ep.outcome.kind, ep.outcome.turn, ep.outcome.answers[0].extracted) == ("no_boxed", 0, None)
    ep, _ = math_episode(smol_tokenizer, ["Let me think about this carefully, step by step, before I answer. " * 8 + ok],
                  max_new_tokens=12)
    assert ep.turns[0].generation.finish_reason == "length"
    assert (ep.outcome.kind, ep.outcome.turn) == ("cut_by_length", 0)
    assert not ep.outcome.every_turn and ep.outcome.scored_turns == (0,)


def test_a_math_reward_summed_over_turns_is_explained_by_every_turn(smol_tokenizer):
    """AReaL's fixed turns: the reward is the first turn's return, each turn's shaped reward (+1 right, -1 wrong)
    summed, so a right last answer can stand beside a reward of -1. The outcome counts every turn, from the first
    wrong one, and says neither pass nor fail where right and wrong turns mix."""
    task_answer = MathEnv().task(MathEnv().tasks[0]).solutions[0]
    right = "Let me see.\nThe answer is \\boxed{{{}}}."
    wrong, ok = right.format(int(task_answer) + 1), right.format(task_answer)
    ep, _ = math_episode(smol_tokenizer, [wrong, wrong, ok], preset="areal-math")
    o = ep.outcome
    assert ep.reward == -1.0 and (o.kind, o.turn, o.every_turn, o.passed) == ("some_turns_wrong", 0, True, None)
    assert o.scored_turns == (0, 1, 2)
    assert o.text == "right at turn 2, wrong at turns 0 and 1; every turn's reward counts (the reward -1 sums them)"
    ep, _ = math_episode(smol_tokenizer, [ok, wrong, ok], preset="areal-math")
    assert ep.reward == 1.0 and (ep.outcome.kind, ep.outcome.turn) == ("some_turns_wrong", 1)
    ep, _ = math_episode(smol_tokenizer, [ok, ok], preset="areal-math")
    assert ep.reward == 2.0 and (ep.outcome.kind, ep.outcome.turn, ep.outcome.passed) == ("correct", 1, True)
    ep, _ = math_episode(smol_tokenizer, [wrong, f"The answer is {task_answer}."], preset="areal-math")
    assert ep.reward == -2.0 and (ep.outcome.kind, ep.outcome.turn) == ("no_boxed", 1)
    assert ep.outcome.text.startswith("every turn answered wrong and each counts (the reward -2 sums them)")
    # The same replies under a loop scored by the last turn: the early right answer was not scored.
    ep, _ = math_episode(smol_tokenizer, [ok, wrong])
    assert (ep.outcome.kind, ep.outcome.every_turn, ep.outcome.passed) == ("right_answer_not_scored", False, False)
    assert explain(ep) == ep.outcome


def test_an_outcome_of_record_version_8_is_computed_again_only_where_the_reward_sums_turns(smol_tokenizer):
    """Version 8 explained a summed reward by the last answer alone: read, that outcome is computed again; any
    other outcome is kept as it was written, and says it counted the last turn."""
    task_answer = MathEnv().task(MathEnv().tasks[0]).solutions[0]
    right = "The answer is \\boxed{{{}}}."
    ep, _ = math_episode(smol_tokenizer, [right.format(int(task_answer) + 1), right.format(task_answer)],
                         preset="areal-math")
    d = ep.to_dict()
    old = {k: v for k, v in d["outcome"].items() if k != "every_turn"}
    v8 = {**d, "schema_version": 8, "outcome": {**old, "kind": "correct", "turn": 1, "text": "turn 1: right"}}
    assert read_episode(v8).outcome == ep.outcome and ep.outcome.kind == "some_turns_wrong"
    retail = asyncio.run(run_episode(RetailEnv(), ScriptedBackend(RetailEnv().reference_reply, smol_tokenizer),
                                     smol_tokenizer, PRESETS["slime-tau"], RetailEnv().tasks[0]))
    d = retail.to_dict()
    stale = {**{k: v for k, v in d["outcome"].items() if k != "every_turn"}, "text": "as version 8 said it"}
    got = read_episode({**d, "schema_version": 8, "outcome": stale}).outcome
    assert got.text == "as version 8 said it" and got.every_turn is False and got.kind == retail.outcome.kind


# -- tau-bench results ---------------------------------------------------------------


def _tau_result(reason: str) -> dict:
    """tau-bench's run.py result for task 0 of the fake tau_bench, with the task it records in ``info``."""
    r = tau_cancel_result(reward=1.0 if reason == "no longer needed" else 0.0)
    r["traj"][6]["tool_calls"] = [openai_tool_call("c2", "cancel_pending_order", {"order_id": "#A1", "reason": reason})]
    r["info"]["task"] = {"user_id": "ana_1", "instruction": "Cancel #A1.", "outputs": [], "actions": [
        {"name": "find_user_id_by_name_zip", "kwargs": {"name": "Ana Ito", "zip": "10001"}},
        {"name": "cancel_pending_order", "kwargs": {"order_id": "#A1", "reason": "no longer needed"}}]}
    return r


def _import(tmp_path, results):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    store = Store(tmp_path / "x.db")
    formats.import_path(path, "taubench", store, env="taubench:retail")
    return store


def test_a_chat_record_call_to_a_tool_not_offered_is_no_write_and_namespaced_tools_are_offered(tmp_path, monkeypatch):
    """Read from a record's messages (no env answers kept on turns): a call to a tool the tools list does not name,
    answered "ok", is no extra write; tools listed under a namespace (``functions.cancel_pending_order``) are the
    same tools; a reference write whose tool is not listed says so, not "refused"."""
    import dataclasses
    import sys

    from engine.records.episode import Message, ToolCall

    monkeypatch.setitem(sys.modules, "tau_bench", None)
    store = _import(tmp_path, [_tau_result("no longer needed")])
    ep = next(store.iter_episodes())
    store.close()
    # As a chat import holds it: the calls and answers in its messages alone.
    ep = dataclasses.replace(ep, turns=tuple(dataclasses.replace(t, observation=()) for t in ep.turns))
    assert explain(ep).kind == "success"
    last = max(i for i, m in enumerate(ep.messages) if m.role == "assistant")
    extra = (Message("assistant", "", tool_calls=(ToolCall("wipe_orders", {"all": True}, id="w"),)),
             Message("tool", "ok", name="wipe_orders"))
    chat = dataclasses.replace(ep, messages=ep.messages[:last] + extra + ep.messages[last:])
    schema = [{"type": "function", "function": {"name": f"functions.{n}"}}
              for n in ("find_user_id_by_name_zip", "cancel_pending_order")]
    assert explain(dataclasses.replace(chat, tools=())).kind == "extra_write"  # no tools listed: a tool it may be
    assert explain(dataclasses.replace(chat, tools=tuple(schema))).kind == "success"
    unlisted = explain(dataclasses.replace(ep, tools=tuple(schema[:1])))
    assert unlisted.kind == "wrong_arguments" and unlisted.text.endswith(
        "cancel_pending_order was called as the reference does, but the episode's tools do not list it")


def test_tau_bench_results_are_explained_from_the_recorded_task_without_tau_bench(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tau_bench", None)  # not installed, whatever ran before
    store = _import(tmp_path, [_tau_result("ordered by mistake"), _tau_result("no longer needed")])
    by_reward = {ep.reward: ep.outcome for ep in store.iter_episodes()}
    o = by_reward[0.0]
    assert (o.kind, o.turn, o.differing_arguments) == ("wrong_arguments", 2, ("reason",))
    assert o.taken == OutcomeCall("cancel_pending_order", {"order_id": "#A1", "reason": "ordered by mistake"})
    assert o.db_diff == ()  # nothing re-executed: tau-bench is not installed here
    assert by_reward[1.0].kind == "success"
    # The store's index filters by it, and explain prints it, one JSON object a line.
    assert store.count(formats_filter("outcome=wrong_arguments")) == 1
    assert store.outcome_counts() == {None: {"success": 1, "wrong_arguments": 1}}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "explain", "--db", str(tmp_path / "x.db"), "--json",
                           "--where", "outcome=wrong_arguments"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    got = json.loads(line)
    assert set(got) == {"episode_id", "task_id", "reward", "outcome"} and got["task_id"] == "0"
    assert {k: got["outcome"][k] for k in ("kind", "turn", "differing_arguments", "expected")} == {
        "kind": "wrong_arguments", "turn": 2, "differing_arguments": ["reason"],
        "expected": {"name": "cancel_pending_order", "arguments": {"order_id": "#A1", "reason": "no longer needed"}}}
    none = subprocess.run([sys.executable, "-m", "engine.cli", "explain", "--db", str(tmp_path / "x.db"),
                           "--where", "outcome=wrong_answer"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    # As ``check``: an answer about nothing exits 2, saying why on stderr (a script reading stdout gets no line).
    assert (none.returncode, none.stdout, none.stderr) == (
        2, "", f"rollscope: nothing explained: no episode matched outcome=wrong_answer in {tmp_path / 'x.db'}\n")
    empty = subprocess.run([sys.executable, "-m", "engine.cli", "explain", "--db", str(tmp_path / "x.db"), "--json",
                            "--where", "outcome=wrong_answer"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (empty.returncode, empty.stdout) == (2, "")
    both = subprocess.run([sys.executable, "-m", "engine.cli", "explain", got["episode_id"], "--db",
                           str(tmp_path / "x.db"), "--where", "env=math"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)  # an id and a filter: which one was meant is not guessed
    assert (both.returncode, both.stdout) == (2, "") and "give an episode id or --where, not both" in both.stderr
    store.close()


def formats_filter(clause: str):
    from engine.store import EpisodeFilter

    return EpisodeFilter.from_where([clause])


def test_with_tau_bench_installed_the_calls_are_replayed_for_the_database_diff(tmp_path, fake_tau_bench):
    result = _tau_result("ordered by mistake")
    del result["info"]["task"]  # the installed tau-bench's task stands in
    store = _import(tmp_path, [result])
    o = next(store.iter_episodes()).outcome
    assert (o.kind, o.turn, o.differing_arguments) == ("wrong_arguments", 2, ("reason",))
    assert o.db_diff == (DbChange("orders", "#A1", "reason", "ordered by mistake", "no longer needed"),)
    store.close()


def test_an_env_without_an_explanation_gives_its_own_reason(smol_tokenizer):
    from tests.toolenv import PriceEnv

    backend = ScriptedBackend(PriceEnv().reference_reply, smol_tokenizer)
    ep = asyncio.run(run_episode(PriceEnv(), backend, smol_tokenizer, PRESETS["tito"], "fig"))
    assert ep.outcome.kind == "other" and ep.outcome.text.startswith("reward 1")


def test_show_prints_the_outcome_under_the_reward(tmp_path, smol_tokenizer):
    ref = _write("cancel-00")
    slip = Action(ref.name, {**ref.arguments, "reason": "ordered by mistake" if ref.arguments["reason"] !=
                             "ordered by mistake" else "no longer needed"})
    ep, at = planted(smol_tokenizer, "cancel-00", lambda r, h: tool_call_text(slip) if r == tool_call_text(ref) else None)
    store = Store(tmp_path / "x.db")
    store.save_episode(ep)
    store.close()
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "show", ep.id, "--db", str(tmp_path / "x.db")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines[1].startswith("reward 0.0000")
    assert lines[2].startswith(f"outcome: wrong_arguments at turn {at[0]}: ")
    assert any(line.strip().startswith("differs   reason: ") for line in lines[3:8])


@pytest.mark.parametrize("kind", ["not_called"])
def test_an_old_record_gets_its_outcome_when_read(kind, smol_tokenizer):
    """A version-4 record (no outcome) read through read_episode gets what the env computes."""
    from engine.checks.diagnosis import read_episode

    ref = _write("cancel-00")
    ep, _ = planted(smol_tokenizer, "cancel-00", lambda r, h: ANYTHING_ELSE if r == tool_call_text(ref) else None)
    d = copy.deepcopy(ep.to_dict())
    d["schema_version"] = 4
    del d["outcome"]
    assert read_episode(d).outcome.kind == kind
    d5 = {**ep.to_dict(), "outcome": None}
    assert read_episode(d5).outcome is None  # a version-5 record says what it holds


def test_an_older_golden_database_gets_its_outcomes_on_open_once(tmp_path):
    import shutil
    import sqlite3

    path = tmp_path / "old.sqlite"
    shutil.copy(ROOT / "tests" / "golden" / "dbschema6.sqlite", path)
    store = Store(path)
    assert "0011_outcomes" in store.applied and store.filled == 10
    # The areal-math episodes' rewards sum every turn: right and wrong turns together are some_turns_wrong.
    assert store.outcome_counts() == {None: {"correct": 3, "some_turns_wrong": 3, "other": 2,
                                             "wrong_arguments": 1, "success": 1}}
    (ep,) = store.iter_episodes(formats_filter("outcome=wrong_arguments"))
    assert (ep.env, ep.task_id, ep.outcome.differing_arguments) == ("retail", "cancel-00", ("reason",))
    store.close()
    conn = sqlite3.connect(path)
    versions = {r[0] for r in conn.execute("SELECT schema_version FROM episodes")}
    conn.close()
    assert versions == {4}  # only the outcome was added: each row keeps the version its turns were written at
    again = Store(path)
    assert again.applied == [] and again.filled == 0
    assert next(again.iter_episodes(formats_filter("outcome=wrong_arguments"))).outcome == ep.outcome
    again.close()


def test_a_schema_10_golden_database_explains_its_summed_math_rewards_again_once(tmp_path):
    """``0015_summed_outcomes``: the stored areal-math episodes, explained by their last answer, get the outcome of
    every turn, in the record and in the column Browse filters on; the others keep theirs; a second open does
    nothing."""
    import shutil
    import sqlite3

    path = tmp_path / "old.sqlite"
    shutil.copy(ROOT / "tests" / "golden" / "dbschema10.sqlite", path)
    conn = sqlite3.connect(path)
    before = dict(conn.execute("SELECT id, outcome FROM episodes"))
    conn.close()
    store = Store(path)
    assert "0015_summed_outcomes" in store.applied and store.filled == 5
    eps = {e.id: e for e in store.iter_episodes()}
    summed = {eid for eid, e in eps.items() if e.outcome.every_turn}
    assert len(summed) == 5 and all(eps[eid].config.loop.episode_reward == "first_return" for eid in summed)
    assert all(e.outcome.kind == before[eid] for eid, e in eps.items() if eid not in summed)
    assert {before[eid] for eid in summed} == {"correct", "right_answer_not_scored"}
    assert sorted(eps[eid].outcome.kind for eid in summed) == ["correct", "correct", "some_turns_wrong",
                                                               "some_turns_wrong", "some_turns_wrong"]
    for eid in summed:  # the reward, as the outcome says, is each turn's +1 or -1 summed
        o = eps[eid].outcome
        assert eps[eid].reward == sum(1 if a.correct else -1 for a in o.answers), eid
    rows = [e.id for e in store.iter_episodes(formats_filter("outcome=some_turns_wrong"))]
    assert sorted(rows) == sorted(eid for eid in summed if eps[eid].outcome.kind == "some_turns_wrong")
    store.close()
    again = Store(path)
    assert again.applied == [] and again.filled == 0
    assert {e.id: e.outcome for e in again.iter_episodes()} == {eid: e.outcome for eid, e in eps.items()}
    again.close()


def test_an_import_that_lacks_what_the_env_reads_is_not_explained_as_a_failure(smol_tokenizer, tmp_path):
    """A trainer's dump keeps tokens and one reward. Read off its mask, an episode's replies have no text without a
    tokenizer, and no tool calls or env answers at all: its outcome says so (``other``), rather than "never called"
    or "no answer". With text, a single answer is judged as in the loop; several, under a reward whose rule the
    record does not say, are listed and not called right or wrong."""
    from engine.formats.slime import episode_to_sample
    from tests.fixtures_formats import write_slime_dump

    ref = _write("cancel-00")
    retail, _ = planted(smol_tokenizer, "cancel-00", lambda r, h: None)
    one, truth = math_episode(smol_tokenizer, [f"So \\boxed{{{MathEnv().task(MathEnv().tasks[0]).solutions[0]}}}."])
    several, _ = math_episode(smol_tokenizer, ["\\boxed{1}", f"\\boxed{{{truth}}}"], preset="areal-math")
    assert (retail.outcome.kind, one.outcome.kind) == ("success", "correct") and several.n_turns == 2
    assert ref.name in {c.name for t in retail.turns for c in t.tool_calls}
    # A trainer's dump names no tokenizer (Rollscope's own export does: left out here, as slime writes none).
    dump = write_slime_dump(tmp_path / "0.pt", [episode_to_sample(e.evolve(tokenizer=""), i, i)
                                                for i, e in enumerate((retail, one, several))])
    got = {}
    replays = {}
    for tok in (None, smol_tokenizer):
        store = Store(tmp_path / f"{tok is None}.db")
        try:
            formats.import_path(dump, "slime", store, tokenizer=tok)
            got[tok is None] = {e.source.details["original_id"]: e.outcome for e in store.iter_episodes()}
            replays[tok is None] = {e.source.details["original_id"]: asyncio.run(replay_stored(e))
                                    for e in store.iter_episodes()}
        finally:
            store.close()
    # Nor are their actions re-executed: empty replies would diverge at once.
    for r in (replays[True][retail.id], replays[True][several.id], replays[False][retail.id]):
        assert not r.reproducible and r.reason.startswith("its record lacks the actions: its ")
    assert replay_summary(replays[True].values())[0].startswith("0 of 3 episodes re-executed: ")
    bare, decoded = got[True], got[False]
    for o in (bare[retail.id], decoded[retail.id]):  # with a tokenizer or not: no calls to compare
        assert o.kind == "other" and "holds no tool calls parsed from the replies" in o.text and not o.scored_turns
    assert bare[one.id].kind == decoded[one.id].kind == "correct"  # slime's response text holds a one-turn reply
    assert bare[several.id].kind == "other" and "token ids without their text" in bare[several.id].text
    o = decoded[several.id]
    assert o.kind == "other" and "does not say whether it scores the last answer" in o.text
    assert [(a.turn, a.correct) for a in o.answers] == [(0, False), (1, True)] and o.scored_turns == ()
