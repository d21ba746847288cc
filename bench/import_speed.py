"""Import speed and memory for a slime dump: 1,000 samples of 8,000 tokens by default.

The dump is our own synthetic data in slime's ``Sample.to_dict()`` shape
(token ids, loss mask and rollout logprobs as Python lists, as slime writes
them): a 256-token prompt and three generated turns separated by 40-token
tool results. One child process writes it, another imports it into a fresh
database, so the peak RSS printed is the import's own:
interpreter and libraries, the reading of the dump, and the
conversion on top of it. Prints samples/s, the ratio to reading the dump
alone (three ways: ``READS``), peak RSS against the file size, and the
database size per token.

    python bench/import_speed.py [--samples 1000] [--tokens 8000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rss_mb() -> float:
    """Current resident set size, from /proc (Linux); 0 where unavailable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return 0.0


def write_dump(path: Path, samples: int, tokens: int, prompt: int = 256, turns: int = 3, seed: int = 0) -> None:
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    rl = tokens - prompt
    step = rl // turns
    mask = np.ones(rl, dtype=np.int64)
    for t in range(1, turns):
        mask[t * step : t * step + 40] = 0  # a tool result between generated turns
    mask_list = mask.tolist()
    out = []
    for i in range(samples):
        lps = np.where(mask == 1, -rng.random(rl), 0.0)
        out.append({
            "group_index": i // 8, "index": i, "prompt": [{"role": "user", "content": f"task {i // 8}"}],
            "tokens": rng.integers(0, 150_000, size=tokens).tolist(), "response": "",
            "response_length": rl, "label": None, "reward": float(i % 2), "loss_mask": list(mask_list),
            "weight_versions": [str(i // 100)] * turns, "rollout_log_probs": lps.tolist(),
            "status": "completed", "metadata": {},
        })
    torch.save({"rollout_id": 0, "samples": out}, path)


READS = {
    "torch": "torch.load(path), as a trainer's user reads it (weights_only, torch's default)",
    "unsafe": "torch.load(path, weights_only=False) (runs any code the file holds)",
    "stream": "the importer's own reading alone: every sample unpickled, one at a time, nothing converted",
}


def time_load(dump: Path, how: str) -> float:
    """In a child: seconds to read the dump alone, one of ``READS``."""
    import torch

    from engine.formats import torchstream

    t0 = time.perf_counter()
    if how == "stream":
        for s in torchstream.open_dump(dump).samples():
            del s
    else:
        pack = torch.load(dump, weights_only=how == "torch")
        del pack
    return time.perf_counter() - t0


def run_import(dump: Path, db: Path) -> dict[str, float]:
    """In the child: import the dump and report time and memory."""
    from engine.formats import import_path
    from engine.store import Store

    base = _rss_mb()
    store = Store(db)
    t0, c0 = time.perf_counter(), time.process_time()
    report = import_path(dump, "slime", store)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n_tokens = int(store.db.execute("SELECT SUM(n_tokens) FROM episodes").fetchone()[0] or 0)
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return {
        "episodes": report.new, "skipped": report.skipped, "seconds": elapsed, "cpu_seconds": cpu, "tokens": n_tokens,
        "rss_before_mb": base, "peak_rss_mb": peak_import,
        "db_bytes": db.stat().st_size,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--dir", help="work folder (default: a temporary one, removed afterwards)")
    ap.add_argument("--write", metavar="DUMP", help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=2, metavar=("DUMP", "DB"), help=argparse.SUPPRESS)
    ap.add_argument("--load", nargs=2, metavar=("DUMP", "HOW"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.write:
        write_dump(Path(a.write), a.samples, a.tokens)
        return
    if a.load:
        print(json.dumps(time_load(Path(a.load[0]), a.load[1])))
        return
    if a.child:
        print(json.dumps(run_import(Path(a.child[0]), Path(a.child[1]))))
        return
    # Both steps run in children of this small process: Linux carries ru_maxrss across fork and
    # exec, so an import spawned by the process that built the dump would report the builder's peak.
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        dump, db = Path(tmp) / "rollout_data_0.pt", Path(tmp) / "bench.db"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--write", str(dump), "--samples", str(a.samples),
                        "--tokens", str(a.tokens)], check=True)
        print(f"wrote {a.samples} samples x {a.tokens} tokens: {dump.stat().st_size / 2**20:.0f} MB "
              f"in {time.perf_counter() - t0:.1f}s")
        proc = subprocess.run([sys.executable, __file__, "--child", str(dump), str(db)],
                              capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"imported {r['episodes']} episodes ({r['skipped']} skipped) in {r['seconds']:.1f}s "
              f"({r['cpu_seconds']:.1f}s CPU): {r['episodes'] / r['seconds']:.1f} samples/s, "
              f"{r['tokens'] / r['seconds'] / 1e6:.2f} M tokens/s")
        for how, what in READS.items():
            times = [json.loads(subprocess.run([sys.executable, __file__, "--load", str(dump), how],
                                               capture_output=True, text=True, check=True).stdout.strip()
                                .splitlines()[-1]) for _ in range(1 if how == "torch" else 3)]
            secs = sorted(times)[len(times) // 2]
            print(f"reading the dump with {what}: {secs:.1f}s; the import takes {r['seconds'] / secs:.2f}x that")
        size = dump.stat().st_size / 2**20
        print(f"RSS: {r['rss_before_mb']:.0f} MB before, peak {r['peak_rss_mb']:.0f} MB for a {size:.0f} MB dump "
              f"({r['peak_rss_mb'] / size:.2f}x the file)")
        print(f"database: {r['db_bytes'] / 2**20:.0f} MB for {r['tokens']:,} tokens = "
              f"{r['db_bytes'] / max(1, r['tokens']):.1f} bytes per token")


if __name__ == "__main__":
    main()
