"""What an import batch costs the writer in a database that already holds many episodes, and where its pages go.

An import's writer (``Store.save_batches``, in the main process) writes ``--episodes`` packed synthetic episodes
(``tests.synthetic``, shaped as ``bench/dashboard_speed.py`` builds its database: 1,500-character system prompts,
48 tokens a turn; numbered from ``--start`` so none is stored yet) into a fresh database and into a copy of
``--into``. Printed for each:

1. milliseconds an episode, best of ``--repeat`` runs (each on a new copy), with the store's own settings, the close
   (its last checkpoint) included; and the ratio of the two;
2. the pages the writes put in the write-ahead log, from a run whose checkpoints wait until the end so the log holds
   every page each commit wrote: KB an episode, how many distinct pages, and the tables and indexes they belong
   to (``dbstat``), most first. A page that a batch changes is written whole at its commit, so an index whose new
   entries land at random places (a reward within a task) costs a page an entry once it has more pages than a batch
   has entries, where one whose entries go to its end (a row id, a time) costs a page for many.

Packing the episodes is not timed. The copy of ``--into`` is made in ``--dir`` (it needs that much free space); nothing
may write to ``--into`` meanwhile. A copy that does not fit in the page cache beside its source is read from the disk,
and the times then measure the disk more than the writer; the pages logged are exact at any size.

    python bench/write_scale.py --into /tmp/rs-1m.db [--episodes 3000] [--start 5000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.store import Store  # noqa: E402
from engine.store.packing import PackedEpisode, pack_episode  # noqa: E402
from tests.synthetic import synthetic_episodes  # noqa: E402
from tests.walpages import by_owner, wal_pages  # noqa: E402


def _fresh_copy(source: Path | None, folder: Path) -> Path:
    db = folder / "write-scale.db"
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.unlink(missing_ok=True)
    if source is not None:  # its log too, which may hold commits not yet in the file
        shutil.copyfile(source, db)
        if Path(f"{source}-wal").exists():
            shutil.copyfile(f"{source}-wal", f"{db}-wal")
        os.sync()  # written out before the clock starts, not back during the writes timed
    return db


def timed_write(packed: list[PackedEpisode], source: Path | None, folder: Path) -> float:
    """Seconds to write ``packed`` into a copy of ``source`` (None: a new database) and close it."""
    db = _fresh_copy(source, folder)
    store = Store(db)
    start = time.perf_counter()
    for _ in store.save_batches(packed):
        pass
    store.close()
    return time.perf_counter() - start


def logged_pages(packed: list[PackedEpisode], source: Path | None, folder: Path) -> tuple[int, Counter[str], Counter[str]]:
    """The page size, and the pages the writes logged by table or index: frames, and distinct pages."""
    db = _fresh_copy(source, folder)
    store = Store(db)
    store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # what opening it wrote (a new one's tables) is not counted
    store.db.conn.execute("PRAGMA wal_autocheckpoint = 0")
    for _ in store.save_batches(packed):
        pass
    frames = wal_pages(Path(f"{db}-wal"))
    page_size = int(store.db.conn.execute("PRAGMA page_size").fetchone()[0])
    store.close()
    return (page_size, *by_owner(db, frames))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--into", type=Path, required=True, help="a database of many episodes (bench/dashboard_speed.py)")
    ap.add_argument("--episodes", type=int, default=3000)
    ap.add_argument("--start", type=int, default=5_000_000, help="the first new episode's number")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--top", type=int, default=10, help="tables and indexes listed")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    a = ap.parse_args()
    if not a.into.exists():
        sys.exit(f"{a.into}: no such database (bench/dashboard_speed.py --db builds one)")
    reader = Store(a.into, read_only=True)
    held = reader.count()
    reader.close()
    eps = synthetic_episodes(a.episodes, start=a.start, system_chars=1500, tokens_per_turn=48)
    packed = [pack_episode(ep, os.getpid()) for ep in eps]
    n = len(packed)
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        folder = Path(tmp)
        cases: dict[str, Path | None] = {"a new database": None, f"a copy of {a.into} ({held:,} episodes)": a.into}
        best = {}
        for name, source in cases.items():
            best[name] = min(timed_write(packed, source, folder) for _ in range(a.repeat))
        print(f"Writing {n:,} packed episodes (Store.save_batches), ms an episode, best of {a.repeat}:")
        for name, took in best.items():
            print(f"   into {name}: {took / n * 1e3:.3f} ms")
        fresh, held_took = best.values()
        print(f"   ratio: {held_took / fresh:.2f}x")
        for name, source in cases.items():
            page_size, frames, pages = logged_pages(packed, source, folder)
            total = sum(frames.values())
            print(f"\nPages logged into {name}: {total * page_size / n / 1e3:.1f} KB an episode "
                  f"({total / n:.1f} pages of {page_size:,} bytes; {sum(pages.values()):,} distinct)")
            for owner, k in frames.most_common(a.top):
                print(f"   {k / total:6.1%}  {k / n:5.2f} an episode  {pages[owner]:7,} distinct  {owner}")


if __name__ == "__main__":
    main()
