"""Time the fidelity checks.

1. One 60-turn, ~32,000-token episode (tito, SmolLM2 template): all checks
   without the logprob recomputation.
2. The recomputation on the embedded model: on the 32k episode it reports
   that the episode exceeds the model's 8,192-token context; timed on an
   8,000-token episode instead.
3. Findings on batches of 100 scripted episodes from each preset.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
logging.getLogger("math_verify").setLevel(logging.ERROR)

from engine.backends.base import GenerationRequest, SamplingParams  # noqa: E402
from engine.backends.scripted import ScriptedBackend  # noqa: E402
from engine.backends.tokenizers import load_tokenizer  # noqa: E402
from engine.checks import CheckOptions, run_checks  # noqa: E402
from engine.envs import env_factory  # noqa: E402
from engine.envs.math import MathEnv  # noqa: E402
from engine.loop.stepper import run_episode  # noqa: E402
from engine.presets import PRESETS  # noqa: E402
from engine.records.episode import Generation  # noqa: E402
from engine.tokens import chat  # noqa: E402

WORDS = ("we", "add", "the", "numbers", "carry", "one", "so", "sum", "is", "check", "again", "digits", "then",
         "because", "total", "step", "first", "next", "value", "equals")


class VerboseBackend:
    """Replies of a fixed token length with a (wrong) boxed answer and real-looking logprobs."""

    name = "verbose"

    def __init__(self, tok, n_tokens: int) -> None:
        self.tok, self.n = tok, n_tokens

    async def generate(self, request: GenerationRequest) -> Generation:
        rng = random.Random(request.turn)
        words = " ".join(rng.choice(WORDS) for _ in range(self.n * 2))
        ids = chat.encode(self.tok, words)[: self.n - 8] + chat.encode(self.tok, " \\boxed{0}")
        ids = ids + sorted(chat.end_of_turn_ids(self.tok))[:1]
        return Generation(text=chat.decode(self.tok, ids), token_ids=tuple(ids),
                          logprobs=tuple(-rng.random() for _ in ids), model="verbose")

    def describe(self):
        return {"name": self.name}


def long_episode(tok, turns: int, per_turn: int):
    env = MathEnv()
    cfg = PRESETS["areal-math"].with_(max_turns=turns)
    return asyncio.run(run_episode(env, VerboseBackend(tok, per_turn), tok, cfg, env.tasks[0], preset="areal-math"))


def timed(fn, repeats: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    tok = load_tokenizer(None)
    ep = long_episode(tok, 60, 505)
    print(f"episode: {ep.n_turns} turns, {len(ep.tokens)} tokens")
    t, found = timed(lambda: run_checks(ep, CheckOptions(tokenizer=tok)))
    print(f"  checks without logprob recomputation: {t:.3f} s (best of 3); findings: "
          f"{dict(Counter(f.kind for f in found if f.severity.value != 'info'))}")
    t, found = timed(lambda: run_checks(ep, CheckOptions(tokenizer=tok, recompute_logprobs=True, model="smollm2")), 1)
    print(f"  with recomputation on the embedded model: {t:.1f} s: "
          f"{[f.message for f in found if f.kind in ('not_checked', 'logprob_mismatch') and 'logprob' in f.message][:1]}")
    ep8 = long_episode(tok, 15, 520)
    t, found = timed(lambda: run_checks(ep8, CheckOptions(tokenizer=tok, recompute_logprobs=True, model="smollm2")), 1)
    lm = [f for f in found if f.kind == "logprob_mismatch"]
    print(f"  {len(ep8.tokens)}-token episode with recomputation: {t:.1f} s "
          f"({lm[0].severity.value}: {lm[0].message[:90]})" if lm else "  no logprob finding")

    print("findings on 100 scripted episodes per preset (mistake rate 0.2), error/warning findings by kind:")
    for preset, env_name in (("areal-math", "math"), ("tito", "math"), ("tito", "retail"), ("slime-tau", "retail")):
        make_env = env_factory(env_name)
        backend = ScriptedBackend(make_env().reference_reply, tok, mistake_rate=0.2, seed=0)
        env = make_env()
        kinds: Counter[str] = Counter()
        t0 = time.perf_counter()
        n = 0
        for i, task in enumerate(env.tasks[:100]):
            e = asyncio.run(run_episode(make_env(), backend, tok, PRESETS[preset], task, preset=preset,
                                        sampling=SamplingParams(), sample_index=i))
            for f in list(e.all_findings()) + run_checks(e, CheckOptions(tokenizer=tok)):
                if f.severity.value != "info":
                    kinds[f"{f.kind}/{f.severity.value}"] += 1
            n += 1
        print(f"  {preset:10s} on {env_name}: {n} episodes in {time.perf_counter() - t0:.1f} s: {dict(kinds) or 'none'}")


if __name__ == "__main__":
    main()
