"""Keys and values the embedded model keeps: a prefix cache across requests, and the decoding batch.

:class:`PrefixCache` holds the keys/values of token sequences the model has
computed, found again by longest common token prefix and evicted least
recently used beyond a byte bound. :class:`DecodeBatch` holds the rows being
decoded together in one buffer per layer: each row right-aligned at a shared
end column, padding masked, free row slots and room on both sides so a
request joins or leaves by copying its own row, not the whole batch.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

KV = list[tuple["torch.Tensor", "torch.Tensor"]]
"""Per layer (keys, values), each [batch, kv heads, tokens, head dim]."""


# -- the prefix cache ---------------------------------------------------------


@dataclass
class _Entry:
    tokens: np.ndarray
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, each [1, heads, len(tokens), head_dim]
    nbytes: int


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


class PrefixCache:
    """Keys and values of token sequences the model has seen, found by longest common prefix; LRU within a byte bound."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # the worker uses it; a bench or test may clear it from another thread
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: np.ndarray) -> tuple[int, _Entry | None]:
        """(length of the longest prefix of ``tokens`` held, the entry that holds it); (0, None) on a miss."""
        with self._lock:
            return self._lookup(tokens)

    def _lookup(self, tokens: np.ndarray) -> tuple[int, _Entry | None]:
        best, best_key = 0, -1
        for key, e in self._entries.items():
            n = _common_prefix(tokens, e.tokens)
            if n > best:
                best, best_key = n, key
        if best_key < 0:
            self.misses += 1
            return 0, None
        self.hits += 1
        self._entries.move_to_end(best_key)
        return best, self._entries[best_key]

    def put(self, tokens: np.ndarray, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Hold ``kv`` for ``tokens``; entries that are a prefix of ``tokens`` are dropped (this one covers them)."""
        with self._lock:
            self._put(tokens, kv)

    def _put(self, tokens: np.ndarray, kv: KV) -> None:
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if nbytes > self.max_bytes or not len(tokens):
            return
        for key in [k for k, e in self._entries.items()
                    if len(e.tokens) <= len(tokens) and _common_prefix(e.tokens, tokens) == len(e.tokens)]:
            self._drop(key)
        self._entries[self._next] = _Entry(tokens, kv, nbytes)
        self._next += 1
        self.nbytes += nbytes
        while self.nbytes > self.max_bytes and self._entries:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: int) -> None:
        self.nbytes -= self._entries.pop(key).nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0


# -- one growing cache layer ----------------------------------------------------


def _grow_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class GrowLayer(DynamicLayer):  # type: ignore[no-untyped-call]
        """A dynamic layer that appends into spare capacity instead of concatenating a new tensor each token."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, spare: int) -> None:
            import torch

            super().__init__()  # type: ignore[no-untyped-call]
            b, h, n, d = keys.shape
            self._k = torch.empty((b, h, n + spare, d), dtype=keys.dtype, device=keys.device)
            self._v = torch.empty((b, h, n + spare, values.shape[-1]), dtype=values.dtype, device=values.device)
            self._k[:, :, :n] = keys
            self._v[:, :, :n] = values
            self._n = n
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
                   ) -> tuple[torch.Tensor, torch.Tensor]:
            import torch

            new = key_states.shape[-2]
            if self._n + new > self._k.shape[-2]:
                grow = max(new, self._k.shape[-2])
                self._k = torch.cat([self._k[:, :, : self._n], key_states.new_empty(
                    (*self._k.shape[:2], grow + new, self._k.shape[-1]))], dim=-2)
                self._v = torch.cat([self._v[:, :, : self._n], value_states.new_empty(
                    (*self._v.shape[:2], grow + new, self._v.shape[-1]))], dim=-2)
            self._k[:, :, self._n : self._n + new] = key_states
            self._v[:, :, self._n : self._n + new] = value_states
            self._n += new
            self.keys, self.values = self._k[:, :, : self._n], self._v[:, :, : self._n]
            return self.keys, self.values

    return GrowLayer


_GROW: type | None = None


def make_cache(kv: list[tuple[torch.Tensor, torch.Tensor]], spare: int) -> Any:
    """A DynamicCache holding ``kv`` (per layer [batch, heads, n, dim]) with room for ``spare`` more tokens."""
    global _GROW
    from transformers import DynamicCache

    if _GROW is None:
        _GROW = _grow_layer_class()
    cache = DynamicCache()
    cache.layers = [_GROW(k, v, spare) for k, v in kv]
    return cache


def reusable(model: Any) -> bool:
    """Whether the model's cache is plain per-layer key/value tensors, which can be cut and batched."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:  # an exotic config: run it the plain way
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)




# -- the decoding batch -----------------------------------------------------------

HEADROOM = 1024
"""Columns kept free left of the longest row when the batch is laid out: a longer request can join without a re-layout."""
STEP_ROOM = 256
"""Decoding steps the batch has room for (right of its end column) before it is laid out again."""


class DecodeBatch:
    """Rows decoded together: one buffer per layer, [slots, kv heads, columns, head dim].

    Every row's tokens end at column ``end``; row ``i`` holds ``lengths[i]`` of
    them, so it starts at ``end - lengths[i]``. A forward pass reads the
    window ``[start, end]`` (``start`` = ``end`` minus the longest row) of
    the first ``len(lengths)`` slots; columns of a row left of its start are
    zero and masked. Each step writes one column and moves ``end`` on.
    """

    def __init__(self) -> None:
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.mask: torch.Tensor | None = None  # [slots, columns], 1 where a row holds a token
        self.lengths: list[int] = []
        self.end = 0
        self.start = 0
        self.layouts = 0  # how often the rows were copied into new buffers (for benches)

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def slots(self) -> int:
        return self.k[0].shape[0] if self.k else 0

    @property
    def columns(self) -> int:
        return self.k[0].shape[2] if self.k else 0

    def row(self, i: int) -> KV:
        """Row ``i``'s keys/values as views, [1, heads, lengths[i], dim] per layer."""
        a = self.end - self.lengths[i]
        return [(k[i : i + 1, :, a : self.end], v[i : i + 1, :, a : self.end]) for k, v in zip(self.k, self.v)]

    def fits(self, length: int) -> bool:
        return len(self) < self.slots and length <= self.end and self.end < self.columns

    def add(self, kv: KV, length: int) -> None:
        """A row joins with its keys/values (``length`` tokens); laid out anew when it does not fit."""
        if not self.fits(length):
            rows = [self.row(i) for i in range(len(self))]
            self._layout([*rows, kv], [*self.lengths, length])
            return
        i, a = len(self), self.end - length
        if a < self.start:
            for k, v in zip(self.k, self.v):  # the window widens: what the other rows now show must be zero
                k[:i, :, a : self.start] = 0
                v[:i, :, a : self.start] = 0
            self.start = a
        for (k, v), (nk, nv) in zip(zip(self.k, self.v), kv):
            k[i, :, self.start : a] = 0
            v[i, :, self.start : a] = 0
            k[i, :, a : self.end] = nk[0]
            v[i, :, a : self.end] = nv[0]
        assert self.mask is not None
        self.mask[i] = 0
        self.mask[i, a : self.end] = 1
        self.lengths.append(length)

    def remove(self, i: int) -> KV:
        """Take row ``i`` out (its keys/values copied out); the last row moves into its slot."""
        taken = [(k.clone(), v.clone()) for k, v in self.row(i)]
        last = len(self) - 1
        if i != last:
            for k, v in zip(self.k, self.v):
                k[i, :, self.start : self.end] = k[last, :, self.start : self.end]
                v[i, :, self.start : self.end] = v[last, :, self.start : self.end]
            assert self.mask is not None
            self.mask[i] = self.mask[last]
            self.lengths[i] = self.lengths[last]
        self.lengths.pop()
        self.start = self.end - max(self.lengths, default=0)
        if not self.lengths:  # nothing decoding: give the memory back
            self.k, self.v, self.mask = [], [], None
        return taken

    def _layout(self, rows: list[KV], lengths: list[int]) -> None:
        import torch

        width = max(lengths)
        slots = max(2, 2 * len(rows))
        end = width + HEADROOM
        columns = end + STEP_ROOM
        k0, v0 = rows[0][0]
        ks, vs = [], []
        for layer in range(len(rows[0])):
            k = k0.new_zeros((slots, k0.shape[1], columns, k0.shape[3]))
            v = v0.new_zeros((slots, v0.shape[1], columns, v0.shape[3]))
            for i, (kv, n) in enumerate(zip(rows, lengths)):
                k[i, :, end - n : end] = kv[layer][0][0]
                v[i, :, end - n : end] = kv[layer][1][0]
            ks.append(k)
            vs.append(v)
        mask = torch.zeros((slots, columns), dtype=torch.long)
        for i, n in enumerate(lengths):
            mask[i, end - n : end] = 1
        self.k, self.v, self.mask = ks, vs, mask
        self.lengths, self.end, self.start = list(lengths), end, end - width
        self.layouts += 1

    def step_inputs(self) -> tuple[Any, dict[str, Any]]:
        """(the cache for one forward pass, its extra model arguments): mask and positions when rows are padded."""
        import torch

        if self.end >= self.columns:  # out of step room: lay the rows out again
            self._layout([self.row(i) for i in range(len(self))], list(self.lengths))
        n = len(self)
        assert self.mask is not None
        self.mask[:n, self.end] = 1
        kwargs: dict[str, Any] = {}
        if any(x != self.end - self.start for x in self.lengths):
            kwargs["attention_mask"] = self.mask[:n, self.start : self.end + 1]
            kwargs["position_ids"] = torch.tensor([[x] for x in self.lengths])
        return _batch_cache(self), kwargs

    def advance(self) -> None:
        """After a forward pass: every row holds one more token."""
        self.end += 1
        self.lengths = [x + 1 for x in self.lengths]


_BATCH_LAYER: type | None = None


def _batch_cache(batch: DecodeBatch) -> Any:
    """A DynamicCache whose layers read and write ``batch``'s window."""
    global _BATCH_LAYER
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    if _BATCH_LAYER is None:
        class BatchLayer(DynamicLayer):  # type: ignore[no-untyped-call]
            """One layer of a DecodeBatch: a step writes column ``end`` and attends over ``[start, end]``."""

            def __init__(self, owner: DecodeBatch, index: int) -> None:
                super().__init__()  # type: ignore[no-untyped-call]
                self.owner, self.index = owner, index
                self.is_initialized = True
                k = owner.k[index]
                self.dtype, self.device = k.dtype, k.device
                self.keys = k[: len(owner), :, owner.start : owner.end]
                self.values = owner.v[index][: len(owner), :, owner.start : owner.end]

            def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
                       ) -> tuple[torch.Tensor, torch.Tensor]:
                o, n = self.owner, len(self.owner)
                k, v = o.k[self.index], o.v[self.index]
                k[:n, :, o.end : o.end + 1] = key_states
                v[:n, :, o.end : o.end + 1] = value_states
                return k[:n, :, o.start : o.end + 1], v[:n, :, o.start : o.end + 1]

        _BATCH_LAYER = BatchLayer
    cache = DynamicCache()
    cache.layers = [_BATCH_LAYER(batch, i) for i in range(len(batch.k))]
    return cache
