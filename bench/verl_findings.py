"""What the checks say of verl's agent loop: findings by kind on verl-tool runs, and on the same generations
replayed under tito.

For each env (retail, math) and each template (the real Qwen3 tokenizer; Qwen3 with ``enable_thinking`` off;
the SmolLM3-style template of the tests, whose default system block depends on that kwarg), the scripted
policy plays ``--tasks`` tasks under ``verl-tool`` (``prompt_length`` raised to 4096 so retail's prompt fits,
every other knob verl's default); every episode is checked; its generations are then replayed in order under
``tito`` and checked too. Printed: episodes, then findings by kind (roots and all, errors and warnings; info
counted apart) for each side.

Run: ``python bench/verl_findings.py [--tasks 10] [--mistake-rate 0.3]`` (about two minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
logging.getLogger("math_verify").setLevel(logging.ERROR)

from engine.backends.scripted import ScriptedBackend  # noqa: E402
from engine.checks import CheckOptions, with_checks  # noqa: E402
from engine.envs.math import MathEnv  # noqa: E402
from engine.envs.retail import RetailEnv  # noqa: E402
from engine.loop.stepper import run_episode  # noqa: E402
from engine.presets import PRESETS  # noqa: E402
from engine.records.episode import Episode, Finding, Severity  # noqa: E402
from tests.fakes import Replay  # noqa: E402

QWEN3 = Path(os.environ.get("ROLLSCOPE_QWEN3_TOKENIZER")
             or Path(__file__).resolve().parents[1] / ".cache" / "tokenizers" / "qwen3")


def tokenizer(template: str | None) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(QWEN3))
    if template is not None:
        tok.chat_template = template
    return tok


def count(eps: list[Episode], tok: Any, into: Counter[str], roots_: Counter[str]) -> None:
    for ep in eps:
        found: list[Finding] = list(with_checks(ep, CheckOptions(tokenizer=tok)).all_findings())
        for f in found:
            key = f.kind + (" (info)" if f.severity is Severity.INFO else "")
            into[key] += 1
            if f.caused_by is None and f.severity is not Severity.INFO:
                roots_[f.kind] += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--mistake-rate", type=float, default=0.3)
    a = ap.parse_args()
    from tests.templates import SMOLLM3_STYLE

    setups = [("qwen3", None, "{}"), ("qwen3 enable_thinking=false", None, '{"enable_thinking": false}'),
              ("smollm3-style enable_thinking=false", SMOLLM3_STYLE, '{"enable_thinking": false}')]
    for label, template, kwargs in setups:
        tok = tokenizer(template)
        for env_cls in (RetailEnv, MathEnv):
            env = env_cls()
            cfg = PRESETS["verl-tool"].with_settings({"prompt_length": "4096", "apply_chat_template_kwargs": kwargs})
            verl: list[Episode] = []
            tito: list[Episode] = []
            for i, task in enumerate(env.tasks[: a.tasks]):
                backend = ScriptedBackend(env_cls().reference_reply, tok, mistake_rate=a.mistake_rate, seed=i)
                ep = asyncio.run(run_episode(env_cls(), backend, tok, cfg, task, preset="verl-tool"))
                verl.append(ep)
                gens = [t.generation for t in ep.turns if t.generation is not None]
                if gens:
                    tito.append(asyncio.run(run_episode(env_cls(), Replay(gens), tok, PRESETS["tito"], task,
                                                        preset="tito")))
            for side, eps in (("verl-tool", verl), ("tito, same generations", tito)):
                kinds: Counter[str] = Counter()
                roots_: Counter[str] = Counter()
                count(eps, tok, kinds, roots_)
                statuses = Counter(e.status.value for e in eps)
                print(f"{label} / {env.name} / {side}: {len(eps)} episodes {dict(statuses)}")
                print(f"  roots: {dict(sorted(roots_.items()))}")
                print(f"  all:   {dict(sorted(kinds.items()))}")


if __name__ == "__main__":
    main()
