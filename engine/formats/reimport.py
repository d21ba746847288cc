"""What a foreign dump says of an episode the store holds already: the fields where it says otherwise.

A trainer's dump gives its records ids made of what identifies the sample (its rollout step, its index, its
token ids), not of everything it holds: a dump written again after the reward function was fixed, or with the
mask of a corrected loop, has the stored episodes' ids and other values. An import leaves stored episodes as
they are (a foreign record is no authority over what a person or a check added); :func:`dump_changes` says which
of the dump's own fields differ, so the import can say so and ``--replace`` can write the dump's over them.

Only what a dump carries is compared: how the episode ended, its rewards and its token arrays. What the import
derives (messages decoded with a tokenizer, the outcome, findings) depends on the tokenizer and checks of the
day, not on the dump.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..records.episode import Episode

# The fields a dump says, each with how it reads off an episode: compared in this order, named in the report.
_SAID: tuple[tuple[str, Callable[[Episode], object]], ...] = (
    ("status", lambda e: e.status.value),
    ("reward", lambda e: e.reward),
    ("turn rewards", lambda e: e.turn_rewards),
    ("turns", lambda e: e.n_turns),
)
_ARRAYS = ("ids", "loss_mask", "logprobs", "versions")
_ARRAY_NAMES = {"ids": "token ids", "loss_mask": "loss mask", "logprobs": "logprobs", "versions": "versions"}


def dump_changes(read: Episode, stored: Episode) -> tuple[str, ...]:
    """The fields (in words: ``reward``, ``loss mask``, ...) where the record just read says otherwise than the
    stored episode of its id; empty when it says the same."""
    out = [name for name, value in _SAID if value(read) != value(stored)]
    if "reward" in out and "turn rewards" in out:  # the episode's reward put on its turns: one change, said once
        out.remove("turn rewards")
    for key in _ARRAYS:
        a, b = getattr(read.tokens, key), getattr(stored.tokens, key)
        if a.shape != b.shape or not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            out.append(_ARRAY_NAMES[key])
    return tuple(out)
