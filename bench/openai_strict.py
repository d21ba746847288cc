"""Episodes per second against a real strict server, ``transformers serve``, next to a plain httpx loop.

``transformers serve`` runs the embedded SmolLM2 on CPU (one torch thread).
8 math episodes (tito, 2 turns, 16 new tokens, greedy) run through
Rollscope's OpenAI backend (completions) at concurrency 1 and 4; every
request body the server answered is kept, and the same bodies are then sent
again by a bare ``httpx`` loop at the same concurrency. Greedy decoding
makes the server's work the same; the ratio is Rollscope's time over the
bare loop's: what the loop, tokenization, checks and storage add. The
refusals the backend learns from (``return_token_ids``, a prompt of ids)
are part of the first run's time (later backends of the process know them).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import BackendSettings, Store, plan_run, run_batch  # noqa: E402
from engine.backends.openai import OpenAIBackend  # noqa: E402
from tests.hf_serve import TransformersServe  # noqa: E402

EPISODES = 8


async def rollscope_run(server: TransformersServe, conc: int, db: Path) -> tuple[float, list[tuple[str, bytes]]]:
    sent: list[tuple[str, bytes]] = []

    async def keep(response: httpx.Response) -> None:
        if response.status_code == 200 and response.request.method == "POST":
            sent.append((str(response.request.url), response.request.content))

    settings = BackendSettings(policy="openai", model=server.model, url=server.url, temperature=0.0,
                               max_new_tokens=16)
    plan = plan_run("math", f"0:{EPISODES}", 1, "tito", "max_turns = 2", conc, settings, preflight=False)
    tok, _ = plan.backend.open(plan.make_env)
    client = httpx.AsyncClient(event_hooks={"response": [keep]}, timeout=300)
    backend = OpenAIBackend(server.url, server.model, tokenizer=tok, client=client, timeout=300)
    store = Store(db)
    t0 = time.perf_counter()
    result = await run_batch(plan.spec(), plan.make_env, backend, tok, store)
    wall = time.perf_counter() - t0
    await client.aclose()
    assert len(result.episodes) == EPISODES and all(e.status.value != "aborted" for e in result.episodes)
    store.close()
    return wall, sent


async def plain_loop(sent: list[tuple[str, bytes]], conc: int) -> float:
    gate = asyncio.Semaphore(conc)
    async with httpx.AsyncClient(timeout=300) as client:

        async def one(url: str, body: bytes) -> None:
            async with gate:
                r = await client.post(url, content=body, headers={"content-type": "application/json"})
                r.raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(one(u, b) for u, b in sent))
        return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, TransformersServe(Path(tmp) / "serve") as server:
        asyncio.run(plain_loop([], 1))
        for conc in (1, 4):
            wall, sent = asyncio.run(rollscope_run(server, conc, Path(tmp) / f"x{conc}.db"))
            bare = asyncio.run(plain_loop(sent, conc))
            print(f"concurrency {conc}: Rollscope {EPISODES / wall:.3f} episodes/s ({wall:.1f}s, {len(sent)} requests); "
                  f"plain httpx loop {EPISODES / bare:.3f} episodes/s ({bare:.1f}s); ratio {wall / bare:.2f}x the time")


if __name__ == "__main__":
    main()
