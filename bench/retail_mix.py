"""Outcome mix of the scripted policy on the retail env (slime-tau preset).

Two batches over the first 100 retail tasks, one sample each, SmolLM2 tokenizer:
  no mistakes    every episode should complete with reward 1.0
  mistakes 0.2   the CLI's default rate: a mix of completed (reward 1 and 0)
                 and aborted (malformed tool calls under slime's abort)
Prints the status x reward counts, the reward mean, turns and episodes/s.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.backends.base import SamplingParams  # noqa: E402
from engine.backends.scripted import ScriptedBackend  # noqa: E402
from engine.backends.tokenizers import load_tokenizer  # noqa: E402
from engine.envs.retail import RetailEnv  # noqa: E402
from engine.launch.batch import BatchResult, BatchSpec, run_batch  # noqa: E402
from engine.presets import PRESETS  # noqa: E402

N_TASKS = 100
DEFAULT_MISTAKE_RATE = 0.2  # the CLI's --mistake-rate default


def batch(tok, tasks: list[str], mistake_rate: float) -> tuple[BatchResult, float]:
    backend = ScriptedBackend(RetailEnv().reference_reply, tok, mistake_rate=mistake_rate, seed=0)
    spec = BatchSpec("retail", tuple(tasks), 1, "slime-tau", PRESETS["slime-tau"], SamplingParams(), "scripted",
                     concurrency=4)
    t0 = time.perf_counter()
    result = asyncio.run(run_batch(spec, RetailEnv, backend, tok, None))
    return result, time.perf_counter() - t0


def report(title: str, result: BatchResult, elapsed: float) -> None:
    eps = result.episodes
    mix = Counter((e.status.value, e.reward) for e in eps)
    mean = sum(e.reward for e in eps) / len(eps)
    print(f"{title}: {len(eps)} episodes, {result.n_turns} turns, {len(eps) / elapsed:.1f} episodes/s")
    print(f"  reward mean {mean:.3f}; all 1.0: {all(e.reward == 1.0 for e in eps)}")
    for (status, reward), n in sorted(mix.items()):
        print(f"  {status:10s} reward {reward:.0f}  {n:4d}")


def main() -> None:
    tok = load_tokenizer(None)
    tasks = RetailEnv().tasks[:N_TASKS]
    print(f"scripted policy on {len(tasks)} retail tasks, slime-tau preset, SmolLM2 tokenizer")
    report("no mistakes", *batch(tok, tasks, 0.0))
    report(f"mistake rate {DEFAULT_MISTAKE_RATE}", *batch(tok, tasks, DEFAULT_MISTAKE_RATE))


if __name__ == "__main__":
    main()
