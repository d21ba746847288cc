"""Throughput of LocalBackend on the embedded SmolLM2 (one CPU thread).

Usage: python bench/local_backend.py [--runs 3] [--tokens 64] [--model PATH]

Prints load time (tokenizer, model) separately from generation speed, since
loading the GGUF dominates a short run.
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

from engine.backends.base import GenerationRequest, SamplingParams  # noqa: E402
from engine.backends.local import LocalBackend
from engine.backends.tokenizers import load_tokenizer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--model", default=None, help="model spec (default: embedded SmolLM2)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    tok = load_tokenizer(args.model)
    t1 = time.perf_counter()
    backend = LocalBackend(model=args.model, tokenizer=tok)
    backend.load()
    t2 = time.perf_counter()
    print(f"load: tokenizer {t1 - t0:.1f}s, model {t2 - t1:.1f}s")

    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Write a short story about a lighthouse keeper."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tuple(tok.encode(prompt, add_special_tokens=False))
    total_tokens, total_s = 0, 0.0
    for i in range(args.runs):
        # A fixed seed per run keeps runs comparable between invocations; a
        # story prompt rarely ends (on <|im_end|>) within 64 tokens.
        req = GenerationRequest(
            prompt_text=None,
            prompt_ids=ids,
            sampling=SamplingParams(temperature=1.0, max_new_tokens=args.tokens, seed=i),
        )
        gen = asyncio.run(backend.generate(req))
        n = len(gen.token_ids)
        total_tokens += n
        total_s += gen.latency_s
        print(
            f"run {i + 1}: {n} tokens ({gen.finish_reason}) in {gen.latency_s:.2f}s "
            f"= {n / gen.latency_s:.1f} tok/s (prompt {gen.prompt_tokens} tokens)"
        )
    print(f"mean: {total_tokens / total_s:.1f} tok/s over {total_tokens} tokens")


if __name__ == "__main__":
    main()
