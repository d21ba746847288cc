"""What recording the top K alternatives costs: storage per token with K = 0 and K = 5, and the embedded model's
tokens per second with K = 0 and K = 5.

Storage: the same math episodes (the embedded SmolLM2, the ``tito`` preset, two turns, the same seeds) are run with
K = 0 and with K = 5, and each is put in its compact stored form (``store.codec``: the packed token arrays, plus
each turn's compressed JSON, whose generation refers to the arrays' spans); printed are bytes per token of the
episode and per generated token. Speed: the same prompts and seeds are generated with K = 0 and K = 5, alternately,
``--rounds`` times each (the machine is shared: alternating spreads its load over both), one torch thread, and the
generated tokens per second of each are printed with their ratio. Under two minutes on one core.

    python bench/top_logprobs.py [--episodes 3] [--rounds 3] [--tokens 24]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ROLLSCOPE_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def storage(backend, tok, episodes: int) -> dict[int, tuple[float, float]]:
    from engine.backends.base import SamplingParams
    from engine.envs.math import MathEnv
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS
    from engine.store import codec

    out = {}
    for k in (0, 5):
        total = generated = n = arrays = 0
        for i in range(episodes):
            env = MathEnv()
            sampling = SamplingParams(temperature=0.8, max_new_tokens=40, seed=100 + i, top_logprobs=k)
            ep = asyncio.run(run_episode(env, backend, tok, PRESETS["tito"].with_(max_turns=2), env.tasks[i],
                                         preset="tito", sampling=sampling))
            size = len(codec.pack_tokens(ep.tokens))
            arrays += size
            previous = None
            for t in ep.turns:
                size += len(codec.pack_turn(t, ep.tokens, previous))
                previous = t.prompt_text
            total += size
            n += len(ep.tokens)
            generated += sum(s.end - s.start for s in ep.segments if s.kind == "assistant")
        out[k] = (total / n, total / generated)
        print(f"K={k}: {total} bytes stored for {n} tokens ({generated} generated): "
              f"{total / n:.2f} bytes per token, {total / generated:.2f} per generated token "
              f"(token arrays {arrays / n:.2f} per token, turns {(total - arrays) / n:.2f})", flush=True)
    return out


def speed(backend, tok, rounds: int, tokens: int) -> dict[int, float]:
    from engine.backends.base import GenerationRequest, SamplingParams

    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
               for q in ("Name three colours.", "What is 12 times 7?", "Describe a cat in one sentence.",
                         "Write a haiku about rain.")]
    ids = [tuple(tok.encode(p, add_special_tokens=False)) for p in prompts]
    rates: dict[int, list[float]] = {0: [], 5: []}
    for _ in range(rounds):
        for k in (0, 5):
            n, t0 = 0, time.perf_counter()
            for j, p in enumerate(ids):
                s = SamplingParams(temperature=1.0, max_new_tokens=tokens, seed=j, top_logprobs=k, stop=())
                gen = asyncio.run(backend.generate(GenerationRequest(None, p, s)))
                n += len(gen.token_ids)
            rates[k].append(n / (time.perf_counter() - t0))
    out = {k: statistics.median(v) for k, v in rates.items()}
    for k, v in rates.items():
        print(f"K={k}: {out[k]:.1f} generated tokens/s (median of {', '.join(f'{x:.1f}' for x in v)})")
    print(f"K=5 runs at {out[5] / out[0]:.3f} of K=0's speed ({(1 - out[5] / out[0]) * 100:+.1f}% slower)")
    # What K=5 adds per token, apart from the machine's noise: the entropy and top 5 of one position's logprobs.
    import torch

    from engine.backends.local_engine import entropy_and_top, scaled_logprobs

    torch.set_num_threads(1)  # as the model's worker thread runs it
    lp = scaled_logprobs(torch.randn(len(tok)), 1.0)
    t0 = time.perf_counter()
    for _ in range(200):
        entropy_and_top(lp, 5)
    extra = (time.perf_counter() - t0) / 200
    print(f"K=5 adds {extra * 1e3:.2f} ms per generated token (entropy and top 5 over {len(tok)} logprobs); "
          f"K=0 takes {1e3 / out[0]:.1f} ms per token: {extra * out[0] * 100:.1f}% more")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=24)
    a = ap.parse_args()
    from engine.backends.local import LocalBackend
    from engine.backends.tokenizers import load_tokenizer

    t0 = time.perf_counter()
    tok = load_tokenizer(None)
    backend = LocalBackend(tokenizer=tok)
    backend.load()
    print(f"model loaded in {time.perf_counter() - t0:.1f}s", flush=True)
    storage(backend, tok, a.episodes)
    speed(backend, tok, a.rounds, a.tokens)
    print(f"total {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
