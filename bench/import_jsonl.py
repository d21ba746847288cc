"""Import speed of a JSONL file of episodes, against parsing the same file with ``json.loads`` alone.

The file is ``rollscope export --format jsonl`` of ``--episodes`` synthetic episodes (``tests/synthetic.py``:
small math and tool episodes of one to six turns), written once into ``--dir`` and reused. Prints episodes a
second for ``json.loads`` alone and for ``import_path`` into a fresh database, their ratio, and the bytes an
episode takes in the file and in the database.

    python bench/import_jsonl.py [--episodes 2000] [--dir /tmp/rollscope-import-jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import export, import_path  # noqa: E402
from engine.store import Store  # noqa: E402
from tests.synthetic import synthetic_episodes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "rollscope-import-jsonl")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    src = a.dir / f"episodes-{a.episodes}.jsonl"
    if not src.exists():
        export(synthetic_episodes(a.episodes), "jsonl", src)
    start = time.perf_counter()
    with open(src, "rb") as f:
        n = sum(1 for line in f if json.loads(line))
    parse = time.perf_counter() - start
    size = src.stat().st_size
    print(f"{src}: {n:,} episodes, {size / n / 1e3:.1f} KB an episode")
    print(f"   json.loads alone: {parse:.2f} s, {n / parse:,.0f} episodes a second")
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        store = Store(Path(tmp) / "import.db")
        start = time.perf_counter()
        import_path(src, "jsonl", store)
        took = time.perf_counter() - start
        stored = store.count()
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db_bytes = sum(p.stat().st_size for p in Path(tmp).glob("import.db*"))
        store.close()
    print(f"   import:           {took:.2f} s, {stored / took:,.0f} episodes a second ({took / parse:.1f}x json.loads); "
          f"{db_bytes / stored / 1e3:.1f} KB an episode in the database")


if __name__ == "__main__":
    main()
