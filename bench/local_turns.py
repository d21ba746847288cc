"""Turn time of the embedded model on retail tool episodes: per turn, across concurrency, and to the first token.

Usage: python bench/local_turns.py [--part episode,concurrency,step] [--turns 4] [--tokens 64]

Each part runs retail tasks under ``slime-tau`` with the local policy
(embedded SmolLM2, its tool template, sampling at temperature 1 with fixed
seeds), as ``rollscope run --policy local --max-new-tokens 64`` does:

- ``episode``: one episode of ``--turns`` turns; per turn the prompt length,
  the prompt tokens served from the model's prefix cache, the generated
  tokens, the seconds the generation took and its tokens/s.
- ``concurrency``: four episodes of ``--conc-turns`` turns, run one at a
  time and then four at once, each from an empty prefix cache; the wall
  time and the generated tokens per second of each, and their ratio.
- ``step``: a hand-stepped conversation (the Step tab's engine calls); the
  seconds from asking for turn ``--turns`` to its first token.
- ``decode``: one decoding step at a 3,300-token context for one row and
  for four rows in a batch: the ceiling batching has on this machine.

``ROLLSCOPE_KV_CACHE_MB=0`` turns the prefix cache off, ``ROLLSCOPE_THREADS=N``
sets the model's threads (default: the machine's cores).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.launch.batch import run_batch  # noqa: E402
from engine.launch.plan import BackendSettings, UserSettings, plan_run, plan_step  # noqa: E402


def _backend(tokens: int) -> BackendSettings:
    return BackendSettings.parse("local", None, None, "completions", None, 1.0, 1.0, tokens, 0.0, 7, 60.0, 3)


def _plan(tasks: str, turns: int, tokens: int, concurrency: int):  # type: ignore[no-untyped-def]
    return plan_run("retail", tasks, 1, "slime-tau", {"max_turns": str(turns)}, concurrency, _backend(tokens),
                    user=UserSettings("scripted", None, None), max_episodes=None, preflight=False)


def part_episode(turns: int, tokens: int) -> None:
    plan = _plan("0", turns, tokens, 1)
    tokenizer, backend = plan.backend.open(plan.make_env)
    result = asyncio.run(run_batch(plan.spec(), plan.make_env, backend, tokenizer, None))
    ep = result.episodes[0]
    print(f"episode: retail task 0, slime-tau, {ep.n_turns} turns ({ep.status.value}: {ep.reason})")
    print("turn  prompt  cached  generated  seconds  tokens/s")
    for t in ep.turns:
        g = t.generation
        if g is None:
            continue
        n = len(g.token_ids)
        print(f"{t.index + 1:>4}  {g.prompt_tokens:>6}  {g.cached_tokens:>6}  {n:>9}  {g.latency_s:>7.2f}  "
              f"{n / g.latency_s if g.latency_s else 0:>8.1f}")


def part_concurrency(turns: int, tokens: int) -> None:
    rates = {}
    for c in (1, 4):
        plan = _plan("0:4", turns, tokens, c)
        tokenizer, backend = plan.backend.open(plan.make_env)
        worker = getattr(backend, "worker", None)
        if worker is not None:  # both runs start with nothing cached
            worker().cache.clear()
            worker().seconds = dict.fromkeys(worker().seconds, 0.0)
        t0 = time.perf_counter()
        result = asyncio.run(run_batch(plan.spec(), plan.make_env, backend, tokenizer, None))
        wall = time.perf_counter() - t0
        n = sum(len(t.generation.token_ids) for ep in result.episodes for t in ep.turns if t.generation)
        rates[c] = n / wall
        print(f"concurrency {c}: 4 episodes, {result.n_turns} turns, {n} tokens generated in {wall:.1f}s "
              f"= {rates[c]:.2f} tokens/s")
        if worker is not None:
            w = worker()
            sizes = w.batch_sizes[-n:]
            print("  model time: " + ", ".join(f"{k} {v:.1f}s" for k, v in w.seconds.items())
                  + f"; mean decode batch {sum(sizes) / max(1, len(sizes)):.2f}")
    print(f"aggregate tokens/s, concurrency 4 / concurrency 1: {rates[4] / rates[1]:.2f}x")


def part_decode() -> None:
    """One decoding step at a 3,300-token context, one row and four rows in a batch."""
    import torch

    from engine.backends.kvcache import DecodeBatch
    from engine.backends.local import LocalBackend, _load_model

    LocalBackend().load()
    loaded = _load_model(None)
    cfg = loaded.model.config
    heads, dim = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    torch.set_num_threads(loaded.worker().threads or 1)
    step_ms = {}
    for rows in (1, 4):
        batch = DecodeBatch()
        for _ in range(rows):
            batch.add([(torch.randn(1, heads, 3300, dim), torch.randn(1, heads, 3300, dim))
                       for _ in range(cfg.num_hidden_layers)], 3300)
        times = []
        with torch.inference_mode():
            for _ in range(10):
                t0 = time.perf_counter()
                cache, extra = batch.step_inputs()
                loaded.model(input_ids=torch.tensor([[5]] * rows), past_key_values=cache, use_cache=True, **extra)
                batch.advance()
                times.append(time.perf_counter() - t0)
        step_ms[rows] = sorted(times[2:])[len(times[2:]) // 2] * 1000
        print(f"decode step, {rows} row{'s' if rows > 1 else ''} at 3,300 tokens: {step_ms[rows]:.0f} ms "
              f"= {rows * 1000 / step_ms[rows]:.1f} tokens/s")
    print(f"tokens/s, 4 rows / 1 row: {4 * step_ms[1] / step_ms[4]:.2f}x")


def part_step(turns: int, tokens: int) -> None:
    start = plan_step("retail", "0", "slime-tau", "", "scripted", _backend(tokens), None)

    async def go() -> None:
        hand = await start.start()
        for _ in range(turns - 1):
            gen = await hand.generate()
            await hand.commit(hand.text_of(gen), None)
        first: list[float] = []

        def on_progress(n: int, text: str) -> None:
            if not first:
                first.append(time.perf_counter())

        t0 = time.perf_counter()
        try:
            gen = await hand.generate(on_progress=on_progress)
        except TypeError:  # a backend without progress reports shows nothing until the whole reply
            gen = await hand.generate()
            first.append(time.perf_counter())
        t1 = time.perf_counter()
        print(f"step: turn {turns} prompt {gen.prompt_tokens} tokens ({gen.cached_tokens} cached): first token after "
              f"{first[0] - t0:.2f}s, whole reply ({len(gen.token_ids)} tokens) after {t1 - t0:.2f}s")

    asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="episode,concurrency,step,decode")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--conc-turns", type=int, default=3, help="turns per episode in the concurrency part")
    a = ap.parse_args()
    parts = a.part.split(",")
    print(f"threads: {os.environ.get('ROLLSCOPE_THREADS', 'default')}, "
          f"prefix cache MB: {os.environ.get('ROLLSCOPE_KV_CACHE_MB', 'default')}")
    if "episode" in parts:
        part_episode(a.turns, a.tokens)
    if "concurrency" in parts:
        part_concurrency(a.conc_turns, a.tokens)
    if "step" in parts:
        part_step(a.turns, a.tokens)
    if "decode" in parts:
        part_decode()


if __name__ == "__main__":
    main()
