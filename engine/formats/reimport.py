"""What a foreign dump says of an episode the store holds already: the fields where it says otherwise.

A trainer's dump gives its records ids made of what identifies the sample (its rollout step, its index, its
token ids), not of everything it holds: a dump written again after the reward function was fixed, or with the
mask of a corrected loop, has the stored episodes' ids and other values. An import leaves stored episodes as
they are (a foreign record is no authority over what a person or a check added); :func:`dump_changes` says which
of the dump's own fields differ, so the import can say so and ``--replace`` can write the dump's over them.

Only what a dump carries is compared: how the episode ended, its rewards, its number of turns and its token
arrays. What the import derives (messages decoded with a tokenizer, the outcome, findings) depends on the
tokenizer and checks of the day, not on the dump.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..records.episode import Episode, TokenArrays

_ARRAYS = {"ids": "token ids", "loss_mask": "loss mask", "logprobs": "logprobs", "versions": "versions"}
_FIELDS = {"status": "status", "reward": "reward", "turn_rewards": "turn rewards", "n_turns": "turns"}


def said(ep: Episode) -> tuple[dict[str, Any], TokenArrays]:
    """What a dump says of ``ep``, as ``Store.ending_and_tokens`` reads it of a stored one."""
    return ({"status": ep.status.value, "reward": ep.reward, "turn_rewards": ep.turn_rewards, "n_turns": ep.n_turns},
            ep.tokens)


def dump_changes(read: tuple[dict[str, Any], TokenArrays], stored: tuple[dict[str, Any], TokenArrays]
                 ) -> tuple[str, ...]:
    """The fields (in words: ``reward``, ``loss mask``, ...) where a record just read (``said``) says otherwise
    than the stored episode of its id; empty when it says the same."""
    (a, a_tokens), (b, b_tokens) = read, stored
    out = [name for key, name in _FIELDS.items() if a[key] != b[key]]
    if "reward" in out and "turn rewards" in out:  # the episode's reward put on its turns: one change, said once
        out.remove("turn rewards")
    for key, name in _ARRAYS.items():
        x, y = getattr(a_tokens, key), getattr(b_tokens, key)
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            out.append(name)
    return tuple(out)
