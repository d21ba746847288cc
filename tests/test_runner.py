"""Batches: bounded concurrency, write-as-you-go, cancellation, failures."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends.base import SamplingParams
from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.launch.batch import BatchSpec, _sampling_for, run_batch
from engine.presets import PRESETS
from engine.records.episode import Status
from engine.store import EpisodeFilter, Store

ROOT = Path(__file__).resolve().parents[1]


def spec(tasks, samples=2, concurrency=3, preset="tito", max_turns=3):
    return BatchSpec("math", tuple(tasks), samples, preset, PRESETS[preset].with_(max_turns=max_turns),
                     SamplingParams(), "scripted", concurrency=concurrency)


class SlowBackend:
    """Scripted answers after a delay; records how many requests were in flight at once."""

    name = "slow"

    def __init__(self, tok, delay=0.02):
        self.inner = ScriptedBackend(MathEnv().reference_reply, tok, mistake_rate=1.0)
        self.delay = delay
        self.in_flight = 0
        self.peak = 0
        self.calls = 0

    async def generate(self, request):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.calls += 1
        try:
            await asyncio.sleep(self.delay)
            return await self.inner.generate(request)
        finally:
            self.in_flight -= 1

    def describe(self):
        return {"name": self.name}


def test_tasks_times_samples_stored_with_groups(tmp_path, smol_tokenizer):
    tasks = MathEnv().tasks[:3]
    store = Store(tmp_path / "b.db")
    seen = []
    res = asyncio.run(run_batch(spec(tasks), MathEnv, ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, 0.5), smol_tokenizer,
                                store, on_episode=lambda ep, n, total: seen.append((n, total))))
    assert len(res.episodes) == 6 and store.count() == 6
    assert sorted(n for n, _ in seen) == list(range(1, 7)) and {t for _, t in seen} == {6}
    for task in tasks:
        eps = [e for e in res.episodes if e.task_id == task]
        assert sorted(e.sample_index for e in eps) == [0, 1]
        assert len({e.group_id for e in eps}) == 1
        assert len({e.config.sampling.seed for e in eps}) == 2  # samples of a task draw differently
    row = store.db.execute("SELECT status, n_episodes FROM runs WHERE id = ?", [res.run_id]).fetchone()
    assert row == ("finished", 6)


def test_concurrency_is_bounded(smol_tokenizer):
    be = SlowBackend(smol_tokenizer)
    asyncio.run(run_batch(spec(MathEnv().tasks[:6], concurrency=3), MathEnv, be, smol_tokenizer, None))
    assert be.peak == 3 and be.calls == 6 * 2 * 3


def test_cancel_keeps_finished_and_interrupts_the_rest(tmp_path, smol_tokenizer):
    store = Store(tmp_path / "c.db")
    be = SlowBackend(smol_tokenizer, delay=0.05)

    async def go():
        task = asyncio.create_task(run_batch(spec(MathEnv().tasks[:10], samples=1, concurrency=2), MathEnv, be,
                                             smol_tokenizer, store, run_id="r1"))
        # cancel with two episodes done and at least one mid-way (a turn committed)
        while store.count(EpisodeFilter(status=("truncated",))) < 2 or not store.count(EpisodeFilter(status=("running",))):
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    done = store.count(EpisodeFilter(status=("truncated",)))
    interrupted = store.count(EpisodeFilter(status=("interrupted",)))
    assert done >= 2 and 1 <= interrupted <= 2
    assert store.count() == done + interrupted  # the ones never started were never written
    assert store.db.execute("SELECT status FROM runs WHERE id = 'r1'").fetchone()[0] == "cancelled"


class BuggyEnv(MathEnv):
    def step(self, action):
        raise AssertionError("unreachable")  # a bug in env code: not the env's declared failure, so the episode fails

    def reset(self, task_id):
        if task_id.endswith("1"):
            raise KeyError("oops")  # a bug while setting up: the episode fails
        return super().reset(task_id)


def test_bugs_fail_one_episode_not_the_batch(smol_tokenizer):
    tasks = [t for t in MathEnv().tasks[:12] if t.endswith(("0", "1"))][:2]
    res = asyncio.run(run_batch(spec(tasks, samples=1), BuggyEnv, ScriptedBackend(MathEnv().reference_reply, smol_tokenizer),
                                smol_tokenizer, None))
    by_task = {e.task_id: e for e in res.episodes}
    failed = by_task[next(t for t in tasks if t.endswith("1"))]
    assert failed.status is Status.FAILED and "KeyError" in failed.reason
    assert any(f.kind == "internal_error" and "Traceback" in f.evidence["traceback"] for f in failed.findings)
    buggy = by_task[next(t for t in tasks if t.endswith("0"))]
    assert buggy.status is Status.FAILED and "AssertionError" in buggy.reason
    assert buggy.n_turns == 0  # the turn in flight is not committed; the traceback says where it broke
    assert any("env.step" in f.evidence.get("traceback", "") or "step" in f.evidence.get("traceback", "")
               for f in buggy.findings if f.kind == "internal_error")


def test_episode_seeds_are_stable_across_processes():
    code = ("from engine.launch.batch import BatchSpec, _sampling_for; from engine.backends.base import SamplingParams; "
            "from engine.presets import PRESETS; "
            "s = BatchSpec('math', ('a',), 1, 'tito', PRESETS['tito'], SamplingParams(), 'scripted', seed=7); "
            "print(_sampling_for(s, 'arith-add-0000', 3).seed)")
    outs = set()
    for hashseed in ("1", "2"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": hashseed}
        outs.add(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.strip())
    assert len(outs) == 1
    s = BatchSpec("math", ("a",), 1, "tito", PRESETS["tito"], SamplingParams(), "scripted", seed=7)
    assert str(_sampling_for(s, "arith-add-0000", 3).seed) in outs
