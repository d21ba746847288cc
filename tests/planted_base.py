"""The clean episodes and editing helpers behind the planted-bug corpus (``tests/planted.py``).

Backends that make realistic clean episodes (:class:`SampledScripted` gives
the non-zero, deterministic logprobs a sampling model would), the
:class:`Base` recipes, the :class:`Planted` record and helpers that edit
token arrays and turns without touching the engine.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine.backends.base import GenerationRequest, SamplingParams
from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Episode, Generation, Segment, Severity, TokenArrays
from engine.tokens import chat
from tests.toolenv import PriceEnv

ANY = object()  # "not asserted" for a Planted field


# -- backends -----------------------------------------------------------------


class SampledScripted:
    """The scripted policy, with logprobs and a weight version like a sampled model's."""

    name = "scripted"

    def __init__(self, env_factory: Callable[[], Any], tok: Any, mistake_rate: float = 0.0, seed: int = 3) -> None:
        self.inner = ScriptedBackend(env_factory().reference_reply, tok, mistake_rate=mistake_rate, seed=seed)

    async def generate(self, request: GenerationRequest) -> Generation:
        g = await self.inner.generate(request)
        lps = tuple(-0.05 - 0.1 * ((7 * i + tid) % 13) for i, tid in enumerate(g.token_ids))
        return replace(g, logprobs=lps, weight_version=3)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe() | {"logprobs": "sampled"}


class ThinkingBackend:
    """A reasoning model: every reply opens with a ``<think>`` block, then the reference answer."""

    name = "thinking"

    def __init__(self, env_factory: Callable[[], Any], tok: Any) -> None:
        self._env = env_factory()
        self._tok = tok
        self._eot = chat.end_of_turn_texts(tok)[0]

    async def generate(self, request: GenerationRequest) -> Generation:
        reply = self._env.reference_reply(request.task_id, request.messages, random.Random(request.turn), 0.0)
        text = f"<think>\nTurn {request.turn}: check the arithmetic twice.\n</think>\n\n{reply}{self._eot}"
        ids = chat.encode(self._tok, text)
        return Generation(
            text=text,
            token_ids=tuple(ids),
            logprobs=tuple(-0.25 for _ in ids),
            finish_reason="stop",
            model="thinking-fake",
        )

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class CutTurns:
    """Wraps a backend; the replies of the given turns stop on the length limit after ``keep`` tokens."""

    def __init__(self, inner: Any, tok: Any, turns: Sequence[int], keep: int = 4) -> None:
        self.inner, self.tok, self.turns, self.keep = inner, tok, set(turns), keep
        self.name = inner.name

    async def generate(self, request: GenerationRequest) -> Generation:
        g = await self.inner.generate(request)
        if request.turn not in self.turns:
            return g
        ids = g.token_ids[: self.keep]
        lps = None if g.logprobs is None else g.logprobs[: self.keep]
        return replace(g, token_ids=ids, logprobs=lps, text=chat.decode(self.tok, ids), finish_reason="length")

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def play(
    env_cls: type,
    tok: Any,
    preset: str,
    mode: str | None = None,
    *,
    task: int = 0,
    mistake_rate: float = 0.0,
    seed: int = 3,
    env: Any = None,
    backend: Any = None,
    sampling: SamplingParams | None = None,
    tokenizer_name: str = "",
    sampled: bool = True,
    **cfg: Any,
) -> Episode:
    """Run one episode through the real loop."""
    env = env if env is not None else env_cls()
    if backend is None:
        backend = (SampledScripted(env_cls, tok, mistake_rate=mistake_rate, seed=seed) if sampled
                   else ScriptedBackend(env_cls().reference_reply, tok, mistake_rate=mistake_rate, seed=seed))
    config = PRESETS[preset].with_(token_mode=mode, **cfg)
    return asyncio.run(
        run_episode(env, backend, tok, config, env.tasks[task], preset=preset, sampling=sampling,
                    tokenizer_name=tokenizer_name)
    )


# -- bases and planted episodes -------------------------------------------------


@dataclass(frozen=True)
class BaseSpec:
    env: type
    preset: str
    mode: str


BASES: dict[str, BaseSpec] = {
    "math-tito": BaseSpec(MathEnv, "areal-math", "tito"),  # 5 answer/feedback rounds
    "math-retok": BaseSpec(MathEnv, "areal-math", "retokenize"),
    "price-tito": BaseSpec(PriceEnv, "tito", "tito"),  # tool call, then answer
    "price-slime": BaseSpec(PriceEnv, "slime-tau", "retokenize"),
}


@dataclass(frozen=True)
class Base:
    name: str
    spec: BaseSpec
    tok: Any
    tokenizer_name: str
    episode: Episode

    @property
    def tito(self) -> bool:
        return self.spec.mode == "tito"

    def rebuild(self, **kwargs: Any) -> Episode:
        """The same recipe through the loop again, with changed knobs."""
        return play(self.spec.env, self.tok, self.spec.preset, kwargs.pop("mode", self.spec.mode),
                    tokenizer_name=self.tokenizer_name, **kwargs)


def build_base(name: str, tok: Any, tokenizer_name: str) -> Base:
    spec = BASES[name]
    ep = play(spec.env, tok, spec.preset, spec.mode, tokenizer_name=tokenizer_name)
    return Base(name, spec, tok, tokenizer_name, ep)


@dataclass(frozen=True)
class Planted:
    """An episode with one bug, and the finding that must locate it."""

    episode: Episode
    kind: str
    severity: Severity
    token_start: Any  # int, None, or ANY
    turn: Any  # int, None, or ANY
    what: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)  # items the finding's evidence must contain
    says: str = ""  # what the finding's message must contain


# -- editing helpers ------------------------------------------------------------


def arrays(ep: Episode) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    t = ep.tokens
    return t.ids.copy(), t.loss_mask.copy(), t.logprobs.copy(), t.versions.copy()


def with_arrays(ep: Episode, ids: Any, mask: Any, lp: Any, ver: Any) -> Episode:
    return ep.evolve(tokens=TokenArrays(ids, mask, lp, ver))


def first_diff(a: Sequence[Any], b: Sequence[Any]) -> int:
    a, b = list(a), list(b)
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    assert len(a) != len(b), "the arrays are equal: nothing was planted"
    return min(len(a), len(b))


def first_lp_diff(a: np.ndarray, b: np.ndarray) -> int:
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    bad = np.flatnonzero(~same)
    assert bad.size, "the logprobs are equal: nothing was planted"
    return int(bad[0])


def seg(ep: Episode, kind: str, turn: int) -> Segment:
    return next(s for s in ep.segments if s.kind == kind and s.turn == turn)


def env_seg(ep: Episode, turn: int) -> Segment:
    """The segment of the env's reply (user or tool message) after assistant turn ``turn``."""
    return next(s for s in ep.segments if s.kind in ("user", "tool") and s.turn == turn)


def eot_pos(ep: Episode, tok: Any, turn: int) -> int:
    """Position of the end-of-turn token the model generated in ``turn``."""
    s = seg(ep, "assistant", turn)
    eot = chat.end_of_turn_ids(tok)
    return next(p for p in range(s.end - 1, s.start - 1, -1) if int(ep.tokens.ids[p]) in eot)


def splice(
    ep: Episode,
    start: int,
    end: int,
    ids: Sequence[int],
    mask: Sequence[int],
    lp: Sequence[float],
    ver: Sequence[int],
    add: Segment | None = None,
) -> Episode:
    """Replace tokens ``[start, end)`` and keep segments and prompt lengths consistent.

    Segments that overlap the edit stretch or shrink with it (and vanish when
    empty); later ones shift. ``add`` (in new positions) is inserted after the
    segment that ends where it starts, in the episode and in that turn.
    """
    old_ids, old_mask, old_lp, old_ver = arrays(ep)
    delta = len(ids) - (end - start)

    def cat(old: np.ndarray, new: Sequence[Any]) -> np.ndarray:
        return np.concatenate([old[:start], np.asarray(list(new), dtype=old.dtype), old[end:]])

    def remap(s: Segment) -> Segment | None:
        a, b = s.start, s.end
        if b <= start or (start == end and b == start):
            return s
        if a >= end:
            return replace(s, start=a + delta, end=b + delta)
        if start == end:  # inserted inside the segment
            return replace(s, end=b + delta)
        a2, b2 = min(a, start), (b + delta if b >= end else start + len(ids))
        return replace(s, start=a2, end=b2) if b2 > a2 else None

    def move(p: int) -> int:  # a boundary position, such as a prompt length
        if p < start or (p == start and start != end):
            return p
        return p + delta if p >= end else start + len(ids)

    def remap_all(segs: Sequence[Segment]) -> tuple[Segment, ...]:
        out: list[Segment] = []
        for s in segs:
            r = remap(s)
            if r is not None:
                out.append(r)
                if add is not None and r.end == add.start:
                    out.append(add)
        return tuple(out)

    turns = tuple(replace(t, segments=remap_all(t.segments), prompt_len=move(t.prompt_len)) for t in ep.turns)
    tokens = TokenArrays(cat(old_ids, ids), cat(old_mask, mask), cat(old_lp, lp), cat(old_ver, ver))
    return ep.evolve(tokens=tokens, segments=remap_all(ep.segments), turns=turns, prompt_len=move(ep.prompt_len))


def replace_turn(ep: Episode, index: int, **changes: Any) -> Episode:
    turns = list(ep.turns)
    turns[index] = replace(turns[index], **changes)
    return ep.evolve(turns=tuple(turns))


def replace_generation(ep: Episode, index: int, **changes: Any) -> Episode:
    g = ep.turns[index].generation
    assert g is not None
    return replace_turn(ep, index, generation=replace(g, **changes))


def strip_findings(ep: Episode) -> Episode:
    """As if the episode came from a writer that kept no findings (an older or foreign one)."""
    return ep.evolve(findings=(), turns=tuple(replace(t, findings=()) for t in ep.turns))


def find_split(tok: Any, ids: Sequence[int]) -> tuple[int, int, int]:
    """(index, a, b): ids[index] can be written as the two tokens a, b with the same text."""
    special = set(getattr(tok, "all_special_ids", [])) | chat.end_of_turn_ids(tok)
    for k, t in enumerate(ids):
        if t in special:
            continue
        text = chat.decode(tok, [t])
        for cut in range(1, len(text)):
            a, b = chat.encode(tok, text[:cut]), chat.encode(tok, text[cut:])
            if len(a) == 1 and len(b) == 1 and chat.decode(tok, [a[0], b[0]]) == text:
                return k, a[0], b[0]
    raise AssertionError("no token of this generation splits into two tokens")


def mid_turn(ep: Episode) -> int:
    """A turn that has turns before it (and one after when there are 3 or more)."""
    return min(2, ep.n_turns - 1) if ep.n_turns > 2 else 1


