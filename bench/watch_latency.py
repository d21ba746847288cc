"""How long ``rollscope watch`` takes to show a new dump: from the dump's last byte to its episodes in the store.

``rollscope watch DIR --format slime`` runs as a user would start it (checks on), polling every
``--interval`` seconds; this script writes a slime dump of ``--samples`` samples of ``--tokens`` tokens
into the folder (``torch.save``, the way slime writes it), and polls the database (read-only) until all of
that dump's episodes are there. Repeated for ``--dumps`` rollout steps; prints each latency and the median.

    python bench/watch_latency.py [--dumps 5] [--samples 64] [--tokens 4000] [--interval 1]
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def count(db: Path, step: int) -> int:
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM episode_index WHERE rollout_step = ?", [step]).fetchone()[0])
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return 0  # not created yet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dumps", type=int, default=5)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--dir")
    a = ap.parse_args()
    import torch

    from tests.fixtures_formats import synthetic_slime_samples

    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        folder, db = Path(tmp) / "run", Path(tmp) / "watch.db"
        folder.mkdir()
        watch = subprocess.Popen([sys.executable, "-m", "engine.cli", "watch", str(folder), "--format", "slime",
                                  "--db", str(db), "--interval", str(a.interval), "--settle", str(a.interval),
                                  "--workers", "1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        try:
            time.sleep(3)  # started and looking
            latencies = []
            for step in range(a.dumps):
                samples = synthetic_slime_samples(a.samples, a.tokens, seed=step)
                part = folder / f".{step}.tmp"
                torch.save({"rollout_id": step, "samples": samples}, part)
                part.rename(folder / f"{step}.pt")  # whole at once, as a rename makes it
                t0 = time.perf_counter()
                while count(db, step) < a.samples:
                    if time.perf_counter() - t0 > 120:
                        raise SystemExit("the dump did not show within 120 s")
                    time.sleep(0.05)
                latencies.append(time.perf_counter() - t0)
                print(f"rollout step {step}: {a.samples} samples x {a.tokens} tokens shown after {latencies[-1]:.2f}s")
            med = sorted(latencies)[len(latencies) // 2]
            print(f"median {med:.2f}s from the dump being written to its episodes, checked, in the store "
                  f"(watch polling every {a.interval:g}s)")
        finally:
            watch.terminate()
            watch.wait(10)


if __name__ == "__main__":
    main()
