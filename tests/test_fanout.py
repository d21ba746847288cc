"""The checks fanned out: worker processes and a local Ray give the findings one process gives.

The corpus is our own loop's episodes with one known bug planted in each (``tests/planted.py``), so the
findings compared are real roots at real tokens, not empty lists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine.checks.fanout import Fanout, check_chunk, check_episodes
from engine.store import Store
from tests import planted

ROOT = Path(__file__).resolve().parents[1]
PLANTS = (planted.mask_shift_right, planted.logprobs_shift_right, planted.drop_gen_prompt, planted.nan_logprobs_turn,
          planted.end_of_turn_untrained)


@pytest.fixture(scope="module")
def corpus(smol_tokenizer):
    out = []
    for name in planted.BASES:
        base = planted.build_base(name, smol_tokenizer, "smollm2")
        out.append(base.episode)
        for plant in PLANTS:
            p = plant(base)
            out.append(p.episode.evolve(id=f"{p.episode.id}-{plant.__name__}"))
    return out


def _findings(episodes):
    return {ep.id: sorted((f.kind, f.severity.value, f.turn, f.token_start, f.caused_by is None)
                          for f in ep.all_findings()) for ep in episodes}


def test_two_worker_processes_find_what_one_process_finds(corpus):
    assert len(corpus) == 24
    with Fanout(1) as one:
        alone = list(check_episodes(one, corpus))
    with Fanout(2) as two:
        pooled = list(check_episodes(two, corpus))
        assert two._pool is not None  # 24 episodes: more than a round, so the workers ran them
    assert [e.id for e in pooled] == [e.id for e in corpus]  # in order
    want = _findings(alone)
    assert _findings(pooled) == want
    # The planted bugs were found: every planted copy has a root error or warning.
    roots = {eid: [k for k, sev, _, _, root in fs if root and sev != "info"] for eid, fs in want.items()}
    plantings = [e.id for e in corpus if any(e.id.endswith(p.__name__) for p in PLANTS)]
    assert len(plantings) == 20 and all(roots[eid] for eid in plantings)


def test_a_small_batch_runs_here_without_starting_processes(corpus):
    with Fanout(2) as fan:
        out = list(fan.map(check_chunk, [], chunk=4))
        assert out == [] and fan._pool is None
        list(check_episodes(fan, corpus[:3]))
        assert fan._pool is None


def test_an_unreachable_ray_address_or_a_missing_ray_is_a_clear_error(monkeypatch, corpus):
    import builtins

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match=r"rollscope\[ray\]"):
        list(check_episodes(Fanout(2, ray="local"), corpus[:2]))


def test_check_on_a_local_ray_stores_the_findings_one_process_stores(tmp_path, corpus):
    """``rollscope check DB --ray``: a local Ray on both cores; the stored findings equal ``--workers 1``'s."""
    dbs = []
    for name in ("one", "ray"):
        store = Store(tmp_path / f"{name}.db")
        store.save_episodes(ep.evolve(findings=(), turns=tuple(replace(t, findings=()) for t in ep.turns))
                            for ep in corpus)
        store.close()
        dbs.append(tmp_path / f"{name}.db")
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    outs = []
    for db, extra in ((dbs[0], ["--workers", "1"]), (dbs[1], ["--ray", "--workers", "2"])):
        proc = subprocess.run([sys.executable, "-m", "engine.cli", "check", str(db), "--json", *extra], cwd=ROOT,
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 1, proc.stderr[-2000:]  # errors found
        outs.append(sorted(proc.stdout.splitlines()))
    assert outs[0] == outs[1] and len(outs[0]) >= 20
    stored = []
    for db in dbs:
        store = Store(db)
        stored.append(_findings(store.iter_episodes()))
        store.close()
    assert stored[0] == stored[1] == _findings(check_episodes(Fanout(1), corpus))
    assert json.loads(outs[1][0])["episode_id"] in {e.id for e in corpus}


def _lengths(chunk: list[bytes]) -> list[int]:
    return [len(b) for b in chunk]


@pytest.mark.parametrize("budget", [None, 60_000])
def test_the_work_given_out_is_bounded_by_its_count_and_its_weight(budget):
    """Items are handed to the workers as they come, no more than ``window`` chunks and ``budget`` of their weight
    out at once: a file's long lines are not all read ahead."""
    weights = [50_000 if i % 10 == 5 else 1_000 for i in range(80)]
    out: list[tuple[int, int]] = []  # at each item read: the chunks out and their weight
    back = 0

    def items():
        for i, w in enumerate(weights):
            out.append((i - back, sum(weights[back:i])))
            yield b"x" * w

    fanout = Fanout(2)
    try:
        kw = {} if budget is None else {"weight": len, "budget": budget}
        got = []
        for n in fanout.map(_lengths, items(), chunk=1, window=20, **kw):
            got.append(n)
            back += 1
    finally:
        fanout.close()
    assert got == weights
    late = out[3:]  # the first three are read at once, to see whether the work is worth the workers
    assert max(n for n, _ in late) <= 19
    if budget is None:
        assert max(w for _, w in late) > 100_000  # the count alone lets several heavy ones out
    else:
        assert max(w for _, w in late) <= budget
