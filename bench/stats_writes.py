"""What the charts' maintained aggregates cost a write: ``Store.save_episodes`` of synthetic episodes into a fresh
database as it is, and into one without the triggers of ``length_stats``, ``task_stats`` and ``group_stats``
(``episode_stats`` kept in both); episodes a second, each the best of three runs, and their ratio. Then the rows
each aggregate holds against the episodes.

    python bench/stats_writes.py [--episodes 3000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.store import Store  # noqa: E402
from engine.store.schema import CHART_TABLES  # noqa: E402
from tests.synthetic import synthetic_episodes  # noqa: E402


def rate(workdir: Path, n: int, triggers: bool, k: int) -> tuple[float, Store]:
    path = workdir / f"w{int(triggers)}-{k}.db"
    store = Store(path)
    if not triggers:
        for table in CHART_TABLES:
            for event in ("insert", "delete", "update"):
                store.db.execute(f"DROP TRIGGER {table}_{event}")
        store.db.conn.commit()
    eps = list(synthetic_episodes(n, system_chars=1500, tokens_per_turn=48))
    start = time.perf_counter()
    store.save_episodes(eps)
    return n / (time.perf_counter() - start), store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=3000)
    n = ap.parse_args().episodes
    with tempfile.TemporaryDirectory() as tmp:
        best: dict[bool, float] = {}
        for k in range(3):
            for triggers in (False, True):
                r, store = rate(Path(tmp), n, triggers, k)
                best[triggers] = max(best.get(triggers, 0.0), r)
                if triggers and k == 2:
                    sizes = {t: store.browse_query(f"SELECT COUNT(*) FROM {t}")[0][0]
                             for t in ("episode_stats", *CHART_TABLES)}
                store.close()
    print(f"save_episodes, {n:,} synthetic episodes, best of 3:")
    print(f"   without the chart aggregates' triggers {best[False]:8.0f} episodes/s")
    print(f"   with them                              {best[True]:8.0f} episodes/s  "
          f"({best[True] / best[False]:.2f}x the speed)")
    print("   rows: " + ", ".join(f"{t} {c:,}" for t, c in sizes.items()) + f" for {n:,} episodes")


if __name__ == "__main__":
    main()
