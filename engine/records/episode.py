"""Typed records of a traced rollout.

Every record is a frozen dataclass with ``to_dict()`` / ``from_dict()``; the
dict form is plain JSON (token arrays become lists, NaN logprobs become
``None``) and is what the JSONL format and the store's JSON columns hold.
``SCHEMA_VERSION`` is written into every serialized episode; ``from_dict``
accepts every version listed in ``READABLE_VERSIONS`` and brings earlier
ones up to date (``engine.records.upgrade``). The docstring after each field is its
description in the published JSON Schema (``engine.records.schema``).
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import numpy as np

from ..errors import FormatError
from . import prompts
from .conversation import RESPOND as RESPOND  # re-exported: the records' face
from .conversation import ROLES as ROLES
from .conversation import Action as Action
from .conversation import Message as Message
from .conversation import Role as Role
from .conversation import ToolCall as ToolCall
from .generation import FINISH_REASONS as FINISH_REASONS
from .generation import FinishReason as FinishReason
from .generation import Generation as Generation
from .outcome import Outcome
from .provenance import BackendInfo, RunConfig, Source
from .reading import Fields
from .textsafe import json_safe
from .token_arrays import TokenArrays as TokenArrays  # the episode's arrays; imported from here too

# 2: findings carry id and caused_by; 3: typed config, backend and source, every field required;
# 4: which checks produced the findings (checked); 5: why it earned its reward (outcome); 6: each turn's raw tool
# outputs (raw_observation) and the episode's reference answer (ground_truth), out of ``info``; 7: a turn's prompt
# text may be given as pieces of the turn before it (``records.prompts``); 8: per token the entropy and the top K
# alternatives (entropy, top_ids, top_logprobs, entropy_estimated), on the episode and on each generation, and
# how many were asked for (sampling.top_logprobs); 9: the outcome says whether the reward counts every turn's answer
# (every_turn), a math outcome of a reward summed over turns computed again; 10: a tool call whose arguments are not
# a JSON object keeps them as written (raw_arguments); 11: a hash of the arrays the checks judged (checked_arrays)
SCHEMA_VERSION = 11
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)

SegmentKind = Literal["prompt", "gen_prompt", "assistant", "tail", "user", "tool", "system", "env"]
SEGMENT_KINDS: tuple[str, ...] = typing.get_args(SegmentKind)
FindingKind = Literal[
    "template_not_prefix_stable", "tokens_not_rendering", "retokenization_drift", "mask_misaligned",
    "logprobs_missing", "logprobs_misaligned", "truncated_turn", "truncated_episode", "response_length_mismatch",
    "logprob_mismatch", "tool_call_parse_error", "env_error", "backend_error", "internal_error", "not_checked",
    "generation_prompt_missing", "system_block_injected", "template_newline_trained", "tool_call_dropped",
    "answer_extraction_failed", "logprobs_absent", "edited_by_hand", "fork_replay_diverged", "text_replaced",
    "server_answer_invalid", "token_out_of_vocab", "ids_reencoded", "logprob_not_finite", "reward_not_finite", "im_end_newline_missing",
    "system_cut_wrong", "think_kept", "response_cut_trained", "tool_result_truncated", "strict_score_refused",
    "wrong_argument_token", "nothing_trained",
]
FINDING_KINDS: tuple[str, ...] = typing.get_args(FindingKind)


class Status(str, enum.Enum):
    """How an episode ended (or that it has not yet)."""

    RUNNING = "running"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:  # so f-strings and tables show the bare word
        return self.value


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Segment:
    """A run of tokens ``[start, end)`` in the episode's token array.

    ``kind`` says where the tokens came from: ``prompt`` (the first rendered
    prompt), ``gen_prompt`` (the template's assistant header before a later
    turn), ``assistant`` (the model's output), ``tail`` (template text after
    the model's output that the model did not generate, e.g. the newline
    after ``<|im_end|>``), ``user``, ``tool`` or ``system`` (env deltas).
    """

    start: int
    """First token of the run."""
    end: int
    """One past its last token."""
    kind: SegmentKind
    """Where the tokens came from (see the class docstring)."""
    turn: int
    """The turn that added them."""
    trainable: bool
    """Whether the loop put loss mask 1 on them."""

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "kind": self.kind, "turn": self.turn, "trainable": self.trainable}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Segment:
        return cls.from_fields(Fields(d))

    @classmethod
    def from_fields(cls, f: Fields) -> Segment:
        return cls(f.integer("start"), f.integer("end"), typing.cast(SegmentKind, f.choice("kind", SEGMENT_KINDS)),
                   f.integer("turn"), f.boolean("trainable"))


@dataclass(frozen=True)
class Finding:
    """Something wrong (or worth knowing) about a trace, located in it."""

    kind: FindingKind
    """What was found, e.g. mask_misaligned (``rollscope check --help`` and docs/architecture.md list them)."""
    severity: Severity
    """error (the training data is wrong), warning or info."""
    message: str
    """One sentence for a person."""
    turn: int | None = None
    """The turn it is about, if one."""
    token_start: int | None = None
    """First token it points at in the episode's token array, if any."""
    token_end: int | None = None
    """One past the last token it points at."""
    evidence: dict[str, Any] = field(default_factory=dict)
    """What the check saw: positions, ids, texts, counts."""
    id: str = ""
    """Unique within the episode ("f1", "f2", ...), given when the findings are linked."""
    caused_by: str | None = None
    """The id of the finding this one follows from; None for a root."""

    @property
    def is_root(self) -> bool:
        return self.caused_by is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "severity": self.severity.value,
            "message": self.message,
            "turn": self.turn,
            "token_start": self.token_start,
            "token_end": self.token_end,
            "caused_by": self.caused_by,
            "evidence": json_safe(self.evidence),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls.from_fields(Fields(d))

    @classmethod
    def from_fields(cls, f: Fields) -> Finding:
        return cls(
            kind=typing.cast(FindingKind, f.choice("kind", FINDING_KINDS)),
            severity=Severity(f.choice("severity", [s.value for s in Severity])),
            message=f.text("message"),
            turn=f.int_or_none("turn"),
            token_start=f.int_or_none("token_start"),
            token_end=f.int_or_none("token_end"),
            evidence=f.obj("evidence"),
            id=f.text("id"),
            caused_by=f.text_or_none("caused_by"),
        )


@dataclass(frozen=True)
class Turn:
    """One step of the loop: prompt -> generation -> parse -> action -> env."""

    index: int
    """0-based turn number."""
    prompt_text: str | None
    """The prompt text the backend received (None when it was sent ids). A record may give it as pieces of the
    previous turn's prompt text and generated text (``{"$pieces": [[start, end], "text", ...]}``: slices of
    that text and text as it is, joined); it is read whole."""
    prompt_len: int
    """Token position where this turn's prompt ends in the episode's array."""
    generation: Generation | None
    """The backend's answer (None when the turn failed before one)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls parsed from the reply."""
    parse_error: str | None = None
    """Why the reply could not be parsed, if it could not."""
    action: Action | None = None
    """What the env was asked to do (the first action when there were several)."""
    observation: tuple[Message, ...] = ()
    """The messages the env returned."""
    reward: float = 0.0
    """The env's reward for this turn (after shaping, when the preset shapes)."""
    done: bool = False
    """Whether the env said the episode is over."""
    info: dict[str, Any] = field(default_factory=dict)
    """What else the env returned."""
    raw_observation: tuple[str, ...] = ()
    """The env's raw output of each tool call that ran this turn, in call order, before any truncation (an
    error as the loop words it, an unknown tool's included); empty when no tool ran. verl-tool fills it."""
    segments: tuple[Segment, ...] = ()
    """The token runs this turn added."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent in each step of the turn."""
    findings: tuple[Finding, ...] = ()
    """What the loop recorded while running the turn."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "prompt_text": self.prompt_text,
            "prompt_len": self.prompt_len,
            "generation": None if self.generation is None else self.generation.to_dict(),
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "parse_error": self.parse_error,
            "action": None if self.action is None else self.action.to_dict(),
            "observation": [m.to_dict() for m in self.observation],
            "reward": self.reward,
            "done": self.done,
            "info": json_safe(self.info),
            "raw_observation": list(self.raw_observation),
            "segments": [s.to_dict() for s in self.segments],
            "timings": self.timings,
            "findings": [f.to_dict() for f in self.findings],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Turn:
        return cls.from_fields(Fields(d))

    @classmethod
    def from_fields(cls, f: Fields) -> Turn:
        gen, act = f.sub_or_none("generation"), f.sub_or_none("action")
        timings = f.obj("timings")
        for k, v in timings.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise FormatError(f"must be a number, got {v!r:.40}", field=f"{f.name('timings')}.{k}")
        return cls(
            index=f.integer("index"),
            prompt_text=f.text_or_none("prompt_text"),
            prompt_len=f.integer("prompt_len"),
            generation=None if gen is None else Generation.from_fields(gen),
            tool_calls=tuple(ToolCall.from_fields(c) for c in f.subs("tool_calls")),
            parse_error=f.text_or_none("parse_error"),
            action=None if act is None else Action.from_fields(act),
            observation=tuple(Message.from_fields(m) for m in f.subs("observation")),
            reward=f.number("reward"),
            done=f.boolean("done"),
            info=f.obj("info"),
            raw_observation=f.texts("raw_observation"),
            segments=tuple(Segment.from_fields(s) for s in f.subs("segments")),
            timings={k: float(v) for k, v in timings.items()},
            findings=tuple(Finding.from_fields(x) for x in f.subs("findings")),
        )


@dataclass(frozen=True)
class Episode:
    """One rollout: the conversation, its turns, its tokens and its verdict."""

    id: str
    """Unique id."""
    env: str
    """The env it ran in (or the format it was imported from)."""
    task_id: str
    """The task within the env."""
    run_id: str | None = None
    """The batch it belongs to."""
    group_id: str | None = None
    """Its GRPO group: the samples of one task in one run."""
    sample_index: int = 0
    """Its index within the group."""
    preset: str = ""
    """The loop preset it ran with."""
    config: RunConfig = field(default_factory=RunConfig)
    """The effective loop config (every knob), the sampling parameters and what the env reported."""
    backend: BackendInfo | None = None
    """What answered: the backend's name, model, URL and settings (None when the source does not say)."""
    tokenizer: str = ""
    """The tokenizer it was made with (a folder, a hub id, or smollm2)."""
    template_hash: str = ""
    """A hash of the chat template, to tell templates apart."""
    status: Status = Status.RUNNING
    """completed, truncated, aborted, failed, running or interrupted."""
    reason: str = ""
    """Why it ended."""
    reward: float = 0.0
    """The episode's reward, as the preset computes it."""
    turn_rewards: tuple[float, ...] = ()
    """Each turn's reward."""
    returns: tuple[float, ...] = ()
    """Each turn's discounted return."""
    messages: tuple[Message, ...] = ()
    """The whole conversation."""
    tools: tuple[dict[str, Any], ...] = ()
    """The tool schemas the model was shown."""
    turns: tuple[Turn, ...] = ()
    """The turns, in order."""
    tokens: TokenArrays = field(default_factory=TokenArrays)
    """The token arrays (serialized as tokens, loss_mask, logprobs, versions, entropy, top_ids, top_logprobs and
    entropy_estimated)."""
    prompt_len: int = 0
    """Length of the first prompt in tokens."""
    segments: tuple[Segment, ...] = ()
    """Runs of tokens by origin; they tile the token array."""
    findings: tuple[Finding, ...] = ()
    """The checks' findings (the loop's own are on the turns)."""
    checked: str | None = None
    """The version of the fidelity checks whose findings it holds (every live run, `rollscope check` and
    `import --check` run them); null when no checks ran on it, so no findings does not mean clean."""
    checked_arrays: str | None = None
    """A hash of the token ids, loss mask and logprobs the checks judged (``TokenArrays.digest``); a record whose
    arrays no longer give it (edited after the check, or written where they do not fit) reads as not checked."""
    outcome: Outcome | None = None
    """Why it earned its reward, computed by the env that scored it; null while it runs."""
    ground_truth: str | None = None
    """The task's reference answer as text, as the trainer's scorer compares it (math under verl-tool);
    null where the loop recorded none."""
    parent_id: str | None = None
    """The episode it was forked from, if any."""
    fork_turn: int | None = None
    """The turn of the parent it was forked at."""
    tags: tuple[str, ...] = ()
    """Labels a person gave it."""
    starred: bool = False
    """Whether a person starred it."""
    note: str = ""
    """A person's note."""
    source: Source = field(default_factory=Source)
    """live, or which format and file it was imported from (with what that format holds)."""
    created_at: float = 0.0
    """When it was made (Unix seconds)."""
    schema_version: int = SCHEMA_VERSION
    """The record schema it was written with."""

    def evolve(self, **changes: Any) -> Episode:
        return replace(self, **changes)

    @property
    def n_turns(self) -> int:
        return len(self.turns)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def response_len(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def unchecked(self) -> bool:
        """It has ended and no check ran on it (a running one is checked as it ends): finding nothing means nothing."""
        return self.checked is None and self.status is not Status.RUNNING

    @property
    def checks_not_run(self) -> tuple[str, ...]:
        """The notes of the checks that could not run on it for want of what a person can give, a tokenizer or a
        model ("CHECK: not checked: WHY", their evidence ``needs`` it): checked in part, its findings those of the
        checks that ran (``Store.checks_not_run`` reads the same from the findings' index). A note of a check that
        had nothing to look at (no answer after a reply) is not one."""
        return tuple(f.message for f in self.all_findings() if f.kind == "not_checked" and f.evidence.get("needs"))

    def all_findings(self) -> tuple[Finding, ...]:
        out = list(self.findings)
        for t in self.turns:
            out.extend(t.findings)
        return tuple(out)

    def to_dict(self, include_tokens: bool = True, include_turns: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {"schema_version": self.schema_version}
        for f in fields(self):
            if f.name in ("schema_version", "tokens") or (f.name == "turns" and not include_turns):
                continue
            v = getattr(self, f.name)
            if f.name == "status":
                v = v.value
            elif f.name in ("config", "source"):
                v = v.to_dict()
            elif f.name in ("backend", "outcome"):
                v = None if v is None else v.to_dict()
            elif f.name in ("messages", "turns", "segments", "findings"):
                v = [x.to_dict() for x in v]
            elif f.name in ("turn_rewards", "returns", "tags", "tools"):
                v = list(v)
            d[f.name] = v
        if include_tokens:
            d.update(self.tokens.to_dict())
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], tokens: TokenArrays | None = None,
                  nonfinite: list[tuple[str, int, float]] | None = None) -> Episode:
        """The record ``d`` (version 2 or later, upgraded; a version-1 record goes through ``engine.read_episode``); a
        missing or mistyped field, or a number that is not finite, is a ``FormatError``.

        ``tokens``, when given (the store keeps them as blobs), stands for the token lists. A logprob that
        is not a finite number is read as unknown and added to ``nonfinite`` (``records.marks``).
        """
        f = Fields(d, nonfinite=nonfinite)
        version = f.integer("schema_version") if f.has("schema_version") else 1
        if version not in READABLE_VERSIONS:
            raise FormatError(f"{version} is not a version this Rollscope reads ({', '.join(map(str, READABLE_VERSIONS))}); "
                              "a newer Rollscope wrote it: upgrade Rollscope", field="schema_version")
        if version < SCHEMA_VERSION:
            from .upgrade import upgrade

            f = Fields(upgrade(d, SCHEMA_VERSION), nonfinite=f.nonfinite)
        turns = prompts.restore_turns(f.d.get("turns"))
        if turns is not f.d.get("turns"):
            f = Fields({**f.d, "turns": turns}, nonfinite=f.nonfinite)
        return cls(  # fields read in record order, so the first bad one is the one named
            id=f.text("id"),
            env=f.text("env"),
            task_id=f.text("task_id"),
            run_id=f.text_or_none("run_id"),
            group_id=f.text_or_none("group_id"),
            sample_index=f.integer("sample_index"),
            preset=f.text("preset"),
            config=RunConfig.from_fields(f.sub("config")),
            backend=_backend(f.sub_or_none("backend")),
            tokenizer=f.text("tokenizer"),
            template_hash=f.text("template_hash"),
            status=Status(f.choice("status", [s.value for s in Status])),
            reason=f.text("reason"),
            reward=f.number("reward"),
            turn_rewards=f.numbers("turn_rewards"),
            returns=f.numbers("returns"),
            messages=tuple(Message.from_fields(m) for m in f.subs("messages")),
            tools=tuple(t.d for t in f.subs("tools")),
            turns=tuple(Turn.from_fields(t) for t in f.subs("turns")),
            tokens=TokenArrays.from_fields(f) if tokens is None else tokens,
            prompt_len=f.integer("prompt_len"),
            segments=tuple(Segment.from_fields(s) for s in f.subs("segments")),
            findings=tuple(Finding.from_fields(x) for x in f.subs("findings")),
            checked=f.text_or_none("checked") or None,  # an empty version names no checks: none ran
            checked_arrays=f.text_or_none("checked_arrays"),
            outcome=None if (o := f.sub_or_none("outcome")) is None else Outcome.from_fields(o),
            ground_truth=f.text_or_none("ground_truth"),
            parent_id=f.text_or_none("parent_id"),
            fork_turn=f.int_or_none("fork_turn"),
            tags=f.texts("tags"),
            starred=f.boolean("starred"),
            note=f.text("note"),
            source=Source.from_fields(f.sub("source")),
            created_at=f.number("created_at"),
            schema_version=SCHEMA_VERSION,
        )


def raw_observations(turn: Turn) -> tuple[str, ...]:
    """The raw output of each tool call that ran in ``turn``, in call order (``Turn.raw_observation``; a turn
    built in memory by code that still writes ``info["raw_observation"]`` is read from there)."""
    if turn.raw_observation:
        return turn.raw_observation
    old = turn.info.get("raw_observation")
    return tuple(str(x) for x in old) if isinstance(old, list) else ()


def with_generations(tokens: TokenArrays, turns: Sequence[Turn]) -> TokenArrays:
    """``tokens`` with the entropy and top K each turn's generation carries, placed on its assistant tokens: from
    the turn's first assistant token on, for as long as the arrays hold the generated ids (a re-encoded reply
    keeps them only while its ids are the generated ones). Unchanged when no generation carries any."""
    gens = [(t, t.generation) for t in turns if t.generation is not None
            and (t.generation.top_ids or t.generation.entropy is not None)]
    if not gens:
        return tokens
    n = len(tokens)
    k = max((len(r) for _, g in gens for r in g.top_ids), default=0)
    entropy = tokens.entropy.copy()
    top_ids = np.full((n, k), -1, dtype=np.int32)
    top_lps = np.full((n, k), np.nan, dtype=np.float32)
    estimated = tokens.entropy_estimated
    if tokens.top_k:
        kk = min(k, tokens.top_k)
        top_ids[:, :kk], top_lps[:, :kk] = tokens.top_ids[:, :kk], tokens.top_logprobs[:, :kk]
    for turn, gen in gens:
        start = next((s.start for s in turn.segments if s.kind == "assistant"), None)
        if start is None:
            continue
        m = 0
        while m < len(gen.token_ids) and start + m < n and int(tokens.ids[start + m]) == gen.token_ids[m]:
            m += 1
        if gen.entropy is not None:
            entropy[start:start + m] = np.asarray(gen.entropy[:m], dtype=np.float32)
            estimated = estimated or gen.entropy_estimated
        for i, (row_ids, row_lps) in enumerate(zip(gen.top_ids[:m], gen.top_logprobs[:m])):
            top_ids[start + i, :len(row_ids)] = row_ids
            top_lps[start + i, :len(row_lps)] = row_lps
    return tokens.evolve(entropy=entropy, top_ids=top_ids, top_logprobs=top_lps, entropy_estimated=estimated)


def _backend(f: Fields | None) -> BackendInfo | None:
    return None if f is None else BackendInfo.from_fields(f)
