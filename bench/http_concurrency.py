"""Episodes per second through the sglang HTTP backend, by concurrency.

Usage: python bench/http_concurrency.py [--episodes 64] [--turns 3] [--concurrency 1 8 32] [--inproc]

The server (tests/servers.py, ``fixed`` fault) answers every ``/generate``
after 50 ms with the same short, wrong reply and no model, so each math
episode runs exactly ``--turns`` turns and the ideal rate is
``concurrency / (turns * 0.05 s)``. What is left between the measured and
the ideal rate is Rollscope's own cost per turn (template rendering, the
env, HTTP, JSON) plus the server's. The server runs in its own process by
default so that its work does not share this process's GIL; ``--inproc``
runs it in a thread here instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.backends.base import SamplingParams  # noqa: E402
from engine.backends.sglang import SGLangBackend  # noqa: E402
from engine.backends.tokenizers import load_tokenizer  # noqa: E402
from engine.envs.math import MathEnv  # noqa: E402
from engine.launch.batch import BatchSpec, run_batch  # noqa: E402
from engine.presets import PRESETS  # noqa: E402

DELAY_S = 0.05


@contextmanager
def fixed_server(inproc: bool, tok: object) -> Iterator[str]:
    if inproc:
        from tests.servers import ProtocolServer

        with ProtocolServer(tokenizer=tok, fault="fixed", fixed_delay_s=DELAY_S, keep_bodies=False) as s:
            yield s.url
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.servers", "--fault", "fixed", "--delay", str(DELAY_S)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the benchmark server did not start (it printed {url!r})")
        yield url
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the server serves until its stdin closes
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=10)


async def one_batch(url: str, tok: object, episodes: int, turns: int, concurrency: int) -> tuple[float, float]:
    """(seconds, mean turns per episode) for ``episodes`` math episodes at ``concurrency``."""
    env = MathEnv()
    samples = 4
    spec = BatchSpec(
        env="math",
        tasks=tuple(env.tasks[: max(1, episodes // samples)]),
        samples=samples,
        preset="tito",
        config=PRESETS["tito"].with_(max_turns=turns),
        sampling=SamplingParams(temperature=0.0, max_new_tokens=16),
        policy="sglang",
        concurrency=concurrency,
    )
    backend = SGLangBackend(url, tokenizer=tok)
    t0 = time.perf_counter()
    result = await run_batch(spec, MathEnv, backend, tok, None)
    elapsed = time.perf_counter() - t0
    await backend.aclose()
    bad = {k: v for k, v in result.counts().items() if k != "truncated"}
    if bad:
        raise RuntimeError(f"episodes did not all run to max_turns: {result.counts()}")
    return elapsed, result.n_turns / len(result.episodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--inproc", action="store_true", help="run the server in a thread of this process")
    args = ap.parse_args()

    tok = load_tokenizer(None)
    with fixed_server(args.inproc, tok) as url:
        asyncio.run(one_batch(url, tok, 4, args.turns, 4))  # warm up: template caches, imports
        print(f"server {url} ({'in-process' if args.inproc else 'own process'}), {DELAY_S * 1000:.0f} ms per answer")
        print(f"{'concurrency':>11} {'episodes':>8} {'turns/ep':>8} {'seconds':>8} {'ep/s':>8} {'ideal':>8} {'ratio':>6}")
        for c in args.concurrency:
            elapsed, turns = asyncio.run(one_batch(url, tok, args.episodes, args.turns, c))
            n = (args.episodes // 4) * 4
            rate = n / elapsed
            ideal = c / (turns * DELAY_S)
            print(f"{c:>11} {n:>8} {turns:>8.1f} {elapsed:>8.2f} {rate:>8.1f} {ideal:>8.1f} {rate / ideal:>6.2f}")


if __name__ == "__main__":
    main()
