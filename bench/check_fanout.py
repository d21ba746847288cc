"""Check throughput, in tokens per second: one process, two worker processes, and a local Ray on two CPUs.

The episodes are our own loop's (scripted policy, SmolLM2 tokenizer with its tool template, the
``slime-tau`` preset on the retail env and ``areal-math`` on math), stored in a fresh database; each
configuration runs ``rollscope check DB --no-store`` as a user would (so the figures include starting
the workers, and Ray), three times, and the median is printed, with the ratio to one process. Every
configuration must print the same findings.

    python bench/check_fanout.py [--episodes 240] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_db(db: Path, episodes: int) -> int:
    half = episodes // 2
    for env, preset in (("retail", "slime-tau"), ("math", "areal-math")):
        subprocess.run([sys.executable, "-m", "engine.cli", "run", "--db", str(db), "--env", env, "--preset", preset,
                        "--tasks", f"0:{half // 4}", "--samples", "4", "--quiet"], cwd=ROOT, check=True,
                       capture_output=True)
    from engine.store import Store

    store = Store(db)
    n = int(store.db.execute("SELECT SUM(n_tokens) FROM episodes").fetchone()[0] or 0)
    store.close()
    return n


def timed(db: Path, extra: list[str]) -> tuple[float, str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "check", str(db), "--no-store", "--json", *extra],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"check {' '.join(extra)} failed: {proc.stderr[-2000:]}")
    return elapsed, hashlib.sha256("\n".join(sorted(proc.stdout.splitlines())).encode()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=240)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        db = Path(tmp) / "bench.db"
        tokens = make_db(db, a.episodes)
        from engine.store import Store

        store = Store(db)
        n = store.count()
        store.close()
        print(f"{n} episodes, {tokens:,} tokens (SmolLM2 tokenizer and template)")
        base = None
        for label, extra in (("1 process", ["--workers", "1"]), ("2 worker processes", ["--workers", "2"]),
                             ("local Ray, 2 CPUs", ["--ray", "--workers", "2"])):
            runs = [timed(db, extra) for _ in range(a.repeat)]
            secs = sorted(r[0] for r in runs)[len(runs) // 2]
            digests = {r[1] for r in runs}
            base = base or secs
            print(f"{label:20s} {secs:6.1f}s  {tokens / secs:>10,.0f} tokens/s  {n / secs:6.1f} episodes/s  "
                  f"{base / secs:4.2f}x one process  findings {','.join(sorted(digests))}")


if __name__ == "__main__":
    main()
