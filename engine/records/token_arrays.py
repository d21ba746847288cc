"""The episode's token arrays: ids, loss mask, rollout logprobs, policy versions, entropy and top K, as numpy arrays."""

from __future__ import annotations

import array
import hashlib
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import FormatError
from . import alternatives
from .reading import json_type

if TYPE_CHECKING:
    from .reading import Fields


class TokenArrays:
    """The episode's token arrays: ids, loss mask, logprobs, policy versions, entropy and top K.

    Immutable numpy arrays of the dtypes the trainers use (int32, uint8,
    float32 with NaN where unknown, int32 with -1 where none). Equality
    treats NaN as equal to NaN, so a stored episode equals its reload.
    """

    __slots__ = ("ids", "loss_mask", "logprobs", "versions", "entropy", "top_ids", "top_logprobs", "entropy_estimated")
    ids: np.ndarray
    """Token ids (int32)."""
    loss_mask: np.ndarray
    """1 where the trainer puts loss, 0 elsewhere (uint8)."""
    logprobs: np.ndarray
    """Rollout logprob per token (float32, NaN where unknown)."""
    versions: np.ndarray
    """Policy version that generated each token (int32, -1 where none)."""
    entropy: np.ndarray
    """Entropy (nats) of the distribution each token was sampled from (float32, NaN where unknown)."""
    top_ids: np.ndarray
    """The K most likely ids at each token, most likely first ((n, K) int32, -1 where none; K may be 0)."""
    top_logprobs: np.ndarray
    """Their logprobs ((n, K) float32, NaN where none)."""
    entropy_estimated: bool
    """Whether some entropy is estimated from a server's top K (a lower bound) rather than exact."""

    def __init__(self, ids: Any = (), loss_mask: Any = (), logprobs: Any = None, versions: Any = None,
                 entropy: Any = None, top_ids: Any = None, top_logprobs: Any = None,
                 entropy_estimated: bool = False) -> None:
        ids_a = np.asarray(ids, dtype=np.int32).reshape(-1)
        n = ids_a.shape[0]
        mask_a = np.asarray(loss_mask, dtype=np.uint8).reshape(-1)
        lp_a = _floats(logprobs, n)
        ent_a = _floats(entropy, n)
        if entropy is not None and len(ent_a) == 0:
            ent_a = np.full(n, np.nan, dtype=np.float32)  # [] on the wire: none known
        ver_a = np.full(n, -1, dtype=np.int32) if versions is None else np.asarray(versions, dtype=np.int32).reshape(-1)
        for name, arr in (("loss_mask", mask_a), ("logprobs", lp_a), ("versions", ver_a), ("entropy", ent_a)):
            if arr.shape[0] != n:
                raise ValueError(f"token arrays disagree in length: ids has {n}, {name} has {arr.shape[0]}")
        top_i = _table(top_ids, n, -1, np.int32, "top_ids")
        top_l = _table(top_logprobs, n, np.nan, np.float32, "top_logprobs")
        if top_i.shape != top_l.shape:
            raise ValueError(f"top_ids is {top_i.shape[0]}x{top_i.shape[1]} but top_logprobs "
                             f"{top_l.shape[0]}x{top_l.shape[1]}")
        for arr in (ids_a, mask_a, lp_a, ver_a, ent_a, top_i, top_l):
            arr.setflags(write=False)
        for key, value in (("ids", ids_a), ("loss_mask", mask_a), ("logprobs", lp_a), ("versions", ver_a),
                           ("entropy", ent_a), ("top_ids", top_i), ("top_logprobs", top_l),
                           ("entropy_estimated", bool(entropy_estimated))):
            object.__setattr__(self, key, value)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("TokenArrays is immutable")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (to worker processes) through the constructor
        return (TokenArrays, (self.ids, self.loss_mask, self.logprobs, self.versions, self.entropy, self.top_ids,
                              self.top_logprobs, self.entropy_estimated))

    def evolve(self, **changes: Any) -> TokenArrays:
        """A copy with some arrays replaced (the others kept)."""
        kw = {k: getattr(self, k) for k in self.__slots__}
        kw.update(changes)
        return TokenArrays(**kw)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenArrays):
            return NotImplemented
        return (
            np.array_equal(self.ids, other.ids)
            and np.array_equal(self.loss_mask, other.loss_mask)
            and np.array_equal(self.logprobs, other.logprobs, equal_nan=True)
            and np.array_equal(self.versions, other.versions)
            and np.array_equal(self.entropy, other.entropy, equal_nan=True)
            and self.top_ids.shape == other.top_ids.shape
            and np.array_equal(self.top_ids, other.top_ids)
            and np.array_equal(self.top_logprobs, other.top_logprobs, equal_nan=True)
            and self.entropy_estimated == other.entropy_estimated
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TokenArrays(n={len(self)}, trainable={int(self.loss_mask.sum())})"

    @property
    def n_trainable(self) -> int:
        return int(self.loss_mask.sum())

    @property
    def top_k(self) -> int:
        """K: how many alternatives a token holds at most (0 when none were asked for)."""
        return int(self.top_ids.shape[1])

    @property
    def has_alternatives(self) -> bool:
        """Whether any token has an entropy or a top K."""
        return bool(self.top_k and (self.top_ids[:, 0] >= 0).any()) or bool(np.isfinite(self.entropy).any())

    def digest(self) -> str:
        """A short hash of what the checks judge: the ids, the loss mask and the logprobs (every unknown alike, an
        infinite one too: the store keeps it unknown, ``marks.unknown_logprobs``)."""
        h = hashlib.sha256(self.ids.astype("<i4").tobytes())
        h.update(self.loss_mask.tobytes())
        h.update(np.where(np.isfinite(self.logprobs), self.logprobs, np.float32(np.nan)).astype("<f4").tobytes())
        return h.hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        d = {
            "tokens": self.ids.tolist(),
            "loss_mask": self.loss_mask.tolist(),
            "logprobs": [x if math.isfinite(x) else None for x in self.logprobs.tolist()],  # unknown: null
            "versions": self.versions.tolist(),
        }
        # An episode with none writes empty lists rather than a null or an empty list per token.
        known = np.isfinite(self.entropy)
        d["entropy"] = [x if math.isfinite(x) else None for x in self.entropy.tolist()] if known.any() else []
        if self.top_k and (self.top_ids[:, 0] >= 0).any():
            d["top_ids"], d["top_logprobs"] = alternatives.rows(self.top_ids, self.top_logprobs)
        else:
            d["top_ids"], d["top_logprobs"] = [], []
        d["entropy_estimated"] = self.entropy_estimated
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TokenArrays:
        return cls(d.get("tokens") or (), d.get("loss_mask") or (), d.get("logprobs"), d.get("versions"),
                   d.get("entropy") or None, d.get("top_ids") or None, d.get("top_logprobs") or None,
                   bool(d.get("entropy_estimated", False)))

    @classmethod
    def from_fields(cls, f: Fields) -> TokenArrays:
        """The four token lists of a record (``tokens``, ``loss_mask``, ``logprobs``, ``versions``), checked:
        a FormatError names the list at fault."""
        ids = _int_array(f, "tokens", 0, 2**31 - 1, "a token id (an integer from 0 to 2^31 - 1)")
        n = len(ids)
        mask = _int_array(f, "loss_mask", 0, 1, "0 or 1")
        versions = _int_array(f, "versions", -1, 2**31 - 1, "a policy version (an integer, -1 where none)")
        logprobs = f.logprobs_or_none("logprobs")
        entropy = f.logprobs_or_none("entropy") if f.has("entropy") else None
        top_ids = alternatives.read_rows(f.raw("top_ids"), f.name("top_ids"), False) if f.has("top_ids") else []
        top_lps = alternatives.read_rows(f.raw("top_logprobs"), f.name("top_logprobs"), True) \
            if f.has("top_logprobs") else []
        alternatives.check_pair(top_ids, top_lps, f.name("top_logprobs"))
        for key, length in (("loss_mask", len(mask)), ("logprobs", n if logprobs is None else len(logprobs)),
                            ("versions", len(versions)), ("entropy", len(entropy or ()) or n),
                            ("top_ids", len(top_ids) or n)):
            if length != n:
                raise f.fail(key, f"has {length} entries for {n} tokens")
        estimated = f.boolean("entropy_estimated") if f.has("entropy_estimated") else False
        return cls(ids, mask, logprobs, versions, entropy or None, top_ids or None, top_lps or None, estimated)

    def to_blobs(self) -> dict[str, bytes]:
        return {
            "ids": self.ids.astype("<i4").tobytes(),
            "loss_mask": self.loss_mask.tobytes(),
            "logprobs": self.logprobs.astype("<f4").tobytes(),
            "versions": self.versions.astype("<i4").tobytes(),
        }

    @classmethod
    def from_blobs(cls, ids: bytes, loss_mask: bytes, logprobs: bytes, versions: bytes) -> TokenArrays:
        return cls(
            np.frombuffer(ids, dtype="<i4"),
            np.frombuffer(loss_mask, dtype=np.uint8),
            np.frombuffer(logprobs, dtype="<f4"),
            np.frombuffer(versions, dtype="<i4"),
        )


def _floats(values: Any, n: int) -> np.ndarray:
    if values is None:
        return np.full(n, np.nan, dtype=np.float32)
    try:
        return np.asarray(values, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError):  # None where a value is unknown
        return np.asarray([np.nan if x is None else x for x in values], dtype=np.float32).reshape(-1)


def _table(values: Any, n: int, fill: Any, dtype: Any, what: str) -> np.ndarray:
    """An (n, K) array from an array or from per-token lists (ragged: padded with ``fill``)."""
    if values is None:
        return np.zeros((n, 0), dtype=dtype)
    if isinstance(values, np.ndarray) and values.ndim == 2:
        out = values.astype(dtype)
    else:
        out = alternatives.padded(list(values), fill, dtype, n, what)
    if out.shape[0] != n:
        raise ValueError(f"token arrays disagree in length: ids has {n}, {what} has {out.shape[0]}")
    return out


def _int_array(f: Fields, key: str, low: int, high: int, what: str) -> np.ndarray:
    """The list ``key`` of ``f`` as int64, each in ``low..high``; else a FormatError naming the first entry that is
    not (``tokens.17``). Read through ``array.array``: a nested list or a float is refused, not flattened or cut.
    ``array.array`` takes true and false as 1 and 0, so the entries that read as 0 or 1 are looked at again: the
    whole list when they are more than a quarter of it (a loss mask), else those few (a token list)."""
    items = f.items(key)
    if not items:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.frombuffer(array.array("q", items), dtype=np.int64)
        if arr.min() >= low and arr.max() <= high:
            small = np.flatnonzero((arr == 0) | (arr == 1))
            maybe = items if 4 * len(small) > len(items) else [items[i] for i in small.tolist()]
            if bool not in set(map(type, maybe)):
                return arr
    except (TypeError, OverflowError):
        pass
    for i, v in enumerate(items):
        if type(v) is not int or not low <= v <= high:
            shown = "" if v is None else f" {str(v).lower() if type(v) is bool else repr(v):.40}"
            raise FormatError(f"must be {what}, got {json_type(v)}{shown}", field=f"{f.name(key)}.{i}")
    raise f.fail(key, f"must be a list, each entry {what}")

