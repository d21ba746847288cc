"""Where an episode came from: the run config, the backend that answered, the source it was read from.

Typed parts of the episode record (``Episode.config``, ``.backend``,
``.source``). Each serializes to a JSON object and reads back strictly
(``engine.records.reading``); the docstring after each field is its description in
the published JSON Schema.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from ..errors import ConfigError, FormatError
from ..presets import LATER_KNOBS, LoopConfig
from .reading import Fields
from .textsafe import json_safe

SourceKind = Literal["live", "messages", "slime", "areal", "verl", "taubench"]
SOURCE_KINDS: tuple[str, ...] = typing.get_args(SourceKind)
UserKind = Literal["scripted", "llm", "human"]
USER_KINDS: tuple[str, ...] = typing.get_args(UserKind)


@dataclass(frozen=True)
class SamplingParams:
    """How the model was sampled."""

    temperature: float = 1.0
    """Sampling temperature (0 is greedy)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    max_new_tokens: int = 512
    """The most tokens one generation may have."""
    stop: tuple[str, ...] = ()
    """Strings that end a generation."""
    seed: int | None = None
    """The sampling seed, when one was set."""
    top_logprobs: int = 0
    """How many of the most likely tokens each generated position records, with their logprobs (0: none)."""

    def to_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens,
                "stop": list(self.stop), "seed": self.seed, "top_logprobs": self.top_logprobs}

    @classmethod
    def from_fields(cls, f: Fields) -> SamplingParams:
        return cls(temperature=f.number("temperature"), top_p=f.number("top_p"),
                   max_new_tokens=f.integer("max_new_tokens"), stop=f.texts("stop"), seed=f.int_or_none("seed"),
                   top_logprobs=f.integer("top_logprobs"))


@dataclass(frozen=True)
class EnvInfo:
    """What the env reported about itself when the episode ran."""

    name: str
    """The env's name (math, retail, taubench:airline, ...)."""
    user: UserKind | None = None
    """Who played the user: scripted, llm or human (None when the env has no user of its own)."""
    n_tasks: int | None = None
    """How many tasks the env holds."""
    details: dict[str, Any] = field(default_factory=dict)
    """What else the env said of itself (its problem source, its data seed)."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "user": self.user, "n_tasks": self.n_tasks, "details": json_safe(self.details)}

    @classmethod
    def from_fields(cls, f: Fields) -> EnvInfo:
        user = None if f.raw("user") is None else f.choice("user", USER_KINDS)
        return cls(name=f.text("name"), user=typing.cast(UserKind | None, user), n_tasks=f.int_or_none("n_tasks"),
                   details=f.obj("details"))

    @classmethod
    def of(cls, described: dict[str, Any]) -> EnvInfo:
        """From an env's ``describe()``: name, user and n_tasks typed, the rest kept as details."""
        user = described.get("user")
        n = described.get("n_tasks")
        return cls(name=str(described.get("name", "")), user=user if user in USER_KINDS else None,
                   n_tasks=n if isinstance(n, int) else None,
                   details={k: v for k, v in described.items() if k not in ("name", "user", "n_tasks")})


_KNOB_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}


_LOOPS_READ: dict[tuple[tuple[str, str], ...], LoopConfig] = {}  # the knobs of a run repeat in every episode
_LOOPS_KEPT = 64


def _loop_from_fields(f: Fields) -> LoopConfig:
    # Keyed by each value's repr: 1, 1.0 and True (and 0.0 and -0.0) are equal keys in Python, not equal knobs.
    key = tuple((k, repr(v)) for k, v in f.d.items()) if all(
        type(v) in (str, int, float, bool, type(None)) for v in f.d.values()) else None
    loop = _LOOPS_READ.get(key) if key is not None else None
    if loop is None:
        loop = _read_loop(f)
        if key is not None:
            if len(_LOOPS_READ) >= _LOOPS_KEPT:
                _LOOPS_READ.clear()
            _LOOPS_READ[key] = loop
    return loop


def _read_loop(f: Fields) -> LoopConfig:
    known = {x.name: x for x in fields(LoopConfig)}
    for key in f.d:
        if key not in known:
            raise f.fail(key, "is not a knob of the loop (rollscope presets lists them)")
    kw: dict[str, Any] = {}
    for name, fld in known.items():
        if name in LATER_KNOBS and name not in f.d:
            continue  # a record that predates the knob: its default, what that loop did
        v = f.raw(name)
        t = str(fld.type)
        nullable = t.endswith("| None")
        allowed = _KNOB_TYPES[t.split("|")[0].strip()]
        if v is None and nullable:
            kw[name] = None
            continue
        if not isinstance(v, allowed) or (isinstance(v, bool) and bool not in allowed):
            raise f.fail(name, f"must be {t}, got {v!r:.40}")
        kw[name] = float(typing.cast(float, v)) if allowed == (int, float) else v
    try:
        return LoopConfig(**kw)
    except ConfigError as e:
        raise FormatError(str(e), field=f.path) from None


@dataclass(frozen=True)
class RunConfig:
    """What the episode ran with: the loop's knobs, the sampling and the env."""

    loop: LoopConfig | None = None
    """Every knob of the loop (None when the source does not say, as for most imports)."""
    sampling: SamplingParams | None = None
    """The sampling parameters (None when the source does not say)."""
    env: EnvInfo | None = None
    """What the env reported (None when the source does not say)."""

    def to_dict(self) -> dict[str, Any]:
        return {"loop": None if self.loop is None else self.loop.to_dict(),
                "sampling": None if self.sampling is None else self.sampling.to_dict(),
                "env": None if self.env is None else self.env.to_dict()}

    @classmethod
    def from_fields(cls, f: Fields) -> RunConfig:
        loop, sampling, env = f.sub_or_none("loop"), f.sub_or_none("sampling"), f.sub_or_none("env")
        return cls(loop=None if loop is None else _loop_from_fields(loop),
                   sampling=None if sampling is None else SamplingParams.from_fields(sampling),
                   env=None if env is None else EnvInfo.from_fields(env))

    @property
    def token_mode(self) -> str:
        """The loop's token mode, or ``unknown`` when the source does not say."""
        return self.loop.token_mode if self.loop is not None else "unknown"

    @property
    def user(self) -> UserKind | None:
        return None if self.env is None else self.env.user


@dataclass(frozen=True)
class BackendInfo:
    """What answered the episode's requests."""

    name: str
    """The backend: local, sglang, openai, scripted."""
    model: str = ""
    """The model's name as the backend reports it."""
    model_spec: str | None = None
    """The local backend's model: a folder, a hub id, or smollm2 (the embedded SmolLM2)."""
    url: str | None = None
    """The server's URL (HTTP backends)."""
    mode: str | None = None
    """The OpenAI API used: completions or chat."""
    tokenizer: str | None = None
    """The tokenizer the backend encoded and decoded with, when it had one."""
    timeout: float | None = None
    """Seconds a request may take (HTTP backends)."""
    retries: int | None = None
    """How often a failed request was tried again (HTTP backends)."""
    weight_version: int | str | None = None
    """The policy version the server reported."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The backend's other settings (the local device; the scripted policy's mistake rate and seed)."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "model_spec": self.model_spec, "url": self.url,
                "mode": self.mode, "tokenizer": self.tokenizer, "timeout": self.timeout, "retries": self.retries,
                "weight_version": self.weight_version, "settings": json_safe(self.settings)}

    @classmethod
    def from_fields(cls, f: Fields) -> BackendInfo:
        wv = f.raw("weight_version")
        if not (wv is None or isinstance(wv, (str, int)) and not isinstance(wv, bool)):
            raise f.fail("weight_version", f"must be an integer, a string or null, got {wv!r:.40}")
        return cls(name=f.text("name"), model=f.text("model"), model_spec=f.text_or_none("model_spec"),
                   url=f.text_or_none("url"), mode=f.text_or_none("mode"), tokenizer=f.text_or_none("tokenizer"),
                   timeout=f.number_or_none("timeout"), retries=f.int_or_none("retries"), weight_version=wv,
                   settings=f.obj("settings"))

    @classmethod
    def of(cls, described: dict[str, Any]) -> BackendInfo:
        """From a backend's ``describe()``: the fields above typed, everything else kept as settings."""
        keys = ("model_spec", "url", "mode", "tokenizer")
        timeout, retries, wv = described.get("timeout"), described.get("retries"), described.get("weight_version")
        return cls(
            name=str(described.get("name", "")), model=str(described.get("model") or ""),
            **{k: None if described.get(k) is None else str(described[k]) for k in keys},
            timeout=float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None,
            retries=retries if isinstance(retries, int) else None,
            weight_version=wv if isinstance(wv, (int, str)) else None,
            settings={k: v for k, v in described.items() if k not in BACKEND_FIELDS})

    @property
    def label(self) -> str:
        """The model, or the backend's name when it has no model."""
        return self.model or self.name


BACKEND_FIELDS = frozenset(f.name for f in fields(BackendInfo)) - {"settings"}
"""The keys of a backend's ``describe()`` that are typed fields; the rest are its settings."""


@dataclass(frozen=True)
class Source:
    """Where the record came from: a live run, or a file of a training framework."""

    kind: SourceKind = "live"
    """live, or the format it was imported from: messages, slime, areal, verl."""
    file: str | None = None
    """The file it was imported from."""
    line: int | None = None
    """The line of that file (1-based), for formats with lines."""
    index: int | None = None
    """Its position among the file's samples (0-based)."""
    by_hand: bool = False
    """Whether a person stepped it (Step)."""
    user_by_hand: bool = False
    """Whether a person played its user."""
    details: dict[str, Any] = field(default_factory=dict)
    """What the format holds beyond the record (slime's rollout id and train fields, AReaL's token counts, ...)."""

    @property
    def live(self) -> bool:
        return self.kind == "live"

    @property
    def rollout_step(self) -> int | None:
        """The trainer's rollout step the record came from (``details["rollout_step"]``), when a dump says."""
        value = self.details.get("rollout_step")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "file": self.file, "line": self.line, "index": self.index,
                "by_hand": self.by_hand, "user_by_hand": self.user_by_hand, "details": json_safe(self.details)}

    @classmethod
    def from_fields(cls, f: Fields) -> Source:
        return cls(kind=typing.cast(SourceKind, f.choice("kind", SOURCE_KINDS)), file=f.text_or_none("file"),
                   line=f.int_or_none("line"), index=f.int_or_none("index"), by_hand=f.boolean("by_hand"),
                   user_by_hand=f.boolean("user_by_hand"), details=f.obj("details"))

    @classmethod
    def imported(cls, kind: SourceKind, file: str, *, line: int | None = None, index: int | None = None,
                 **details: Any) -> Source:
        return cls(kind=kind, file=file, line=line, index=index, details=details)

