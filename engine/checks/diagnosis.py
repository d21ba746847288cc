"""Root causes: which finding follows from which, and what an episode's roots say in one line.

The checks report what they see where they see it, so one bug seen by several
checks would read as several errors. :func:`link` gives every finding of an
episode an id and, where a finding follows from another one, names that one
in ``caused_by``. A finding with ``caused_by`` None is a root. The rules:

* A token-structure finding says the ids are not what the loop should have
  built from the conversation: a history rewrite, a missing generation
  prompt, an injected system block, trained ids that are not the generated
  ones, ids that stop matching the render. Every token finding after its
  first wrong token follows from it: the mask, logprob and rendering checks
  there compare against tokens that are already wrong.
* Ids past the tokenizer's vocabulary are another tokenizer's (or corrupted): every finding the checks made
  through that tokenizer (rendering, re-encoding, its markers) follows from them, wherever it is; the logprobs'
  findings do not.
* A template rewrites history for one reason however many turns it touches:
  later rewrites follow from the first.
* A mask finding causes the logprob findings on its own positions: a trained
  token that is not the model's output has no rollout logprob, and an
  untrained one that is carries one.
* A reply whose trained ids are not its generated ids causes the logprob
  findings of its turn. A logprob above 0 follows from nothing: no ids or mask make it possible.
* verl's cut of a reply at ``response_length`` causes the turn's length
  findings: the server's stop on it, and the episode's end for reaching it.

At the same first token the more specific finding is the root (``RANK``).
``info`` findings (what could not be checked, what is harmless here) are
never linked. :func:`diagnosis` turns the roots into one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from ..errors import FormatError
from ..records.episode import SCHEMA_VERSION, Episode, Finding, Severity, TokenArrays
from ..records.marks import unknown_logprobs
from ..records.upgrade import sums_turns, upgrade

INFO = Severity.INFO

# Findings that say the token ids themselves are wrong from their first token on.
STRUCTURAL = frozenset({
    "token_out_of_vocab", "template_not_prefix_stable", "system_block_injected", "generation_prompt_missing", "retokenization_drift",
    "tokens_not_rendering", "im_end_newline_missing", "system_cut_wrong",
})
# Findings computed on the token arrays, which a wrong id sequence before them can explain.
TOKEN_LEVEL = frozenset({
    "tokens_not_rendering", "retokenization_drift", "mask_misaligned", "logprobs_missing", "logprobs_misaligned",
    "generation_prompt_missing", "system_block_injected", "template_newline_trained",
})
LOGPROB = frozenset({"logprobs_missing", "logprobs_misaligned"})
# What the checks read through the tokenizer (rendering, re-encoding, its ChatML markers): ids it has no entry for
# explain these wherever they are; the logprobs are the arrays' own.
THROUGH_TOKENIZER = (TOKEN_LEVEL - LOGPROB) | {"im_end_newline_missing", "system_cut_wrong"}
# Ids past the vocabulary from which they are read as another tokenizer's (the wrong --tokenizer), not corrupt ones.
FOREIGN_IDS = 4
# Per-turn failures that, repeated in later turns, are one cause recurring (a model that never writes a
# parsable call, a length limit every reply hits).
RECURRING = frozenset({"tool_call_parse_error", "tool_call_dropped", "truncated_turn", "answer_extraction_failed",
                       "logprobs_misaligned", "retokenization_drift", "strict_score_refused"})
# At the same first token, the lower rank is the root: the more specific explanation wins.
RANK = {
    "token_out_of_vocab": -3, "system_cut_wrong": -2, "im_end_newline_missing": -1, "template_not_prefix_stable": 0, "system_block_injected": 1, "generation_prompt_missing": 2,
    "retokenization_drift": 3, "tokens_not_rendering": 4, "response_length_mismatch": 5, "mask_misaligned": 6,
    "logprobs_misaligned": 7, "logprobs_missing": 8, "response_cut_trained": 9, "truncated_turn": 10,
}
POSITIONS_CAP = 200  # the checks list at most this many positions in a finding's evidence
# Kinds that describe the preset, the template or the source rather than one episode: when every episode of
# a run has one (or could not be checked for it: ``run_level``), it is reported once for the run.
RUN_KINDS = frozenset({"template_newline_trained", "logprobs_absent", "template_not_prefix_stable",
                       "system_block_injected", "generation_prompt_missing", "im_end_newline_missing",
                       "system_cut_wrong"})


def unchecked_kind(f: Finding) -> str | None:
    """The kind a ``not_checked`` finding says its check could not look for in this episode (None otherwise)."""
    if f.kind != "not_checked":
        return None
    check = f.evidence.get("check")
    return check if isinstance(check, str) else f.message.split(":", 1)[0]


def run_level(episodes: Sequence[tuple[set[str], set[str]]]) -> set[str]:
    """The kinds said once for a run, from each episode's (run kinds it has above info, kinds its checks could not
    look for): a kind two or more episodes have and every other one could not have been checked for (a prompt
    refused, a reply no answer followed)."""
    if len(episodes) < 2:
        return set()
    has = [h for h, _ in episodes]
    return {k for k in set().union(*has) if sum(k in h for h in has) >= 2
            and all(k in h or k in unchecked for h, unchecked in episodes)}


def _positions(f: Finding) -> set[int]:
    runs = f.evidence.get("runs")
    if isinstance(runs, list) and runs and all(isinstance(r, list) and len(r) == 2 for r in runs):
        return {p for a, b in runs for p in range(int(a), int(b))}  # every position, uncapped
    listed = f.evidence.get("positions")
    if isinstance(listed, list) and listed:
        return {int(p) for p in listed if isinstance(p, int)}
    if f.token_start is None:
        return set()
    end = f.token_end if f.token_end is not None and f.token_end > f.token_start else f.token_start + 1
    return set(range(f.token_start, end))


def follows(cause: Finding, effect: Finding) -> bool:
    """Whether ``effect`` is explained by ``cause`` (``cause`` comes first in the ordering)."""
    if cause.severity is INFO or effect.severity is INFO:
        return False
    if effect.evidence.get("impossible") and cause.kind != effect.kind:
        return False  # a logprob above 0 is wrong whatever the ids and the mask around it: its own root
    if cause.kind == "retokenization_drift" and effect.kind == "tokens_not_rendering" \
            and cause.token_start is not None and cause.token_start == effect.token_start:
        return True  # the ids differ from the render exactly where, and because, the reply was tokenized otherwise
    if cause.severity is not Severity.ERROR and effect.severity is Severity.ERROR:
        return False  # otherwise a warning never explains an error away
    if cause.kind == effect.kind == "template_not_prefix_stable":
        return True  # one template, one reason, however many turns it rewrites
    if cause.kind == "token_out_of_vocab" and effect.kind in THROUGH_TOKENIZER:
        if int(cause.evidence.get("count") or 0) >= FOREIGN_IDS:
            return True  # the checks read these ids through a tokenizer that is not theirs, from the first token on
        # A few ids past the vocabulary (a corrupt id): what is read wrong through them lies at them
        near = {q for p in _positions(cause) for q in range(p - 1, p + 2)}
        return bool(near & _positions(effect))
    if cause.kind == effect.kind and cause.token_start is not None and cause.token_start == effect.token_start:
        return True  # two checks saw the same wrong token
    if cause.kind == effect.kind and cause.kind in RECURRING and cause.severity is effect.severity:
        return True  # the same failure again in a later turn: one cause, recurring
    if cause.kind == "template_not_prefix_stable" and cause.severity is Severity.ERROR and effect.kind in TOKEN_LEVEL:
        # A history rewrite makes the whole conversation render otherwise, earlier turns included: what is compared
        # with that render follows from it wherever it is; what the loop laid down before the rewrite does not.
        return effect.kind == "tokens_not_rendering" or cause.token_start is None or effect.token_start is None \
            or effect.token_start >= cause.token_start
    if cause.kind == "mask_misaligned" and effect.kind == "nothing_trained":
        return True  # a mask that leaves the replies untrained leaves nothing trained: one cause
    if cause.kind == "generation_prompt_missing" and effect.kind == "template_newline_trained":
        return False  # a reply's missing header does not train the newline after its <|im_end|>: its own root
    structural = cause.kind in STRUCTURAL and not (cause.kind == "retokenization_drift" and cause.severity
                                                      is not Severity.ERROR)
    if structural and effect.kind in TOKEN_LEVEL and cause.token_start is not None \
            and effect.token_start is not None and effect.token_start >= cause.token_start:
        return True
    if cause.kind == "response_cut_trained" and effect.kind == "truncated_turn":
        return cause.turn is not None and cause.turn == effect.turn  # the server's cut and verl's, one reply
    if cause.kind == "response_cut_trained" and effect.kind == "truncated_episode":
        # The episode ended because the response reached response_length: the same cut.
        return cause.turn is not None and cause.turn == effect.turn \
            and f"response_length={cause.evidence.get('response_length')}" in effect.message
    if cause.kind == "retokenization_drift" and cause.severity is Severity.ERROR and effect.kind in LOGPROB:
        return cause.turn is not None and cause.turn == effect.turn
    if cause.kind == "mask_misaligned" and "loss_mask_length" in cause.evidence and effect.kind in (
            "mask_misaligned", *LOGPROB) and effect.token_start is not None and cause.token_start is not None \
            and effect.token_start >= cause.token_start:
        return True  # a mask of the wrong length, laid from the response start, is wrong where it runs out
    if cause.kind == "logprobs_misaligned" and "logprobs_length" in cause.evidence and effect.kind in LOGPROB \
            and effect is not cause and effect.token_start is not None and cause.token_start is not None \
            and effect.token_start >= cause.token_start:
        return True  # logprobs of the wrong length, laid from the response start: what else is wrong with them
    if cause.kind == "mask_misaligned" and cause.evidence.get("shift") and effect.kind == "template_newline_trained":
        return True  # the shifted mask now covers the template's newline after <|im_end|>
    if cause.kind == "mask_misaligned" and effect.kind in LOGPROB:
        at = _positions(effect)
        covered = _positions(cause)
        if not at or not covered:
            return False
        listed = cause.evidence.get("positions")
        if "runs" not in cause.evidence and isinstance(listed, list) and len(listed) >= POSITIONS_CAP:
            # A capped list: compare only what it can say.
            limit = max(covered)
            return all(p in covered for p in at if p <= limit) and min(at) <= limit
        return at <= covered
    return False


def _order_key(f: Finding, i: int) -> tuple[float, int, int]:
    if f.kind == "token_out_of_vocab":
        return -2.0, 0, i  # ids another tokenizer's: what was read through this one is wrong before its span too
    if f.kind == "template_not_prefix_stable" and f.severity is Severity.ERROR:
        return -1.0, 0, i  # a history rewrite explains token findings before its own span too
    start = float("inf") if f.token_start is None else float(f.token_start)
    return start, RANK.get(f.kind, 50), i


def link_findings(found: Sequence[Finding]) -> list[Finding]:
    """The findings with ids ``f1``... (in the given order) and ``caused_by`` set by the rules above."""
    ids = [f"f{i + 1}" for i in range(len(found))]
    order = sorted(range(len(found)), key=lambda i: _order_key(found[i], i))
    cause: dict[int, str | None] = {}
    seen: list[int] = []
    for i in order:
        f = found[i]
        cause[i] = next((ids[j] for j in seen if follows(found[j], f)), None)
        seen.append(i)
    return [replace(f, id=ids[i], caused_by=cause[i]) for i, f in enumerate(found)]


def misplaced(ep: Episode, f: Finding) -> str | None:
    """Why ``f``'s token span cannot be where it is in ``ep`` (outside its tokens, empty or reversed); None when it
    can. A finding located at a token lies inside the episode's tokens: a link to it must land on something."""
    if f.token_start is None and f.token_end is None:
        return None
    n = len(ep.tokens)
    start, end = f.token_start, f.token_end
    if start is None or end is None or not 0 <= start < end <= n:
        return f"{f.kind} spans [{start}, {end}) of an episode of {n} tokens"
    return None


def _placed(ep: Episode, f: Finding) -> Finding:
    # A span past the tokens is a bug in whatever made the finding; the finding is kept, on the nearest token,
    # and says where it was put.
    why = misplaced(ep, f)
    if why is None:
        return f
    n = len(ep.tokens)
    if not n:
        return replace(f, token_start=None, token_end=None, evidence=f.evidence | {"misplaced": why})
    start = min(max(f.token_start if f.token_start is not None else 0, 0), n - 1)
    end = min(max(f.token_end if f.token_end is not None else start + 1, start + 1), n)
    return replace(f, token_start=start, token_end=end, evidence=f.evidence | {"misplaced": why})


def link(ep: Episode) -> Episode:
    """The episode with every finding (its own and its turns') given an id and a ``caused_by``; a token span
    outside the episode's tokens is moved onto the nearest token (see :func:`misplaced`)."""
    where = [None] * len(ep.findings) + [t.index for t in ep.turns for _ in t.findings]
    linked = link_findings([_placed(ep, f) for f in ep.all_findings()])
    own = tuple(f for f, w in zip(linked, where, strict=True) if w is None)
    turns = []
    k = len(ep.findings)
    for t in ep.turns:
        n = len(t.findings)
        turns.append(replace(t, findings=tuple(linked[k : k + n])) if n else t)
        k += n
    return ep.evolve(findings=own, turns=tuple(turns))


def roots(found: Iterable[Finding]) -> list[Finding]:
    """Root findings that matter (errors and warnings), errors first, then by first token."""
    out = [f for f in found if f.caused_by is None and f.severity is not INFO]
    return sorted(out, key=lambda f: (f.severity is not Severity.ERROR, *_order_key(f, 0)))


def consequences(found: Sequence[Finding], root: Finding) -> list[Finding]:
    """Every finding that follows, directly or through others, from ``root``."""
    by_id = {f.id: f for f in found if f.id}
    out = []
    for f in found:
        seen: set[str] = set()
        c = f.caused_by
        while c is not None and c not in seen:
            if c == root.id:
                out.append(f)
                break
            seen.add(c)
            nxt = by_id.get(c)
            c = nxt.caused_by if nxt is not None else None
    return out


def root_of(found: Sequence[Finding], f: Finding) -> Finding:
    """The root a finding follows from (itself for a root)."""
    by_id = {x.id: x for x in found if x.id}
    seen: set[str] = set()
    while f.caused_by is not None and f.caused_by in by_id and f.caused_by not in seen:
        seen.add(f.caused_by)
        f = by_id[f.caused_by]
    return f


def _where(f: Finding) -> str:
    if f.turn is not None:
        return f"turn {f.turn}"
    if f.token_start is not None:
        return f"token {f.token_start}"
    return "the episode"


def _phrase(f: Finding) -> str:
    w = _where(f)
    phrases = {
        "template_not_prefix_stable": f"the chat template rewrites history from {w}"
        + (" (it drops earlier <think> blocks)" if "<think>" in str(f.evidence) else ""),
        "generation_prompt_missing": f"assistant headers are missing from the tokens from {w}",
        "system_block_injected": f"a system block is injected mid-trajectory at {w}",
        "retokenization_drift": (f"the trained ids of {w} are not the generated ones" if f.severity is Severity.ERROR
                                 else f"re-encoding {w}'s text would change its ids"),
        "token_out_of_vocab": f"token ids past the tokenizer's vocabulary from token {f.token_start} (the wrong "
                              "tokenizer, or corrupted ids)",
        "tokens_not_rendering": f"the ids stop matching the conversation at token {f.token_start} ({w})",
        "mask_misaligned": f"the loss mask is wrong from token {f.token_start} ({w})",
        "logprobs_missing": f"trained tokens have no logprob from token {f.token_start} ({w})",
        "logprobs_misaligned": f"logprobs are misaligned from token {f.token_start} ({w})",
        "logprobs_absent": "no token has a rollout logprob",
        "template_newline_trained": "the template's newline after <|im_end|> is trained",
        "response_length_mismatch": "response_length disagrees with the tokens",
        "truncated_turn": f"{w} hit the length limit",
        "truncated_episode": "the episode was cut",
        "tool_call_parse_error": f"a tool call failed to parse at {w}",
        "tool_call_dropped": f"a tool call was dropped at {w}",
        "env_error": f"the env failed at {w}",
        "backend_error": f"the backend failed at {w}",
        "internal_error": "Rollscope failed",
        "logprob_mismatch": "rollout logprobs differ from teacher-forced ones",
        "answer_extraction_failed": f"no answer could be extracted at {w}",
        "im_end_newline_missing": "no newline follows <|im_end|> where the template writes one (verl)",
        "system_cut_wrong": f"verl's system-block cut took the wrong length at {w}",
        "think_kept": f"the context keeps <think> blocks the template drops, from {w}",
        "response_cut_trained": f"verl cut {w}'s reply at response_length and trains it",
        "tool_result_truncated": f"a tool result was truncated at {w}",
        "strict_score_refused": f"verl's reward manager (strict gsm8k score) would refuse the right answer at {w}",
        "nothing_trained": "no token is trained: the response is empty or its mask all 0",
    }
    return phrases.get(f.kind, f"{f.kind} at {w}")


def diagnosis_parts(found: Sequence[Finding]) -> list[tuple[str, str]]:
    """(kind, phrase) per root finding that matters, errors first: what is wrong first and how much follows."""
    parts: list[tuple[str, str]] = []
    for r in roots(found):
        follow = consequences(found, r)
        text = _phrase(r)
        if follow:
            turns = {f.turn for f in (r, *follow) if f.turn is not None}
            text += (f": {len(follow)} finding{'s follow' if len(follow) != 1 else ' follows'}"
                     + (f" across {len(turns)} turns" if len(turns) > 1 else ""))
        parts.append((r.kind, text))
    return parts


def diagnosis(found: Sequence[Finding], leave_out: Iterable[str] = ()) -> str:
    """One line from the root findings (``leave_out``: kinds said elsewhere, e.g. once for the run)."""
    skip = set(leave_out)
    return "; ".join(text for kind, text in diagnosis_parts(found) if kind not in skip)


def linked(found: Sequence[Finding]) -> list[Finding]:
    """The findings as linked; findings from before ids existed are linked now."""
    found = list(found)
    return found if all(f.id for f in found) else link_findings(found)


def root_kinds(found: Iterable[Finding]) -> list[str]:
    """The kinds of the root findings that matter, in order, without repeats."""
    out: list[str] = []
    for r in roots(found):
        if r.kind not in out:
            out.append(r.kind)
    return out


# -- reading records of every version ---------------------------------------------------------------------------


def upgrade_v1(d: dict[str, Any]) -> dict[str, Any]:
    """A version-1 record brought to version 2: its findings (its own and its turns') gain ids and ``caused_by``,
    linked by these rules."""
    own_raw = d.get("findings") or []
    turns_raw = d.get("turns") or []
    if not isinstance(own_raw, list) or not isinstance(turns_raw, list):
        return {**d, "schema_version": 2}  # malformed: left for from_dict to refuse with the field named
    own = [_v1_finding(f) for f in own_raw if isinstance(f, dict)]
    per_turn = [[_v1_finding(f) for f in (t.get("findings") or []) if isinstance(f, dict)]
                if isinstance(t, dict) else [] for t in turns_raw]
    flat = link_findings(own + [f for fs in per_turn for f in fs])
    k = len(own)
    turns = []
    for t, fs in zip(turns_raw, per_turn, strict=True):
        if isinstance(t, dict):
            t = {**t, "findings": [f.to_dict() for f in flat[k : k + len(fs)]]}
        k += len(fs)
        turns.append(t)
    return {**d, "schema_version": 2, "findings": [f.to_dict() for f in flat[: len(own)]], "turns": turns}


def _v1_finding(f: dict[str, Any]) -> Finding:
    return Finding.from_dict({"turn": None, "token_start": None, "token_end": None, "evidence": {}, **f,
                              "id": "", "caused_by": None})


def _is_v1(d: Any) -> bool:
    if not isinstance(d, dict) or d.get("schema_version", 1) != 1:
        return False
    if "schema_version" not in d and _later(d):
        raise FormatError(f"missing: the record is of version 3 or later ({_later(d)}) and must name its version; "
                          f"add \"schema_version\": {SCHEMA_VERSION} if this Rollscope wrote it (a record without one "
                          "is read as version 1)", field="schema_version")
    return True


def _later(d: dict[str, Any]) -> str:
    """What in a record without ``schema_version`` no version-1 record has: a typed config (version 3) or a field
    added since (``records.upgrade``); empty when nothing does."""
    c = d.get("config")
    if isinstance(c, dict) and isinstance(c.get("loop"), dict):
        return "its config has 'loop'"
    later = [k for k in ("checked", "outcome", "ground_truth") if k in d]
    return f"it has {later[0]!r}" if later else ""


def upgrade_record(d: dict[str, Any]) -> dict[str, Any]:
    """A record dict of any readable version as the current version writes it (``engine.records.upgrade``)."""
    return upgrade(upgrade_v1(d) if _is_v1(d) else d, SCHEMA_VERSION)


def read_episode(d: dict[str, Any], tokens: TokenArrays | None = None) -> Episode:
    """``Episode.from_dict`` for a record of any readable version, version 1 included (its findings linked here),
    a record from before version 5 with the outcome its env computes (``envs.outcomes``), as is one from before
    version 9 whose reward sums every turn's (``upgrade.sums_turns``), with the number policy's marks: a logprob that was not a finite number is unknown, its tokens marked
    ``logprob_not_finite`` (``records.marks``)."""
    nonfinite: list[tuple[str, int, float]] = []
    ep = unknown_logprobs(Episode.from_dict(upgrade_v1(d) if _is_v1(d) else d, tokens, nonfinite), nonfinite)
    # 4 -> 5: the outcome, from the env that scored it; 8 -> 9: a math outcome of a reward summed over turns, again.
    if ep.outcome is None and (_version(d) < 5 or (_version(d) < 9 and sums_turns(d))):
        from ..envs.outcomes import explain

        ep = ep.evolve(outcome=explain(ep))
    if ep.checked is not None and ep.checked_arrays is not None and ep.checked_arrays != ep.tokens.digest():
        ep = without_checks(ep, f"its token ids, loss mask or logprobs are not those checks version {ep.checked} "
                                "judged (edited after the check, or written where they do not fit)")
    return ep


def edited_after_check(ep: Episode) -> bool:
    """Whether ``ep``'s checks were dropped as it was read because its arrays were edited after them
    (``without_checks``)."""
    return ep.checked is None and any(f.kind == "not_checked" and "edited_after_check" in f.evidence
                                      for f in ep.findings)


def without_checks(ep: Episode, why: str) -> Episode:
    """``ep`` as not checked, because ``why``: the findings the checks wrote go (they were of other arrays), the
    loop's own stay, and an info finding says why; ``rollscope check`` checks it again."""
    from .base import LOOP_KINDS, RECHECKED

    kept = tuple(f for f in ep.findings if f.kind in LOOP_KINDS - RECHECKED)
    note = Finding("not_checked", Severity.INFO, f"every check: not checked: {why}; the findings it held were of "
                   "other arrays: `rollscope check` checks it again",
                   evidence={"check": "every check", "edited_after_check": ep.checked})
    return link(ep.evolve(checked=None, checked_arrays=None, findings=(*kept, note)))


def _version(d: dict[str, Any]) -> int:
    v = d.get("schema_version", 1)
    return v if isinstance(v, int) else 1
