"""Text nobody can store (lone surrogates) and a store that fails on one episode never take down a batch."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from engine import BackendSettings, EpisodeFilter, Generation, Store, formats, plan_run, run_batch
from engine.envs.math import MathEnv

SURROGATE = "\ud800"


class SurrogateBackend:
    """Answers every turn with a boxed answer and a lone surrogate in its text (as a JSON ``\\ud800`` decodes)."""

    name = "surrogate"

    def __init__(self, tok):
        self.tok = tok

    async def generate(self, request):
        ids = self.tok.encode("The answer is \\boxed{4}.<|im_end|>", add_special_tokens=False)
        return Generation(text=f"The answer is \\boxed{{4}}. {SURROGATE}<|im_end|>", token_ids=tuple(ids),
                          logprobs=tuple(-0.5 for _ in ids), finish_detail=f"odd {SURROGATE}")

    def describe(self):
        return {"name": self.name}


def _plan(tasks="0:4"):
    return plan_run("math", tasks, 1, "tito", "max_turns = 2", 2, BackendSettings(), preflight=False)


def test_a_batch_of_replies_with_lone_surrogates_is_stored_whole_and_exports(tmp_path, smol_tokenizer):
    store = Store(tmp_path / "x.db")
    plan = _plan()
    result = asyncio.run(run_batch(plan.spec(), plan.make_env, SurrogateBackend(smol_tokenizer), smol_tokenizer, store))
    rows = store.list_episodes(EpisodeFilter(run_id=result.run_id))
    assert len(rows) == 4 and {r.status for r in rows} == {"truncated"}
    assert store.db.execute("SELECT status FROM runs").fetchall() == [("finished",)]
    for r in rows:
        ep = store.get_episode(r.id)
        replaced = [f for f in ep.all_findings() if f.kind == "text_replaced"]
        assert len(replaced) == ep.n_turns and all(f.evidence == {"where": "generation", "replaced": 2}
                                                    for f in replaced)
        assert all("\ufffd" in t.generation.text and SURROGATE not in t.generation.text for t in ep.turns)
        assert any("\ufffd" in m.content for m in ep.messages if m.role == "assistant")
    # The episode's text can be found, and every export of the database works.
    for fmt, name in (("jsonl", "x.jsonl"), ("parquet", "x.parquet"), ("messages", "m.jsonl")):
        assert formats.export(store.iter_episodes(), fmt, tmp_path / name) == 4
    line = (tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()[0]
    assert "\ufffd" in json.loads(line)["turns"][0]["generation"]["text"]
    store.set_note(rows[0].id, f"pasted {SURROGATE} text")
    assert store.get_episode(rows[0].id).note == "pasted \ufffd text"
    store.close()


class SurrogateEnv(MathEnv):
    def step(self, action):
        res = super().step(action)
        return dataclasses.replace(res, observation=tuple(
            dataclasses.replace(m, content=m.content + " \udfff") for m in res.observation))


def test_an_env_observation_with_a_lone_surrogate_is_made_safe(tmp_path, smol_tokenizer):
    from engine.backends.scripted import ScriptedBackend

    store = Store(tmp_path / "x.db")
    plan = _plan("0:2")
    make_env = lambda: SurrogateEnv()  # noqa: E731
    backend = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=1.0)
    asyncio.run(run_batch(plan.spec(), make_env, backend, smol_tokenizer, store))
    eps = list(store.iter_episodes())
    assert len(eps) == 2
    for ep in eps:
        first = ep.turns[0]
        assert [f.evidence["where"] for f in first.findings if f.kind == "text_replaced"] == ["env's observation"]
        assert first.observation[0].content.endswith("\ufffd")
    store.close()


class FlakyStore(Store):
    """Fails to store one episode the first time it is asked (a bug in writing or indexing it)."""

    def __init__(self, path, bad_task):
        super().__init__(path)
        self.bad_task = bad_task
        self.failed = False

    def finish_episode(self, ep):
        if ep.task_id == self.bad_task and not self.failed:
            self.failed = True
            raise RuntimeError("disk hiccup while indexing")
        super().finish_episode(ep)


def test_an_episode_the_store_cannot_take_ends_failed_and_the_batch_goes_on(tmp_path, smol_tokenizer):
    from engine.backends.scripted import ScriptedBackend

    plan = _plan("0:4")
    store = FlakyStore(tmp_path / "x.db", bad_task=plan.tasks[1])
    backend = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer)
    result = asyncio.run(run_batch(plan.spec(), plan.make_env, backend, smol_tokenizer, store))
    by_task = {e.task_id: e for e in store.iter_episodes()}
    assert len(by_task) == 4 and store.failed
    bad = by_task[plan.tasks[1]]
    assert bad.status.value == "failed" and bad.reason == "could not be stored: RuntimeError: disk hiccup while indexing"
    assert [f.kind for f in bad.findings] == ["internal_error"]
    assert all(e.status.value != "failed" for t, e in by_task.items() if t != plan.tasks[1])
    assert len(result.episodes) == 4
    assert store.db.execute("SELECT status FROM runs").fetchall() == [("finished",)]
    store.close()


def test_a_batch_that_stops_on_an_error_says_so_in_its_run_row(tmp_path, smol_tokenizer):
    from engine.backends.scripted import ScriptedBackend

    plan = _plan("0:2")
    store = Store(tmp_path / "x.db")
    calls = []

    def make_env():
        calls.append(1)
        if len(calls) > 1:  # the first episode builds its env; the second cannot
            raise RuntimeError("env factory broke")
        return MathEnv()

    with pytest.raises(RuntimeError, match="env factory broke"):
        asyncio.run(run_batch(plan.spec(), make_env, ScriptedBackend(MathEnv().reference_reply, smol_tokenizer),
                              smol_tokenizer, store))
    assert store.db.execute("SELECT status FROM runs").fetchall() == [("failed",)]
    store.close()
