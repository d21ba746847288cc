"""Fidelity checks: turn a trace into Findings, located at the token.

Each check reads what the episode carries (messages, token arrays,
generations, segments) and either reports findings or says, as an ``info``
finding of kind ``not_checked``, what it could not check and why. Checks
never change the episode; :func:`with_checks` returns a copy carrying their
findings, linked to their root causes (``diagnosis``).

``rendering`` holds the checks against the chat template, ``arrays`` those
on the token arrays, ``verl`` those of verl's agent loop (its answers, cuts, parser and scorer), ``arguments`` the token where a
wrong tool argument was generated and what else the model could have said there, ``base`` what they share, ``diagnosis`` the links from a
finding to its cause and the one-line diagnosis (and the reading of records
whose upgrade needs those rules), ``fanout`` the checks run on worker
processes or Ray. Imports the records, tokens and backends (a local model
teacher-forces logprobs); nothing above.
"""

from __future__ import annotations

from ..records.episode import Episode, Finding
from .arguments import check_wrong_argument
from .arrays import (
    assistant_spans,
    check_drift,
    check_logprob_mismatch,
    check_logprobs,
    check_mask,
    check_response_length,
    check_trained,
    check_truncation,
    check_turn_records,
    check_vocabulary,
    closing_newlines,
)
from .base import CHECKS_VERSION, KEEPS_IDS, KINDS, LOOP_KINDS, RECHECKED, Check, CheckOptions
from .diagnosis import link
from .rendering import (
    check_chat_markup,
    check_injected_system,
    check_rendering,
    check_template,
    injected_system_blocks,
    tito_expected_ids,
)
from .verl import VERL_CHECKS
from .verl_layout import raw_observations

CHECKS: tuple[Check, ...] = (
    check_vocabulary, check_template, check_rendering, check_injected_system, check_drift, check_mask, check_logprobs, check_truncation,
    check_response_length, check_logprob_mismatch, check_turn_records, *VERL_CHECKS, check_wrong_argument,
    check_trained,
)


def run_checks(ep: Episode, options: CheckOptions | None = None) -> list[Finding]:
    """Every check's findings for one episode (not including the loop's own)."""
    o = options or CheckOptions()
    out: list[Finding] = []
    for check in CHECKS:
        out.extend(check(ep, o))
    return out


def with_checks(ep: Episode, options: CheckOptions | None = None) -> Episode:
    """The episode with the checks' findings attached (replacing earlier check findings), and the checks' version
    in ``checked``."""
    # The checks write these kinds at the episode level too (the loop, on its turns): the episode's own are an
    # earlier check's, replaced like the rest, so checking twice finds the same.
    loop_found = [f for f in ep.findings if f.kind in LOOP_KINDS and f.kind not in RECHECKED]
    return link(ep.evolve(findings=tuple(loop_found) + tuple(run_checks(ep, options)), checked=CHECKS_VERSION,
                          checked_arrays=ep.tokens.digest()))


__all__ = [
    "CHECKS", "CHECKS_VERSION", "KEEPS_IDS", "KINDS", "LOOP_KINDS", "RECHECKED", "Check", "CheckOptions", "assistant_spans",
    "check_chat_markup", "check_drift", "check_injected_system", "check_logprob_mismatch", "check_logprobs",
    "check_mask", "check_rendering", "check_response_length", "check_template", "check_truncation",
    "check_turn_records", "check_wrong_argument", "closing_newlines", "injected_system_blocks", "raw_observations", "run_checks", "tito_expected_ids",
    "with_checks",
]
