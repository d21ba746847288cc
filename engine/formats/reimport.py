"""What a foreign dump says of an episode the store holds already: the fields where it says otherwise.

A trainer's dump gives its records ids made of what identifies the sample (its rollout step, its index, its
token ids), not of everything it holds: a dump written again after the reward function was fixed, or with the
mask of a corrected loop, has the stored episodes' ids and other values. An import leaves stored episodes as
they are (a foreign record is no authority over what a person or a check added); :func:`dump_changes` says which
of the dump's own fields differ, so the import can say so and ``--replace`` can write the dump's over them.

Only what a dump carries is compared: how the episode ended, its reward, its token arrays, and its number of turns
where no token arrays hold it. What the import derives (the turns read off a mask and their rewards off the reward,
messages decoded with a tokenizer, the outcome, findings) depends on the reading, not on the dump: a live episode
exported and read back has its turns and turn rewards made otherwise, and the same dump.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..records.episode import Episode, TokenArrays

_ARRAYS = {"ids": "token ids", "loss_mask": "loss mask", "logprobs": "logprobs", "versions": "versions"}
_FIELDS = {"status": "status", "reward": "reward", "turn_rewards": "turn rewards", "n_turns": "turns"}


def said(ep: Episode) -> tuple[dict[str, Any], TokenArrays]:
    """What a dump says of ``ep``, as ``Store.ending_and_tokens`` reads it of a stored one."""
    return ({"status": ep.status.value, "reward": ep.reward, "turn_rewards": ep.turn_rewards, "n_turns": ep.n_turns,
             "tokenizer": ep.tokenizer}, ep.tokens)


def said_digest(ep: Episode) -> str:
    """A short hash of what a dump says of ``ep`` (``said``): two records of one id with the same say the same."""
    fields, tokens = said(ep)
    h = hashlib.sha256(repr(sorted(fields.items())).encode())
    h.update(tokens.digest().encode())
    h.update(tokens.versions.astype("<i4").tobytes())
    return h.hexdigest()[:16]


def dump_changes(read: tuple[dict[str, Any], TokenArrays], stored: tuple[dict[str, Any], TokenArrays],
                 own_ids: bool = False) -> tuple[str, ...]:
    """The fields (in words: ``reward``, ``loss mask``, ...) where a record just read (``said``) says otherwise
    than the stored episode of its id; empty when it says the same. The token arrays are compared where the dump
    holds them itself (``own_ids``: slime's) or both were read with the same tokenizer: a chat record's or a text
    dump's are the tokenizer's encoding, which another tokenizer makes otherwise."""
    (a, a_tokens), (b, b_tokens) = read, stored
    # No foreign dump carries turn rewards (they follow its one reward); its turns, where it holds token arrays,
    # are read off its mask: the mask says it.
    out = [name for key, name in _FIELDS.items() if key != "turn_rewards" and a[key] != b[key]
           and (key != "n_turns" or not (len(a_tokens) or len(b_tokens)))]
    same_encoding = own_ids or a["tokenizer"] == b["tokenizer"]
    arrays = [name for key, name in _ARRAYS.items()
              if same_encoding and not _equal(getattr(a_tokens, key), getattr(b_tokens, key))]
    return tuple(out + arrays)


def _equal(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))
