"""What the charts' maintained aggregates cost a write, and what they save a read.

1. ``Store.save_episodes`` of synthetic episodes into a fresh database as it is, into one without the triggers of
   the lists' counts and the charts' totals (``run_models``, ``tag_stats``, ``episode_total``, ``task_rewards``,
   ``group_rewards``), and into one without the charts' other aggregates' either (``length_stats``, ``task_stats``,
   ``group_stats``; ``episode_stats`` kept in all three): episodes a second, each the best of three runs, and the
   SQLite virtual-machine instructions the writes ran (the same every run, where the time is not).
2. The rows each aggregate holds against the episodes, and Browse's charts (``Store.stats``) read from them against
   the same charts counted from the browse index (median of 5), for every episode and for completed episodes with
   a reward of at least 0.5.

``--shape mixed`` is ``tests.synthetic``'s family (runs of 1,000 episodes whose groups mix envs, presets and
statuses: close to a row an episode in the task and group aggregates); ``--shape grpo`` is one GRPO run: rollout
steps of 1,024 samples, groups of 8 samples of one math task, rewards 0 or 1, 3% truncated.

    python bench/stats_writes.py [--episodes 3000] [--shape grpo] [--read 50000]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.records.episode import Episode, Status  # noqa: E402
from engine.store import EpisodeFilter, Store  # noqa: E402
from engine.store.schema import CHART_TABLES, LISTING_TABLES, TOTAL_TABLES  # noqa: E402
from tests.synthetic import synthetic_episode  # noqa: E402


def episodes(n: int, shape: str) -> Iterator[Episode]:
    for i in range(n):
        ep = synthetic_episode(i, system_chars=1500, tokens_per_turn=48)
        if shape == "grpo":
            step, k = divmod(i, 1024)
            task = f"gsm8k-{(step * 128 + k // 8) % 7473}"
            ep = ep.evolve(run_id="grpo", env="math", preset="tito", task_id=task, group_id=f"s{step}-{k // 8}",
                           sample_index=k % 8, status=Status.TRUNCATED if i % 33 == 0 else Status.COMPLETED,
                           reward=float((i * 7919) % 5 < 2), source=dataclasses.replace(
                               ep.source, details={"rollout_step": step}))
        yield ep


# What each write run leaves out: the triggers of these tables.
WITHOUT = {"all": (), "no lists or totals": (*LISTING_TABLES, *TOTAL_TABLES),
           "no chart tables": (*LISTING_TABLES, *TOTAL_TABLES, *CHART_TABLES)}


def rate(path: Path, n: int, shape: str, without: tuple[str, ...] = ()) -> tuple[float, int, Store]:
    """Episodes a second and SQLite instructions of saving ``n`` episodes, the triggers of ``without`` dropped."""
    store = Store(path)
    for table in without:
        # group_summary is kept by triggers on group_rewards: without those it receives nothing.
        for event in ("insert", "delete", "update"):
            store.db.execute(f"DROP TRIGGER IF EXISTS {table}_{event}")
    store.db.conn.commit()
    eps = list(episodes(n, shape))
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0

    store.db.conn.set_progress_handler(tick, 1000)
    start = time.perf_counter()
    store.save_episodes(eps)
    took = time.perf_counter() - start
    store.db.conn.set_progress_handler(None, 0)
    return n / took, ticks[0] * 1000, store


def median_ms(fn: object, repeat: int = 5) -> float:
    runs = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        runs.append(time.perf_counter() - start)
    return statistics.median(runs[1:]) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=3000, help="episodes each write run saves")
    ap.add_argument("--shape", choices=("mixed", "grpo"), default="mixed")
    ap.add_argument("--read", type=int, default=0, help="episodes of the database the reads are timed on (0: none)")
    args = ap.parse_args()
    n, shape = args.episodes, args.shape
    with tempfile.TemporaryDirectory() as tmp:
        best: dict[str, float] = {}
        work: dict[str, int] = {}
        for k in range(3):
            for name, without in WITHOUT.items():
                r, work[name], store = rate(Path(tmp) / f"w{len(without)}-{k}.db", n, shape, without)
                best[name] = max(best.get(name, 0.0), r)
                store.close()
        print(f"1. save_episodes, {n:,} synthetic episodes ({shape}), best of 3:")
        for name in WITHOUT:
            print(f"   {name:20s} {best[name]:8.0f} episodes/s ({best[name] / best['all']:.2f}x all's), "
                  f"{work[name] / 1e6:7.1f} M SQLite instructions (all's are {work['all'] / work[name]:.2f}x these)")
        if not args.read:
            return
        _, _, store = rate(Path(tmp) / "read.db", args.read, shape)
        store.close()
        store = Store(Path(tmp) / "read.db")
        sizes = {t: store.browse_query(f"SELECT COUNT(*) FROM {t}")[0][0]
                 for t in ("episode_stats", *CHART_TABLES, *LISTING_TABLES, *TOTAL_TABLES)}
        print(f"2. {args.read:,} episodes ({shape}): rows " + ", ".join(f"{t} {c:,}" for t, c in sizes.items()))
        for name, flt in (("everything", EpisodeFilter()),
                          ("completed, reward >= 0.5", EpisodeFilter(status=("completed",), reward_min=0.5))):
            indexed = dataclasses.replace(flt, search_context=True)  # the same rows; the aggregates cannot tell
            a, b = median_ms(lambda f=indexed: store.stats(f)), median_ms(lambda f=flt: store.stats(f))
            print(f"   charts of {name:26s} from the index {a:8.1f} ms, from the aggregates {b:8.1f} ms "
                  f"({a / b:.1f}x faster)")
        store.close()


if __name__ == "__main__":
    main()
