"""Browse's queries as they were and as they are, on the database ``bench/dashboard_speed.py`` builds: time and
the SQLite virtual machine instructions each runs (the work, whatever else the machine is doing).

Before: the exact count and an ``OFFSET`` page (``Store.count``, ``list_episodes``), charts counted from the
episode index (a filter the aggregates cannot answer). Now: the count to its bound and the page by token
(``Store.count_upto``, ``page_episodes``), charts from the maintained aggregates (``episode_stats``, and
``length_stats``, ``task_stats``, ``group_stats`` for the lengths, tasks and groups).

    python bench/browse_work.py [--db /tmp/rollscope-bench-100k.db]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.store import EpisodeFilter, Store  # noqa: E402


def work(store: Store, fn: Callable[[], Any], repeat: int = 5) -> tuple[float, float]:
    """(median milliseconds, millions of VM instructions) of ``fn`` on the Browse connections (the page's, the
    counts', the charts')."""
    conns = [store._reader()[0], store._reader(background=True)[0], store._reader(charts=True)[0]]
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0

    fn()
    for conn in conns:
        conn.set_progress_handler(tick, 1000)
    try:
        fn()
    finally:
        for conn in conns:
            conn.set_progress_handler(None, 0)
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs) * 1000, ticks[0] / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, default=Path(tempfile.gettempdir()) / "rollscope-bench-100k.db")
    s = Store(ap.parse_args().db, create=False)
    flt, every = EpisodeFilter(status=("completed",), reward_min=0.5), EpisodeFilter()
    total = s.count()

    def token(f: EpisodeFilter, page: int) -> str | None:
        return s.page_episodes(f, limit=50, offset=(page - 2) * 50).after

    deep, last = token(flt, 300), token(every, total // 50)
    indexed = dataclasses.replace(flt, search_context=True)  # selects the same rows; the aggregates cannot tell
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        ("first page, completed & reward>=0.5", lambda: (s.count(flt), s.list_episodes(flt, limit=50)),
         lambda: s.page_episodes(flt, limit=50, matches=s.count_upto(flt))),
        ("same filter, page 300", lambda: (s.count(flt), s.list_episodes(flt, limit=50, offset=299 * 50)),
         lambda: s.page_episodes(flt, limit=50, after=deep, matches=s.count_upto(flt))),
        ("no filter, last page", lambda: (s.count(), s.list_episodes(limit=50, offset=(total // 50 - 1) * 50)),
         lambda: s.page_episodes(limit=50, after=last, matches=s.count_upto(every))),
        ("same filter, sorted by env", lambda: (s.count(flt), s.list_episodes(flt, "env", limit=50)),
         lambda: s.page_episodes(flt, "env", limit=50, matches=s.count_upto(flt))),
        ("same filter, sorted by turns", lambda: (s.count(flt), s.list_episodes(flt, "n_turns", limit=50)),
         lambda: s.page_episodes(flt, "n_turns", limit=50, matches=s.count_upto(flt))),
        ("charts (Store.stats), filtered", lambda: s.stats(indexed), lambda: s.stats(flt)),
        ("charts (Store.stats), everything", lambda: s.stats(EpisodeFilter(search_context=True)),
         lambda: s.stats(every)),
    ]
    print(f"{total:,} episodes: median of 5, and SQLite VM instructions in millions")
    print(f"   {'':38s} {'before: counted, offset, index':>30s}   {'now: bounded, keyset, aggregates':>32s}")
    for name, before, now in cases:
        (a, a_ops), (b, b_ops) = work(s, before), work(s, now)
        print(f"   {name:38s} {a:12.1f} ms {a_ops:8.2f} M     {b:14.1f} ms {b_ops:8.2f} M")
    s.close()


if __name__ == "__main__":
    main()
