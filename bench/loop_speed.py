"""Turns per second of the loop: scripted policy on the math env.

Three ways over the same 40 tasks x 2 samples (areal-math preset, 5 turns each):
  traced+stored  the real loop, every turn committed to a SQLite file
  traced         the real loop, no store
  bare           an untraced loop doing the same token work (render, encode,
                 generate, step) with no records, findings or store
Prints turns/s for each and the ratios.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
logging.getLogger("math_verify").setLevel(logging.ERROR)

from engine.backends.base import GenerationRequest, SamplingParams  # noqa: E402
from engine.backends.scripted import ScriptedBackend  # noqa: E402
from engine.backends.tokenizers import load_tokenizer  # noqa: E402
from engine.envs.math import MathEnv  # noqa: E402
from engine.launch.batch import BatchSpec, run_batch  # noqa: E402
from engine.presets import PRESETS  # noqa: E402
from engine.records.episode import RESPOND, Action, Message  # noqa: E402
from engine.store import Store  # noqa: E402
from engine.tokens import chat  # noqa: E402

TASKS, SAMPLES, REPEATS = 40, 2, 3


async def bare(tok, backend, tasks: list[str]) -> int:
    cfg = PRESETS["areal-math"]
    turns = 0
    for task in tasks:
        for s in range(SAMPLES):
            env = MathEnv()
            msgs = list(env.reset(task))
            ids = chat.encode(tok, chat.render(tok, msgs, add_generation_prompt=True))
            for t in range(cfg.max_turns):
                req = GenerationRequest(None, tuple(ids), SamplingParams(), tuple(msgs), (), task, t, s)
                gen = await backend.generate(req)
                ids += gen.token_ids
                content = chat.strip_end_of_turn(tok, gen.text)
                res = env.step(Action(RESPOND, {"content": content}, content))
                turns += 1
                if t + 1 < cfg.max_turns:
                    ids += chat.encode(tok, chat.tail_after_generation(tok, gen.text))
                    text, gp = chat.isolated_messages_delta(tok, res.observation)
                    ids += chat.encode(tok, text) + chat.encode(tok, gp)
                    msgs += [Message("assistant", content), *res.observation]
    return turns


def main() -> None:
    tok = load_tokenizer(None)
    env = MathEnv()
    tasks = env.tasks[:TASKS]
    backend = ScriptedBackend(MathEnv().reference_reply, tok, mistake_rate=0.3, seed=0)
    spec = BatchSpec("math", tuple(tasks), SAMPLES, "areal-math", PRESETS["areal-math"], SamplingParams(), "scripted",
                     concurrency=1)
    results: dict[str, list[float]] = {"traced+stored": [], "traced": [], "bare": []}
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory() as d:
            store = Store(Path(d) / "bench.db")
            t0 = time.perf_counter()
            res = asyncio.run(run_batch(spec, MathEnv, backend, tok, store))
            results["traced+stored"].append(res.n_turns / (time.perf_counter() - t0))
            store.close()
        t0 = time.perf_counter()
        res = asyncio.run(run_batch(spec, MathEnv, backend, tok, None))
        results["traced"].append(res.n_turns / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        n = asyncio.run(bare(tok, backend, tasks))
        results["bare"].append(n / (time.perf_counter() - t0))
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"loop speed, scripted policy, math env, {TASKS} tasks x {SAMPLES} samples x 5 turns, median of {REPEATS}")
    for k, v in med.items():
        print(f"  {k:14s} {v:8.1f} turns/s")
    print(f"  ratio traced+stored / bare   = {med['traced+stored'] / med['bare']:.2f}")
    print(f"  ratio traced / bare          = {med['traced'] / med['bare']:.2f}")
    print(f"  ratio traced+stored / traced = {med['traced+stored'] / med['traced']:.2f}")


if __name__ == "__main__":
    main()
