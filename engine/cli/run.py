"""``rollscope run``: a batch of episodes, run and stored."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from .common import DEFAULT_DB, knob_settings, open_store, positive_int, rate


def register(sub: Any) -> None:
    r = sub.add_parser("run", help="run a batch of episodes and store them")
    r.add_argument("--env", default="math", help="math, retail, taubench:retail or taubench:airline")
    r.add_argument("--problems", help="math env: an AReaL-style JSONL (query_id, prompt, solutions) instead of the built-in set")
    r.add_argument("--preset", help="tito, slime-tau, slime-tau-seed, areal-math, areal-multiturn or verl-tool "
                   "(default: areal-math for math, slime-tau for tool envs; `rollscope presets` lists them)")
    r.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                   help="change one of the preset's knobs, e.g. --set turn_discount=0.9 (repeatable)")
    r.add_argument("--config", help="a preset file (JSON, as `rollscope presets --json` prints) instead of --preset")
    r.add_argument("--user", default="scripted", help="who plays the user in tool envs: scripted or llm")
    r.add_argument("--user-url", help="--user llm: an sglang server for the user model (default: the local model)")
    r.add_argument("--user-model", help="--user llm: a local model for the user (default: the embedded SmolLM2)")
    policy_options(r)
    r.add_argument("--tasks", default="0:8", help="task range or list: 0:8, 3, 1,5,9, all")
    r.add_argument("--samples", type=positive_int, default=1, help="samples per task (a GRPO group)")
    r.add_argument("--db", default=DEFAULT_DB)
    r.add_argument("--tokenizer", help="tokenizer folder or id (default: the embedded SmolLM2 one with its tool template)")
    r.add_argument("--max-turns", type=positive_int)
    r.add_argument("--concurrency", type=positive_int, default=4)
    r.add_argument("--run", metavar="NAME", help="name the run (default: a fresh id); a name already used is refused")
    r.add_argument("--tag", action="append", default=[], metavar="TAG", help="tag every episode (repeatable)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(handler=cmd_run)


def policy_options(r: argparse.ArgumentParser, sampling_default: str = "") -> None:
    """The options of the policy that generates (``run``, ``fork``): which one, where, and how it samples;
    ``sampling_default`` says where the sampling parameters come from when not given (else their defaults)."""
    r.add_argument("--policy", default="scripted", help="scripted, local, sglang or openai")
    r.add_argument("--url", help="sglang / openai policy: the server's base URL, e.g. http://127.0.0.1:30000")
    r.add_argument("--api", default="completions", choices=["completions", "chat"], help="openai policy: which endpoint")
    r.add_argument("--timeout", type=float, default=60.0,
                   help="sglang / openai policy: seconds a turn may wait for the server, the whole answer, "
                        "every retry and the waits between them included (default 60)")
    r.add_argument("--retries", type=int, default=3,
                   help="sglang / openai policy: tries after the first when the server fails (default 3); a server "
                        "that stops answering, its health check included, is not retried")
    r.add_argument("--model", help="local policy: a local Hugging Face folder or a cached hub id (default: embedded SmolLM2)")
    said = f" (default: {sampling_default})" if sampling_default else ""
    r.add_argument("--temperature", type=float, default=None if said else 1.0, help=said.strip(" ()") or None)
    r.add_argument("--top-p", type=float, default=None if said else 1.0, help=said.strip(" ()") or None)
    r.add_argument("--max-new-tokens", type=positive_int, default=None if said else 256, help=said.strip(" ()") or None)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--top-logprobs", type=int, default=0, metavar="K",
                   help="record at each generated token its K most likely tokens with their logprobs, and the "
                        "entropy (exact on the local model, estimated from the top K on a server; 0 = none, at most 20)")
    r.add_argument("--mistake-rate", type=rate, default=None if said else 0.2,
                   help="scripted policy: share of wrong turns (0 = always right; default: "
                   + ("the parent's, else 0.2)" if said else "0.2)"))


def backend_settings(a: argparse.Namespace, tokenizer: str | None = None) -> Any:
    """The checked ``BackendSettings`` of ``policy_options``."""
    from ..launch.plan import BackendSettings

    return BackendSettings.parse(a.policy, a.model, a.url, a.api, tokenizer, a.temperature, a.top_p,
                                 a.max_new_tokens, a.mistake_rate, a.seed, a.timeout, a.retries, a.top_logprobs)


def cmd_run(a: argparse.Namespace) -> int:
    from ..launch.batch import run_batch
    from ..launch.plan import UserSettings, plan_run

    settings = knob_settings(a.set) | ({"max_turns": str(a.max_turns)} if a.max_turns is not None else {})
    plan = plan_run(a.env, a.tasks, a.samples, a.preset, settings, a.concurrency, backend_settings(a, a.tokenizer),
                    config_file=a.config, problems=a.problems, user=UserSettings(a.user, a.user_model, a.user_url),
                    max_episodes=None, preflight=False, run_name=a.run, tags=a.tag)
    tokenizer, backend = plan.backend.open(plan.make_env)
    spec, make_env = plan.spec(), plan.make_env
    store = open_store(a.db, must_exist=False)
    try:
        result = asyncio.run(run_batch(spec, make_env, backend, tokenizer, store, progress=not a.quiet))
    except KeyboardInterrupt:
        print("rollscope: interrupted; finished episodes are stored, the rest are marked interrupted", file=sys.stderr)
        return 130
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts().items()))
    mean = sum(e.reward for e in result.episodes) / max(1, len(result.episodes))
    print(f"run {result.run_id}: {len(result.episodes)} episodes ({counts}), mean reward {mean:.3f}, "
          f"{result.n_turns} turns in {result.elapsed_s:.1f}s -> {a.db}")
    return 0
