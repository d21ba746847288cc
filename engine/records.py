"""Typed records of a traced rollout.

Every record is a frozen dataclass with ``to_dict()`` / ``from_dict()``; the
dict form is plain JSON (token arrays become lists, NaN logprobs become
``None``) and is what the JSONL format and the store's JSON columns hold.
``SCHEMA_VERSION`` is written into every serialized episode; ``from_dict``
accepts every version listed in ``READABLE_VERSIONS`` and brings earlier
ones up to date (``engine.upgrade``). The docstring after each field is its
description in the published JSON Schema (``engine.schema``).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .token_arrays import TokenArrays as TokenArrays  # the episode's arrays; imported from here too

SCHEMA_VERSION = 2  # 2: findings carry id and caused_by
READABLE_VERSIONS = (1, 2)


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
class ToolCall:
    name: str
    """The function the model called."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """Its arguments, parsed from the model's JSON."""
    id: str | None = None
    """The call id an OpenAI-style API gave it, if any."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "arguments": self.arguments}
        if self.id is not None:
            d["id"] = self.id
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolCall:
        return cls(name=str(d["name"]), arguments=dict(d.get("arguments") or {}), id=d.get("id"))


@dataclass(frozen=True)
class Message:
    """One chat message, as handed to the chat template."""

    role: str
    """system, user, assistant or tool."""
    content: str
    """The message text as the chat template receives it."""
    name: str | None = None
    """A tool message's tool name (or a participant's name), if any."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls of an assistant message."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            d["name"] = self.name
        if self.tool_calls:
            d["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        return d

    def to_template(self) -> dict[str, Any]:
        """The dict a Hugging Face chat template expects."""
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            d["name"] = self.name
        if self.tool_calls:
            d["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        return cls(
            role=str(d["role"]),
            content="" if d.get("content") is None else str(d["content"]),
            name=d.get("name"),
            tool_calls=tuple(ToolCall.from_dict(c) for c in d.get("tool_calls") or ()),
        )


RESPOND = "respond"


@dataclass(frozen=True)
class Action:
    """What the agent does in the env: a tool call, or ``respond`` with text."""

    name: str
    """The tool called, or ``respond`` for text meant for the user."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """The tool's arguments."""
    text: str = ""
    """The text of a ``respond`` action."""

    @property
    def is_respond(self) -> bool:
        return self.name == RESPOND

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "text": self.text}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Action:
        return cls(name=str(d["name"]), arguments=dict(d.get("arguments") or {}), text=str(d.get("text", "")))


def _nan_to_none(xs: Any) -> list[float | None] | None:
    if xs is None:
        return None
    return [None if (x is None or math.isnan(x)) else float(x) for x in xs]


def _none_to_nan(xs: Any) -> tuple[float, ...] | None:
    if xs is None:
        return None
    return tuple(float("nan") if x is None else float(x) for x in xs)


@dataclass(frozen=True)
class Generation:
    """The raw answer of a backend to one request."""

    text: str
    """What the backend returned, decoded, end-of-turn token included when generated."""
    token_ids: tuple[int, ...] = ()
    """The generated ids, as the backend reported them (empty when it gave text only)."""
    logprobs: tuple[float, ...] | None = None
    """One rollout logprob per generated id (None when the backend gave none; NaN where unknown)."""
    finish_reason: str = "stop"
    """stop, length (cut by max_new_tokens) or abort."""
    latency_s: float = 0.0
    """Seconds the request took."""
    prompt_tokens: int = 0
    """Prompt length in tokens, as the backend counted it."""
    cached_tokens: int = 0
    """Prompt tokens the server served from its prefix cache."""
    weight_version: int | None = None
    """The policy version that generated it, if the server reports one."""
    model: str = ""
    """The model that answered (``manual`` for text a person wrote, ``imported`` for an import)."""
    finish_detail: str = ""
    """What the server said beyond the reason (an abort's message)."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Generation):
            return NotImplemented
        a, b = self.to_dict(), other.to_dict()
        return a == b

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": list(self.token_ids),
            "logprobs": _nan_to_none(self.logprobs),
            "finish_reason": self.finish_reason,
            "latency_s": self.latency_s,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "weight_version": self.weight_version,
            "model": self.model,
            "finish_detail": self.finish_detail,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Generation:
        return cls(
            text=str(d.get("text", "")),
            token_ids=tuple(int(x) for x in d.get("token_ids") or ()),
            logprobs=_none_to_nan(d.get("logprobs")),
            finish_reason=str(d.get("finish_reason", "stop")),
            latency_s=float(d.get("latency_s", 0.0)),
            prompt_tokens=int(d.get("prompt_tokens", 0)),
            cached_tokens=int(d.get("cached_tokens", 0)),
            weight_version=d.get("weight_version"),
            model=str(d.get("model", "")),
            finish_detail=str(d.get("finish_detail", "")),
        )


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
    kind: str
    """Where the tokens came from (see the class docstring)."""
    turn: int
    """The turn that added them."""
    trainable: bool
    """Whether the loop put loss mask 1 on them."""

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "kind": self.kind, "turn": self.turn, "trainable": self.trainable}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Segment:
        return cls(int(d["start"]), int(d["end"]), str(d["kind"]), int(d["turn"]), bool(d["trainable"]))


@dataclass(frozen=True)
class Finding:
    """Something wrong (or worth knowing) about a trace, located in it."""

    kind: str
    """What was found, e.g. mask_misaligned (see ``engine.checks.KINDS``)."""
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
            "evidence": self.evidence,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            kind=str(d["kind"]),
            severity=Severity(d.get("severity", "error")),
            message=str(d.get("message", "")),
            turn=d.get("turn"),
            token_start=d.get("token_start"),
            token_end=d.get("token_end"),
            evidence=dict(d.get("evidence") or {}),
            id=str(d.get("id") or ""),
            caused_by=d.get("caused_by"),
        )


@dataclass(frozen=True)
class Turn:
    """One step of the loop: prompt -> generation -> parse -> action -> env."""

    index: int
    """0-based turn number."""
    prompt_text: str | None
    """The prompt text the backend received (None when it was sent ids)."""
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
            "info": self.info,
            "segments": [s.to_dict() for s in self.segments],
            "timings": self.timings,
            "findings": [f.to_dict() for f in self.findings],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Turn:
        gen = d.get("generation")
        act = d.get("action")
        return cls(
            index=int(d["index"]),
            prompt_text=d.get("prompt_text"),
            prompt_len=int(d.get("prompt_len", 0)),
            generation=None if gen is None else Generation.from_dict(gen),
            tool_calls=tuple(ToolCall.from_dict(c) for c in d.get("tool_calls") or ()),
            parse_error=d.get("parse_error"),
            action=None if act is None else Action.from_dict(act),
            observation=tuple(Message.from_dict(m) for m in d.get("observation") or ()),
            reward=float(d.get("reward", 0.0)),
            done=bool(d.get("done", False)),
            info=dict(d.get("info") or {}),
            segments=tuple(Segment.from_dict(s) for s in d.get("segments") or ()),
            timings={k: float(v) for k, v in (d.get("timings") or {}).items()},
            findings=tuple(Finding.from_dict(f) for f in d.get("findings") or ()),
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
    config: dict[str, Any] = field(default_factory=dict)
    """The effective loop config (every knob), the sampling parameters and what the env reported."""
    backend: dict[str, Any] = field(default_factory=dict)
    """What answered: the backend's name, model, URL and settings."""
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
    """The token arrays (serialized as tokens, loss_mask, logprobs and versions)."""
    prompt_len: int = 0
    """Length of the first prompt in tokens."""
    segments: tuple[Segment, ...] = ()
    """Runs of tokens by origin; they tile the token array."""
    findings: tuple[Finding, ...] = ()
    """The checks' findings (the loop's own are on the turns)."""
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
    source: dict[str, Any] = field(default_factory=lambda: {"kind": "live"})
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

    def all_findings(self) -> tuple[Finding, ...]:
        out = list(self.findings)
        for t in self.turns:
            out.extend(t.findings)
        return tuple(out)

    def to_dict(self, include_tokens: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {"schema_version": self.schema_version}
        for f in fields(self):
            if f.name in ("schema_version", "tokens"):
                continue
            v = getattr(self, f.name)
            if f.name == "status":
                v = v.value
            elif f.name in ("messages", "turns", "segments", "findings"):
                v = [x.to_dict() for x in v]
            elif f.name in ("turn_rewards", "returns", "tags", "tools"):
                v = list(v)
            d[f.name] = v
        if include_tokens:
            d.update(self.tokens.to_dict())
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        version = int(d.get("schema_version", SCHEMA_VERSION))
        if version not in READABLE_VERSIONS:
            raise ValueError(
                f"schema_version {version} is newer than this Rollscope reads ({max(READABLE_VERSIONS)}); upgrade Rollscope"
            )
        if version < SCHEMA_VERSION:
            from .upgrade import upgrade

            d = upgrade(d, SCHEMA_VERSION)
        return cls(
            id=str(d["id"]),
            env=str(d["env"]),
            task_id=str(d["task_id"]),
            run_id=d.get("run_id"),
            group_id=d.get("group_id"),
            sample_index=int(d.get("sample_index", 0)),
            preset=str(d.get("preset", "")),
            config=dict(d.get("config") or {}),
            backend=dict(d.get("backend") or {}),
            tokenizer=str(d.get("tokenizer", "")),
            template_hash=str(d.get("template_hash", "")),
            status=Status(d.get("status", "completed")),
            reason=str(d.get("reason", "")),
            reward=float(d.get("reward") or 0.0),
            turn_rewards=tuple(float(x) for x in d.get("turn_rewards") or ()),
            returns=tuple(float(x) for x in d.get("returns") or ()),
            messages=tuple(Message.from_dict(m) for m in d.get("messages") or ()),
            tools=tuple(d.get("tools") or ()),
            turns=tuple(Turn.from_dict(t) for t in d.get("turns") or ()),
            tokens=TokenArrays.from_dict(d),
            prompt_len=int(d.get("prompt_len", 0)),
            segments=tuple(Segment.from_dict(s) for s in d.get("segments") or ()),
            findings=tuple(Finding.from_dict(f) for f in d.get("findings") or ()),
            parent_id=d.get("parent_id"),
            fork_turn=d.get("fork_turn"),
            tags=tuple(str(t) for t in d.get("tags") or ()),
            starred=bool(d.get("starred", False)),
            note=str(d.get("note", "")),
            source=dict(d.get("source") or {"kind": "live"}),
            created_at=float(d.get("created_at", 0.0)),
            schema_version=SCHEMA_VERSION,
        )
