"""How long a batch takes against a server that accepts requests and never answers.

An 8-episode ``tito`` batch at concurrency 4 (``rollscope run --policy
sglang``) against the hostile test server's ``hang`` mode, which answers
nothing, its health check included: with the default timeout (60 s a turn,
3 retries within it) and with ``--timeout 10``. Without the health check the
second wave would wait a timeout of its own: 2 timeouts of wall time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.backends.tokenizers import load_tokenizer  # noqa: E402
from tests.hostile import HostileServer  # noqa: E402


def run(url: str, db: Path, *flags: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", "--env", "math", "--preset", "tito", "--tasks", "0:8",
         "--concurrency", "4", "--policy", "sglang", "--url", url, "--db", str(db), "--quiet", *flags],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    return time.perf_counter() - t0, (proc.stdout.strip().splitlines() or [proc.stderr.strip()])[-1]


def main() -> None:
    tok = load_tokenizer(None)
    with HostileServer(tok) as server, tempfile.TemporaryDirectory() as tmp:
        for flags, timeout in (((), 60.0), (("--timeout", "10"), 10.0)):
            wall, line = run(f"{server.url}/hang", Path(tmp) / f"x{timeout:g}.db", *flags)
            naive = 2 * 4 * timeout  # two waves of episodes, four tries each
            print(f"timeout {timeout:g}s, 3 retries: batch of 8 ended in {wall:.1f}s "
                  f"(one timeout + health check = {timeout + min(timeout, 5):g}s; without it >= {naive:g}s, "
                  f"{naive / wall:.1f}x longer)\n  {line}")


if __name__ == "__main__":
    main()
