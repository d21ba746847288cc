"""verl's gsm8k scorer (``verl/utils/reward_score/gsm8k.py``): the answer taken from the last 300 characters,
``strict`` the last ``#### N``, ``flexible`` the last number, compared with the reference as text. The
verl-tool preset's interaction scores with it and the checks compare it with Rollscope's math checker."""

from __future__ import annotations

import re

_CLIP = 300
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(\-?[0-9\.\,]+)")


def gsm8k_extract(solution: str, method: str = "strict") -> str | None:
    """``extract_solution``: the last 300 characters; strict takes the last ``#### N``, flexible the last number."""
    if len(solution) > _CLIP:
        solution = solution[-_CLIP:]
    if method == "strict":
        found = _STRICT.findall(solution)
        return found[-1].replace(",", "").replace("$", "") if found else None
    answer = None
    for answer in reversed(_FLEXIBLE.findall(solution)):
        if answer not in ("", "."):
            break
    return answer


def gsm8k_score(solution: str, ground_truth: str, method: str = "strict") -> float:
    """``compute_score`` with format_score 0 and score 1: the extracted answer compared with the truth as text."""
    answer = gsm8k_extract(solution, method)
    return 1.0 if answer is not None and answer == ground_truth else 0.0
