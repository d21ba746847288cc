"""The episode's token arrays: ids, loss mask, rollout logprobs and policy versions, as numpy arrays."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .reading import Fields


class TokenArrays:
    """The episode's token arrays: ids, loss mask, logprobs, policy versions.

    Immutable numpy arrays of the dtypes the trainers use (int32, uint8,
    float32 with NaN where unknown, int32 with -1 where none). Equality
    treats NaN as equal to NaN, so a stored episode equals its reload.
    """

    __slots__ = ("ids", "loss_mask", "logprobs", "versions")
    ids: np.ndarray
    """Token ids (int32)."""
    loss_mask: np.ndarray
    """1 where the trainer puts loss, 0 elsewhere (uint8)."""
    logprobs: np.ndarray
    """Rollout logprob per token (float32, NaN where unknown)."""
    versions: np.ndarray
    """Policy version that generated each token (int32, -1 where none)."""

    def __init__(self, ids: Any = (), loss_mask: Any = (), logprobs: Any = None, versions: Any = None) -> None:
        ids_a = np.asarray(ids, dtype=np.int32).reshape(-1)
        n = ids_a.shape[0]
        mask_a = np.asarray(loss_mask, dtype=np.uint8).reshape(-1)
        if logprobs is None:
            lp_a = np.full(n, np.nan, dtype=np.float32)
        else:
            try:
                lp_a = np.asarray(logprobs, dtype=np.float32).reshape(-1)
            except (TypeError, ValueError):  # None where a logprob is unknown
                lp_a = np.asarray([np.nan if x is None else x for x in logprobs], dtype=np.float32).reshape(-1)
        ver_a = np.full(n, -1, dtype=np.int32) if versions is None else np.asarray(versions, dtype=np.int32).reshape(-1)
        for name, arr in (("loss_mask", mask_a), ("logprobs", lp_a), ("versions", ver_a)):
            if arr.shape[0] != n:
                raise ValueError(f"token arrays disagree in length: ids has {n}, {name} has {arr.shape[0]}")
        for arr in (ids_a, mask_a, lp_a, ver_a):
            arr.setflags(write=False)
        object.__setattr__(self, "ids", ids_a)
        object.__setattr__(self, "loss_mask", mask_a)
        object.__setattr__(self, "logprobs", lp_a)
        object.__setattr__(self, "versions", ver_a)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("TokenArrays is immutable")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (to worker processes) through the constructor
        return (TokenArrays, (self.ids, self.loss_mask, self.logprobs, self.versions))

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
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TokenArrays(n={len(self)}, trainable={int(self.loss_mask.sum())})"

    @property
    def n_trainable(self) -> int:
        return int(self.loss_mask.sum())

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.ids.tolist(),
            "loss_mask": self.loss_mask.tolist(),
            "logprobs": [x if math.isfinite(x) else None for x in self.logprobs.tolist()],  # unknown: null
            "versions": self.versions.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TokenArrays:
        return cls(d.get("tokens") or (), d.get("loss_mask") or (), d.get("logprobs"), d.get("versions"))

    @classmethod
    def from_fields(cls, f: Fields) -> TokenArrays:
        """The four token lists of a record (``tokens``, ``loss_mask``, ``logprobs``, ``versions``), checked:
        a FormatError names the list at fault."""
        ids = _int_array(f, "tokens", 0, 2**31 - 1, "token ids (integers from 0 to 2^31 - 1)")
        n = len(ids)
        mask = _int_array(f, "loss_mask", 0, 1, "0s and 1s")
        versions = _int_array(f, "versions", -1, 2**31 - 1, "policy versions (integers, -1 where none)")
        logprobs = f.logprobs_or_none("logprobs")
        for key, length in (("loss_mask", len(mask)), ("logprobs", n if logprobs is None else len(logprobs)),
                            ("versions", len(versions))):
            if length != n:
                raise f.fail(key, f"has {length} entries for {n} tokens")
        return cls(ids, mask, logprobs, versions)

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


def _int_array(f: Fields, key: str, low: int, high: int, what: str) -> np.ndarray:
    arr = np.asarray(f.items(key))
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu" or arr.min() < low or arr.max() > high:
        raise f.fail(key, f"must be a list of {what}")
    return arr
