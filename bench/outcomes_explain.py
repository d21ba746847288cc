"""Why each episode earned its reward, over a run of its own: the share of failed episodes each outcome kind
explains, and what explaining costs.

Builds a database of retail episodes (slime-tau, scripted policy with mistakes) and math episodes (areal-math),
then prints:
  - the outcome kinds of the episodes that did not earn full reward, with their shares;
  - the time `rollscope explain --json` takes over every episode (reading the stored outcomes), per episode;
  - the time the envs take to compute the outcomes again from the records (`envs.outcomes.explain`: the retail
    comparison replays the agent's writes on a fresh store), per episode.

    python bench/outcomes_explain.py [--retail 800] [--math 200] [--mistake-rate 0.3] [--db /tmp/outcomes.db]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.backends.base import SamplingParams  # noqa: E402
from engine.backends.scripted import ScriptedBackend  # noqa: E402
from engine.backends.tokenizers import load_tokenizer  # noqa: E402
from engine.envs import env_factory  # noqa: E402
from engine.envs.outcomes import explain  # noqa: E402
from engine.launch.batch import BatchSpec, run_batch  # noqa: E402
from engine.presets import PRESETS  # noqa: E402
from engine.store import EpisodeFilter, Store  # noqa: E402


def build(store: Store, env: str, preset: str, n: int, mistake_rate: float) -> float:
    tok = load_tokenizer(None)
    make_env = env_factory(env)
    tasks = make_env().tasks
    chosen = tuple(tasks[i % len(tasks)] for i in range(n))
    backend = ScriptedBackend(make_env().reference_reply, tok, mistake_rate=mistake_rate, seed=7)
    spec = BatchSpec(env, chosen, 1, preset, PRESETS[preset], SamplingParams(), "scripted", concurrency=4)
    t0 = time.perf_counter()
    asyncio.run(run_batch(spec, make_env, backend, tok, store))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--retail", type=int, default=800)
    ap.add_argument("--math", type=int, default=200)
    ap.add_argument("--mistake-rate", type=float, default=0.3)
    ap.add_argument("--db", default="/tmp/rollscope-outcomes-bench.db")
    ap.add_argument("--reuse", action="store_true", help="read the database --db holds instead of building it")
    a = ap.parse_args()
    db = Path(a.db)
    if not a.reuse:
        for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            p.unlink(missing_ok=True)
    store = Store(db)
    if not a.reuse:
        took = build(store, "retail", "slime-tau", a.retail, a.mistake_rate)
        took += build(store, "math", "areal-math", a.math, a.mistake_rate)
        print(f"{a.retail} retail and {a.math} math episodes, mistake rate {a.mistake_rate}, built in {took:.1f} s")
    episodes = list(store.iter_episodes(EpisodeFilter()))
    store.close()
    n = len(episodes)

    # Failed: no reward at all. A math answer right on a later try earns a discounted reward (areal-math's
    # turn discount): not a failure, counted apart.
    failed = [e for e in episodes if e.reward <= 0]
    partial = Counter((e.env, e.outcome.kind if e.outcome else "none") for e in episodes if 0 < e.reward < 1)
    if partial:
        print("earned part of the reward: " + ", ".join(f"{env} {kind} {k}" for (env, kind), k in partial.items()))
    kinds = Counter((e.env, e.outcome.kind if e.outcome else "none") for e in failed)
    print(f"\n{len(failed)} of {n} earned no reward; their outcomes:")
    for (env, kind), k in sorted(kinds.items(), key=lambda x: (x[0][0], -x[1])):
        print(f"  {env:7s} {kind:26s} {k:5d}  {100 * k / len(failed):5.1f}%")
    explained = sum(k for (_, kind), k in kinds.items() if kind not in ("other", "none"))
    print(f"  named by a kind other than `other`: {explained} of {len(failed)} ({100 * explained / len(failed):.1f}%)")
    # An outcome that says the reward was earned beside a reward of 0 or less would be a false all-clear.
    contradicting = sum(1 for e in failed if e.outcome is not None and e.outcome.passed)
    print(f"  a passing kind (success, correct) beside a reward of 0 or less: {contradicting}")

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "explain", "--db", str(db), "--json"],
                          capture_output=True, text=True, env=env, check=True)
    cli = time.perf_counter() - t0
    lines = proc.stdout.count("\n")
    print(f"\nrollscope explain --json over {lines} episodes: {cli:.2f} s in all (process start included), "
          f"{1000 * cli / max(lines, 1):.2f} ms an episode")

    t0 = time.perf_counter()
    again = [explain(e) for e in episodes]
    fresh = time.perf_counter() - t0
    same = sum(1 for e, o in zip(episodes, again) if (o.kind if o else None) == (e.outcome.kind if e.outcome else None))
    print(f"outcomes computed again from the records: {fresh:.2f} s, {1000 * fresh / n:.2f} ms an episode; "
          f"the same kind as stored for {same} of {n}")


if __name__ == "__main__":
    main()
