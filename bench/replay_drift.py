"""How many replays reproduce the reward with differing tool outputs, and how long 200 take.

Writes a tau-bench results file of 200 airline trajectories over the
``tau_bench`` stand-in in ``tests/fake_taubench`` (its tool outputs made by
the stand-in's own tools), 120 of them recorded on an older database whose
addresses had ``province`` where they now have ``state``, 2 of those with a
reward-changing difference planted (the wrong reservation cancelled, the
record saying reward 1), 80 never reading a user's record. Imports it
(messages only), re-executes every episode with its user replayed from the
record, and prints the summary ``rollscope replay`` prints with the time.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fake_taubench"))  # the stand-in's airline data makes the outputs

from engine import Store, formats, replay_summary  # noqa: E402
from engine.loop.replay import replay_stored  # noqa: E402
from tests.fakes import airline_result  # noqa: E402

DRIFTED, PLANTED, UNCHANGED = 120, 2, 80


def results() -> list[dict]:
    out = []
    for k in range(DRIFTED):
        out.append(airline_result(k % 8, k // 8, older=True, reads_user=True, cancels=int(k < PLANTED)))
    for k in range(UNCHANGED):
        out.append(airline_result(k % 8, 100 + k // 8, older=True, reads_user=False))
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.json"
        path.write_text(json.dumps(results()), encoding="utf-8")
        store = Store(Path(tmp) / "x.db")
        t0 = time.perf_counter()
        report = formats.import_path(path, "taubench", store)
        t_import = time.perf_counter() - t0
        episodes = list(store.iter_episodes())
        t0 = time.perf_counter()

        async def replay_all() -> list:
            return [await replay_stored(ep) for ep in episodes]

        done = asyncio.run(replay_all())
        t_replay = time.perf_counter() - t0
        differing = [r for r in done if r.differences]
        same_reward = sum(1 for r in differing if r.reward_reproduced)
        print(f"import: {report.new} trajectories in {t_import:.2f}s")
        print(f"replay with the recorded user, on to the end: {len(done)} in {t_replay:.2f}s "
              f"= {len(done) / t_replay:,.0f}/s ({1000 * t_replay / len(done):.1f} ms each)")
        print(f"with differing tool outputs: {len(differing)}; the reward reproduced in {same_reward} of them "
              f"(planted to differ: {PLANTED})")
        for line in replay_summary(done):
            print(line)
        store.close()


if __name__ == "__main__":
    main()
