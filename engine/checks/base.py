"""What every check shares: the options, the kinds, and helpers that read an episode."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..presets import ONE_OR_MORE, LoopConfig
from ..records.episode import FINDING_KINDS, Episode, Finding, Severity
from ..tokens import chat
from ..tokens.modes import prompt_text
from ..tokens.tokenizer import Tokenizer

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

# Kinds recorded where the data entered (the loop while it runs, an import, a repair): the checks keep them and
# do not report them again.
LOOP_KINDS = frozenset(
    {"template_not_prefix_stable", "tool_call_parse_error", "env_error", "backend_error", "internal_error",
     "truncated_turn", "truncated_episode", "text_replaced", "server_answer_invalid", "logprob_not_finite",
     "reward_not_finite"}
)
# Loop kinds the checks write at the episode level too: the episode's own are an earlier check's.
RECHECKED = frozenset({"truncated_turn", "truncated_episode", "template_not_prefix_stable"})
KINDS = FINDING_KINDS  # every kind a finding can have, the loop's and the checks' (records.FindingKind)
# Token modes whose arrays hold the very ids the model was given and generated.
KEEPS_IDS = frozenset({"tito", "areal", "areal-seed"})


CHECKS_VERSION = "6"
"""The fidelity checks' version, recorded on every episode they run on (``Episode.checked``): raised when a check
is added or changes what it finds, so an episode says which checks judged it."""


@dataclass(frozen=True)
class CheckOptions:
    """What the checks may use beyond the episode itself."""

    tokenizer: Tokenizer | None = None
    recompute_logprobs: bool = False
    model: str | None = None  # local model spec for teacher forcing; None = the episode's own if local
    logprob_threshold: float = 0.5
    context: int = 8  # ids shown either side of a divergence


Check = Callable[[Episode, CheckOptions], list[Finding]]


def skip(check: str, why: str, needs: str | None = None) -> Finding:
    """The note of a check that could not look: ``needs`` names what it lacked that the person can give (a
    ``tokenizer``, a ``model``), which makes the episode checked in part (``Episode.checks_not_run``); None where
    the episode has nothing for the check to look at (no answer after a reply, no ground truth)."""
    return Finding("not_checked", INFO, f"{check}: not checked: {why}",
                   evidence={"check": check, **({"needs": needs} if needs else {})})


def chatml_ids(tok: Tokenizer | None) -> tuple[int, int] | None:
    """(``<|im_start|>`` id, ``<|im_end|>`` id) when the tokenizer has both as tokens; None otherwise (not ChatML)."""
    if tok is None:
        return None
    start_id = tok.convert_tokens_to_ids("<|im_start|>")
    end_id = tok.convert_tokens_to_ids("<|im_end|>")
    unk = getattr(tok, "unk_token_id", None)
    if not isinstance(start_id, int) or not isinstance(end_id, int) or start_id == unk or end_id == unk:
        return None
    return start_id, end_id


def position_runs(positions: Any) -> list[list[int]]:
    """Sorted positions as ``[start, end)`` runs: every position, compactly (lists in evidence are capped)."""
    out: list[list[int]] = []
    for p in sorted(int(x) for x in positions):
        if out and out[-1][1] == p:
            out[-1][1] = p + 1
        elif not out or out[-1][1] < p:
            out.append([p, p + 1])
    return out


def first_diff(a: Sequence[int], b: Sequence[int]) -> int | None:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def id_evidence(tok: Tokenizer | None, got: Sequence[int], want: Sequence[int], at: int, ctx: int) -> dict[str, Any]:
    lo = max(0, at - ctx)
    g, w = list(got[lo : at + ctx]), list(want[lo : at + ctx])
    ev: dict[str, Any] = {"position": at, "from": lo, "ids": g, "expected_ids": w}
    if tok is not None:
        ev["text"] = chat.decode(tok, g)
        ev["expected_text"] = chat.decode(tok, w)
    return ev


def turn_at(ep: Episode, pos: int) -> int | None:
    for s in ep.segments:
        if s.start <= pos < s.end:
            return s.turn
    return None


def token_mode(ep: Episode) -> str:
    return ep.config.token_mode


def keeps_ids(ep: Episode) -> bool:
    return token_mode(ep) in KEEPS_IDS


def render_for(ep: Episode, tok: Tokenizer, messages: Sequence[Any], gp: bool) -> str:
    if gp:
        return prompt_text(tok, messages, ep.tools, loop_config(ep))
    text = chat.render(tok, messages, ep.tools, add_generation_prompt=False)
    instruction = loop_config(ep).tool_instruction
    return text if instruction is None else text.replace(ONE_OR_MORE, instruction)


def loop_config(ep: Episode) -> LoopConfig:
    return ep.config.loop or LoopConfig()


def assistant_seg(ep: Episode, turn: int) -> Any:
    return next((s for s in ep.segments if s.kind == "assistant" and s.turn == turn), None)
