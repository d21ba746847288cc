"""Plant one known bug into an episode our own loop built, for the checks' corpus.

Each planting function takes a :class:`Base` (a clean episode the real loop
produced, with the tokenizer and the recipe that made it) and returns a
:class:`Planted`: the modified copy, plus the finding a correct check must
report for it (kind, severity, first token position, turn). Positions are
computed here, from the edit itself (usually the first index where the
planted arrays differ from the clean ones), never by asking the checks.

The clean episodes come from :class:`SampledScripted`: the scripted policy
with the non-zero, deterministic logprobs a sampling model would give, so
that moving logprobs around is visible (the plain scripted policy gives
every token logprob 0, which a shifted array cannot be told from).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine import chat
from engine.backends.base import GenerationRequest, SamplingParams
from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.loop import run_episode
from engine.presets import PRESETS
from engine.records import Episode, Generation, Segment, Severity, Status, TokenArrays
from tests.toolenv import PriceEnv

ANY = object()  # "not asserted" for a Planted field


# -- backends -----------------------------------------------------------------


class SampledScripted:
    """The scripted policy, with logprobs and a weight version like a sampled model's."""

    name = "scripted"

    def __init__(self, env_factory: Callable[[], Any], tok: Any, mistake_rate: float = 0.0, seed: int = 3) -> None:
        self.inner = ScriptedBackend(env_factory, tok, mistake_rate=mistake_rate, seed=seed)

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
        make = SampledScripted if sampled else ScriptedBackend
        backend = make(env_cls, tok, mistake_rate=mistake_rate, seed=seed)
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


# -- tokens_not_rendering -------------------------------------------------------

TNR = "tokens_not_rendering"
ERR, WARN, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


def drop_gen_prompt(b: Base) -> Planted:
    ep = b.episode
    t = mid_turn(ep)
    gp = seg(ep, "gen_prompt", t)
    out = splice(ep, gp.start, gp.end, [], [], [], [])
    at = first_diff(out.tokens.ids, ep.tokens.ids)
    assert at == gp.start
    return Planted(out, TNR, ERR, at, t, f"generation prompt of turn {t} left out")


def duplicate_env_segment(b: Base) -> Planted:
    ep = b.episode
    s = env_seg(ep, 0)
    ids, mask, lp, ver = arrays(ep)
    sl = slice(s.start, s.end)
    dup = Segment(s.end, s.end + (s.end - s.start), s.kind, s.turn, s.trainable)
    out = splice(ep, s.end, s.end, ids[sl], mask[sl], lp[sl], ver[sl], add=dup)
    at = first_diff(out.tokens.ids, ep.tokens.ids)
    return Planted(out, TNR, ERR, at, 0, f"{s.kind} message of turn 0 encoded twice")


def drop_closing_newline(b: Base) -> Planted:
    ep = b.episode
    p = eot_pos(ep, b.tok, 0) + 1  # the newline the template writes after <|im_end|>
    assert chat.decode(b.tok, ep.tokens.ids[p : p + 1]) == "\n"
    out = splice(ep, p, p + 1, [], [], [], [])
    return Planted(out, TNR, ERR, p, 0, "newline after the end-of-turn token of turn 0 left out")


def loop_without_gen_prompts(b: Base) -> Planted:
    out = b.rebuild(gen_prompt_tokens=False)
    at = first_diff(out.tokens.ids, b.episode.tokens.ids)
    assert at == seg(b.episode, "gen_prompt", 1).start
    return Planted(out, TNR, ERR, at, 1, "a loop that drops the generation prompts (older slime)")


# -- retokenization_drift -------------------------------------------------------

DRIFT = "retokenization_drift"


def _split(b: Base, turn: int, in_array: bool, in_generation: bool) -> tuple[Episode, int]:
    ep = b.episode
    g = ep.turns[turn].generation
    assert g is not None and g.logprobs is not None
    k, ta, tb = find_split(b.tok, g.token_ids)
    s = seg(ep, "assistant", turn)
    assert int(ep.tokens.ids[s.start + k]) == g.token_ids[k]
    out = ep
    if in_generation:
        ids = [*g.token_ids[:k], ta, tb, *g.token_ids[k + 1 :]]
        lps = [*g.logprobs[:k], -0.5, -0.5, *g.logprobs[k + 1 :]]
        assert chat.decode(b.tok, ids) == g.text
        out = replace_generation(out, turn, token_ids=tuple(ids), logprobs=tuple(lps))
    if in_array:
        p = s.start + k
        ver = int(ep.tokens.versions[p])
        out = splice(out, p, p + 1, [ta, tb], [1, 1], [-0.5, -0.5], [ver, ver])
    return out, s.start + k


def split_generated_and_trained(b: Base) -> Planted:
    # The model sampled a non-canonical split and the loop kept it: trained ids
    # are the generated ones, but re-encoding the text gives others.
    t = mid_turn(b.episode)
    out, at = _split(b, t, in_array=True, in_generation=True)
    return Planted(out, DRIFT, WARN, at, t, f"turn {t} generated with a non-canonical split, kept as generated",
                   {"trained_vs": "reencoded"})


def split_generated_only(b: Base) -> Planted:
    # The model sampled a non-canonical split; the loop re-encoded the text.
    t = mid_turn(b.episode)
    out, at = _split(b, t, in_array=False, in_generation=True)
    return Planted(out, DRIFT, ERR, at, t, f"turn {t} generated with a split the loop re-encoded away",
                   {"trained_vs": "generated"})


def split_trained_only(b: Base) -> Planted:
    out, at = _split(b, 0, in_array=True, in_generation=False)
    return Planted(out, DRIFT, ERR, at, 0, "turn 0 trained on a different tokenization than generated",
                   {"trained_vs": "generated"})


def end_of_turn_as_text(b: Base) -> Planted:
    # The end-of-turn token written out as ordinary text pieces ("<", "|", "im", ...):
    # it decodes the same but re-encoding gives the special token.
    ep, tok = b.episode, b.tok
    t = 0
    p = eot_pos(ep, tok, t)
    s = seg(ep, "assistant", t)
    k = p - s.start
    pieces = list(tok.encode(chat.end_of_turn_texts(tok)[0], add_special_tokens=False, split_special_tokens=True))
    assert len(pieces) > 1
    g = ep.turns[t].generation
    assert g is not None and g.logprobs is not None and g.token_ids[k] == int(ep.tokens.ids[p])
    ids = [*g.token_ids[:k], *pieces, *g.token_ids[k + 1 :]]
    lps = [*g.logprobs[:k], *([-0.5] * len(pieces)), *g.logprobs[k + 1 :]]
    out = replace_generation(ep, t, token_ids=tuple(ids), logprobs=tuple(lps))
    ver = int(ep.tokens.versions[p])
    out = splice(out, p, p + 1, pieces, [1] * len(pieces), [-0.5] * len(pieces), [ver] * len(pieces))
    # The body the check re-encodes is the generation without a trailing end-of-turn id:
    # here the whole generation, so the first difference is where the pieces start.
    return Planted(out, DRIFT, WARN, p, t, "end-of-turn token generated as plain text pieces",
                   {"trained_vs": "reencoded"})


# -- mask_misaligned ------------------------------------------------------------

MASK = "mask_misaligned"


def _mask_plant(b: Base, mask: np.ndarray, turn: Any, what: str, severity: Severity = ERR, **ev: Any) -> Planted:
    ids, old, lp, ver = arrays(b.episode)
    at = first_diff(mask, old)
    return Planted(with_arrays(b.episode, ids, mask, lp, ver), MASK, severity, at, turn, what, ev)


def mask_shift_right(b: Base) -> Planted:
    m = b.episode.tokens.loss_mask
    new = np.concatenate([[0], m[:-1]]).astype(np.uint8)
    return _mask_plant(b, new, 0, "loss mask shifted one token to the right")


def mask_shift_left(b: Base) -> Planted:
    m = b.episode.tokens.loss_mask
    new = np.concatenate([m[1:], [0]]).astype(np.uint8)
    return _mask_plant(b, new, 0, "loss mask shifted one token to the left", generation_prompt=True)


def mask_on_env_token(b: Base) -> Planted:
    s = env_seg(b.episode, 0)
    new = b.episode.tokens.loss_mask.copy()
    new[s.start + 2] = 1
    return _mask_plant(b, new, s.turn, f"loss mask 1 on a {s.kind} token", generation_prompt=False)


def mask_off_assistant_token(b: Base) -> Planted:
    t = mid_turn(b.episode)
    s = seg(b.episode, "assistant", t)
    new = b.episode.tokens.loss_mask.copy()
    new[(s.start + s.end) // 2] = 0
    return _mask_plant(b, new, t, f"loss mask 0 on an assistant token of turn {t}")


def gen_prompt_trainable(b: Base) -> Planted:
    t = mid_turn(b.episode)
    s = seg(b.episode, "gen_prompt", t)
    new = b.episode.tokens.loss_mask.copy()
    new[s.start : s.end] = 1
    return _mask_plant(b, new, t, f"generation prompt of turn {t} trainable", generation_prompt=True)


def first_gen_prompt_trainable(b: Base) -> Planted:
    ep = b.episode
    header = chat.encode(b.tok, "<|im_start|>assistant\n")
    assert ep.tokens.ids[ep.prompt_len - len(header) : ep.prompt_len].tolist() == header
    new = ep.tokens.loss_mask.copy()
    new[ep.prompt_len - len(header) : ep.prompt_len] = 1
    return _mask_plant(b, new, 0, "generation prompt at the end of the first prompt trainable", generation_prompt=True)


def end_of_turn_untrained(b: Base) -> Planted:
    t = mid_turn(b.episode)
    new = b.episode.tokens.loss_mask.copy()
    new[eot_pos(b.episode, b.tok, t)] = 0
    return _mask_plant(b, new, t, f"end-of-turn token of turn {t} not trained (the other turns' are)")


def closing_newline_inconsistent(b: Base) -> Planted:
    # Training the template's newline after <|im_end|> is a choice; flipping it in one turn is a bug.
    t = 1
    p = eot_pos(b.episode, b.tok, t) + 1
    new = b.episode.tokens.loss_mask.copy()
    new[p] = 1 - new[p]
    return _mask_plant(b, new, t, f"newline after the end-of-turn token of turn {t} handled unlike the others", WARN)


def mask_length_disagrees(b: Base) -> Planted:
    ep = b.episode
    n = ep.response_len
    out = ep.evolve(source={"kind": "slime", "response_length": n, "loss_mask_length": n - 1})
    return Planted(out, MASK, ERR, ep.prompt_len, None, "loss mask one entry shorter than the response")


# -- logprobs ---------------------------------------------------------------------

MISSING, MISALIGNED = "logprobs_missing", "logprobs_misaligned"


def _lp_plant(b: Base, lp: np.ndarray, kind: str, turn: Any, what: str, at: int | None = None) -> Planted:
    ids, mask, old, ver = arrays(b.episode)
    first = first_lp_diff(lp, old)
    return Planted(with_arrays(b.episode, ids, mask, lp, ver), kind, ERR, first if at is None else at, turn, what)


def nan_logprobs_turn(b: Base) -> Planted:
    t = mid_turn(b.episode)
    s = seg(b.episode, "assistant", t)
    lp = b.episode.tokens.logprobs.copy()
    lp[s.start : s.end] = np.nan
    return _lp_plant(b, lp, MISSING, t, f"no logprobs on the trainable tokens of turn {t}")


def nan_logprob_one_token(b: Base) -> Planted:
    s = seg(b.episode, "assistant", 0)
    lp = b.episode.tokens.logprobs.copy()
    lp[s.start + 3] = np.nan
    return _lp_plant(b, lp, MISSING, 0, "one trainable token of turn 0 without a logprob")


def nan_logprobs_all(b: Base) -> Planted:
    ep = b.episode
    lp = np.full(len(ep.tokens), np.nan, dtype=np.float32)
    out = _lp_plant(b, lp, MISSING, 0, "a backend that returned no logprobs")
    turns = tuple(replace(t, generation=replace(t.generation, logprobs=None)) if t.generation else t for t in ep.turns)
    return replace(out, episode=out.episode.evolve(turns=turns))


def logprobs_shift_right(b: Base) -> Planted:
    lp = b.episode.tokens.logprobs
    new = np.concatenate([[np.nan], lp[:-1]]).astype(np.float32)
    return _lp_plant(b, new, MISALIGNED, 0, "logprobs shifted one token to the right")


def logprobs_shift_left(b: Base) -> Planted:
    lp = b.episode.tokens.logprobs
    new = np.concatenate([lp[1:], [np.nan]]).astype(np.float32)
    return _lp_plant(b, new, MISALIGNED, 0, "logprobs shifted one token to the left")


def logprobs_on_context(b: Base) -> Planted:
    s = env_seg(b.episode, 0)
    lp = b.episode.tokens.logprobs.copy()
    lp[s.start : s.end] = -0.3
    return _lp_plant(b, lp, MISALIGNED, s.turn, f"logprobs on the {s.kind} message of turn 0")


def fewer_logprobs_than_ids(b: Base) -> Planted:
    ep = b.episode
    t = mid_turn(ep)
    g = ep.turns[t].generation
    assert g is not None and g.logprobs is not None
    out = replace_generation(ep, t, logprobs=g.logprobs[:-2])
    at = seg(ep, "assistant", t).start + len(g.logprobs) - 2  # the first generated token without a logprob
    return Planted(out, MISALIGNED, ERR, at, t, f"turn {t}'s generation has 2 logprobs fewer than ids")


# -- truncation ---------------------------------------------------------------------


def finish_reason_length(b: Base) -> Planted:
    t = mid_turn(b.episode)
    out = replace_generation(b.episode, t, finish_reason="length")
    return Planted(out, "truncated_turn", WARN, seg(b.episode, "assistant", t).start, t,
                   f"turn {t} stopped on the length limit")


def loop_max_new_tokens(b: Base) -> Planted:
    out = b.rebuild(sampling=SamplingParams(max_new_tokens=4))
    assert out.turns[0].generation.finish_reason == "length"
    return Planted(out, "truncated_turn", WARN, out.prompt_len, 0, "max_new_tokens=4 cuts every reply")


def status_truncated(b: Base) -> Planted:
    ep = b.episode
    out = ep.evolve(status=Status.TRUNCATED, reason=f"reached max_turns={ep.n_turns}")
    return Planted(out, "truncated_episode", WARN, None, ep.n_turns - 1, "episode marked truncated")


def loop_max_turns(b: Base) -> Planted:
    n = min(2, b.episode.n_turns - 1)
    out = b.rebuild(max_turns=n, turn_limit_status="truncated", mistake_rate=1.0 if b.spec.env is MathEnv else 0.0)
    assert out.status is Status.TRUNCATED
    return Planted(out, "truncated_episode", WARN, None, n - 1, f"cut by max_turns={n}")


# -- response_length ------------------------------------------------------------------

RLEN = "response_length_mismatch"


def _rlen(b: Base, value: int, what: str) -> Planted:
    ep = b.episode
    assert value != ep.response_len
    out = ep.evolve(source={"kind": "slime", "response_length": int(value)})
    return Planted(out, RLEN, ERR, ep.prompt_len, None, what)


def response_length_mask_sum(b: Base) -> Planted:
    return _rlen(b, int(b.episode.tokens.loss_mask.sum()), "response_length = sum of the loss mask")


def response_length_off_by_one(b: Base) -> Planted:
    return _rlen(b, b.episode.response_len + 1, "response_length one too many")


def response_length_whole_sequence(b: Base) -> Planted:
    return _rlen(b, len(b.episode.tokens), "response_length counts the prompt too")


# -- the registry ---------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str
    plant: Callable[[Base], Planted]
    applies: Callable[[BaseSpec], bool] = lambda spec: True


def _multi_tail(spec: BaseSpec) -> bool:
    # at least two newlines after <|im_end|> in the tokens, so "some but not others" exists
    # (a tito array ends on the last <|im_end|>; the 2-turn price episode has one newline)
    return spec.mode == "retokenize" or spec.env is MathEnv


VARIANTS: tuple[Variant, ...] = (
    Variant("drop-gen-prompt", TNR, drop_gen_prompt),
    Variant("duplicate-env-segment", TNR, duplicate_env_segment),
    Variant("drop-closing-newline", TNR, drop_closing_newline),
    Variant("loop-without-gen-prompts", TNR, loop_without_gen_prompts),
    Variant("split-generated-and-trained", DRIFT, split_generated_and_trained),
    Variant("split-generated-only", DRIFT, split_generated_only),
    Variant("split-trained-only", DRIFT, split_trained_only),
    Variant("end-of-turn-as-text", DRIFT, end_of_turn_as_text),
    Variant("mask-shift-right", MASK, mask_shift_right),
    Variant("mask-shift-left", MASK, mask_shift_left),
    Variant("mask-on-env-token", MASK, mask_on_env_token),
    Variant("mask-off-assistant-token", MASK, mask_off_assistant_token),
    Variant("gen-prompt-trainable", MASK, gen_prompt_trainable),
    Variant("first-gen-prompt-trainable", MASK, first_gen_prompt_trainable),
    Variant("end-of-turn-untrained", MASK, end_of_turn_untrained),
    Variant("closing-newline-inconsistent", MASK, closing_newline_inconsistent, _multi_tail),
    Variant("mask-length-disagrees", MASK, mask_length_disagrees),
    Variant("nan-logprobs-turn", MISSING, nan_logprobs_turn),
    Variant("nan-logprob-one-token", MISSING, nan_logprob_one_token),
    Variant("nan-logprobs-all", MISSING, nan_logprobs_all),
    Variant("logprobs-shift-right", MISALIGNED, logprobs_shift_right),
    Variant("logprobs-shift-left", MISALIGNED, logprobs_shift_left),
    Variant("logprobs-on-context", MISALIGNED, logprobs_on_context),
    Variant("fewer-logprobs-than-ids", MISALIGNED, fewer_logprobs_than_ids),
    Variant("finish-reason-length", "truncated_turn", finish_reason_length),
    Variant("loop-max-new-tokens", "truncated_turn", loop_max_new_tokens),
    Variant("status-truncated", "truncated_episode", status_truncated),
    Variant("loop-max-turns", "truncated_episode", loop_max_turns),
    Variant("response-length-mask-sum", RLEN, response_length_mask_sum),
    Variant("response-length-off-by-one", RLEN, response_length_off_by_one),
    Variant("response-length-whole-sequence", RLEN, response_length_whole_sequence),
)


# -- bugs the loop itself plants (given the right env, policy or template) ----------------


def _price_first_assistant(ep: Episode) -> int:
    return seg(ep, "assistant", 0).start


def parse_error_feedback(tok: Any, name: str) -> Planted:
    ep = play(PriceEnv, tok, "tito", "tito", mistake_rate=1.0, tokenizer_name=name)
    assert ep.turns[0].parse_error
    return Planted(ep, "tool_call_parse_error", ERR, _price_first_assistant(ep), 0, "malformed JSON, error fed back")


def parse_error_abort(tok: Any, name: str) -> Planted:
    ep = play(PriceEnv, tok, "slime-tau", mistake_rate=1.0, tokenizer_name=name)
    assert ep.status is Status.ABORTED
    return Planted(ep, "tool_call_parse_error", ERR, _price_first_assistant(ep), 0, "malformed JSON, episode aborted")


def parse_error_without_finding(tok: Any, name: str) -> Planted:
    # The turn records the parse error, but the episode was written without findings
    # (an older writer, or an import): the checks must still surface it.
    p = parse_error_feedback(tok, name)
    return replace(p, episode=strip_findings(p.episode), what="parse error on the turn, no finding stored")


def env_error_tito(tok: Any, name: str) -> Planted:
    ep = play(PriceEnv, tok, "tito", "tito", task=1, env=PriceEnv(fail_on="fig"), tokenizer_name=name)
    assert ep.status is Status.ABORTED
    return Planted(ep, "env_error", ERR, ANY, 0, "the tool raised (tito)")


def env_error_slime(tok: Any, name: str) -> Planted:
    ep = play(PriceEnv, tok, "slime-tau", task=1, env=PriceEnv(fail_on="fig"), tokenizer_name=name)
    assert ep.status is Status.ABORTED
    return Planted(ep, "env_error", ERR, ANY, 0, "the tool raised (slime-tau)")


def think_retokenize(tok: Any, name: str) -> Planted:
    """Qwen3 drops the <think> block of turn 0 once the env's reply follows it: the
    sliced text delta of that reply is wrong from its first token (here it is
    even empty: the rewritten render is shorter than the previous one)."""
    ep = play(MathEnv, tok, "areal-math", "retokenize", backend=ThinkingBackend(MathEnv, tok), tokenizer_name=name)
    return Planted(ep, "template_not_prefix_stable", ERR, seg(ep, "assistant", 0).end, 0,
                   "reasoning model, areal-math, retokenize")


def empty_think_retokenize_tools(tok: Any, name: str) -> Planted:
    """Qwen3 renders the last assistant message with an empty ``<think></think>``
    block and drops it once a tool result follows (a reply that really thinks
    keeps its block before a tool result: only a new user turn strips it)."""
    ep = play(PriceEnv, tok, "slime-tau", tokenizer_name=name)
    return Planted(ep, "template_not_prefix_stable", ERR, seg(ep, "assistant", 0).end, 0,
                   "slime-tau with tools, retokenize")


def think_retokenize_without_finding(tok: Any, name: str) -> Planted:
    p = think_retokenize(tok, name)
    return replace(p, episode=strip_findings(p.episode), what="reasoning model, retokenize, findings not stored")


LOOP_PLANTS: dict[str, tuple[Callable[[Any, str], Planted], tuple[str, ...]]] = {
    # name: (builder, tokenizers it applies to)
    "parse-error-feedback": (parse_error_feedback, ("smollm2", "qwen3")),
    "parse-error-abort": (parse_error_abort, ("smollm2", "qwen3")),
    "parse-error-without-finding": (parse_error_without_finding, ("smollm2", "qwen3")),
    "env-error-tito": (env_error_tito, ("smollm2", "qwen3")),
    "env-error-slime": (env_error_slime, ("smollm2", "qwen3")),
    # SmolLM2's template is prefix-stable: only Qwen3's can rewrite history.
    "think-retokenize": (think_retokenize, ("qwen3",)),
    "empty-think-retokenize-tools": (empty_think_retokenize_tools, ("qwen3",)),
    "think-retokenize-without-finding": (think_retokenize_without_finding, ("qwen3",)),
}
