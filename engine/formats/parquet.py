"""Parquet, one row per episode, for dataset tooling (pandas, polars, ``datasets``).

Columns: the summary a table view wants (``id, env, task_id, run_id,
group_id, sample_index, preset, status, reason, reward, n_turns, n_tokens,
n_trainable, prompt_len, source, tags, starred, created_at, tokenizer``),
the token arrays as list columns (``tokens`` int32, ``loss_mask`` uint8,
``logprobs`` float32 with NaN where unknown, ``versions`` int32 with -1
where none), the entropy and top K (``entropy`` float32 per token, NaN where unknown; ``top_k``, K; ``top_ids``
int32 and ``top_logprobs`` float32, K per token row after row, -1 and NaN where a token has none), and
``record``: the rest of the episode as Rollscope JSON, so a
Parquet file imports back losslessly. A summary column edited after export (a re-scored ``reward``, a ``status``,
``tags``) is read over the record's copy, and the import says so (``edited``). Rows are written and read in batches,
so neither direction holds the whole file in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..checks.diagnosis import read_episode
from ..errors import FormatError
from ..records import jsonbounds
from ..records.bounds import within_bounds
from ..records.episode import Episode, TokenArrays
from .base import ImportContext, discover
from .edited import EDITABLE, FIGURES, with_edited_columns, with_stale_checks
from .limits import over_limit

BATCH = 256
ARRAYS = {"tokens": "ids", "loss_mask": "loss_mask", "logprobs": "logprobs", "versions": "versions",
          "entropy": "entropy", "top_ids": "top_ids", "top_logprobs": "top_logprobs"}
_TOKEN_KEYS = ("tokens", "loss_mask", "logprobs", "versions")
_ALTERNATIVES = ("entropy", "top_ids", "top_logprobs")  # not in files written before schema 8


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([
        ("id", pa.string()), ("env", pa.string()), ("task_id", pa.string()), ("run_id", pa.string()),
        ("group_id", pa.string()), ("sample_index", pa.int64()), ("preset", pa.string()), ("status", pa.string()),
        ("reason", pa.string()), ("reward", pa.float64()), ("n_turns", pa.int32()), ("n_tokens", pa.int32()),
        ("n_trainable", pa.int32()), ("prompt_len", pa.int32()), ("source", pa.string()),
        ("tags", pa.list_(pa.string())), ("starred", pa.bool_()), ("created_at", pa.float64()),
        ("tokenizer", pa.string()),
        ("tokens", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.uint8())), ("logprobs", pa.list_(pa.float32())),
        ("versions", pa.list_(pa.int32())), ("entropy", pa.list_(pa.float32())), ("top_k", pa.int32()),
        ("top_ids", pa.list_(pa.int32())), ("top_logprobs", pa.list_(pa.float32())), ("record", pa.string()),
    ])


def _list_column(arrays: list[np.ndarray], typ: Any) -> Any:
    import pyarrow as pa

    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    values = np.concatenate(arrays) if arrays else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(typ.to_pandas_dtype())), type=pa.list_(typ))


def _batch(eps: list[Episode]) -> Any:
    import pyarrow as pa

    schema = _schema()
    cols: dict[str, Any] = {}
    for name in ("id", "env", "task_id", "run_id", "group_id", "sample_index", "preset", "reason", "reward",
                 "prompt_len", "starred", "created_at", "tokenizer"):
        cols[name] = [getattr(e, name) for e in eps]
    cols["status"] = [e.status.value for e in eps]
    cols["n_turns"] = [e.n_turns for e in eps]
    cols["n_tokens"] = [e.n_tokens for e in eps]
    cols["n_trainable"] = [e.tokens.n_trainable for e in eps]
    cols["source"] = [e.source.kind for e in eps]
    cols["tags"] = [list(e.tags) for e in eps]
    cols["top_k"] = [e.tokens.top_k for e in eps]
    records = []
    for e in eps:
        d = e.to_dict()
        for k in (*_TOKEN_KEYS, *_ALTERNATIVES):
            d.pop(k, None)
        records.append(json.dumps(d, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
    cols["record"] = records
    arrays = []
    for f in schema:
        if f.name in ARRAYS:
            arrays.append(_list_column([getattr(e.tokens, ARRAYS[f.name]).reshape(-1) for e in eps], f.type.value_type))
        else:
            arrays.append(pa.array(cols[f.name], type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def write(episodes: Iterable[Episode], out: Path) -> int:
    """Write episodes in row groups of ``BATCH``; returns how many were written."""
    import pyarrow.parquet as pq

    n = 0
    with pq.ParquetWriter(str(out), _schema(), compression="zstd") as w:
        pending: list[Episode] = []
        for ep in episodes:
            pending.append(ep)
            if len(pending) == BATCH:
                w.write_batch(_batch(pending))
                n += len(pending)
                pending = []
        if pending or n == 0:
            w.write_batch(_batch(pending))
            n += len(pending)
    return n


def _row_arrays(batch: Any, name: str, i: int) -> np.ndarray:
    col = batch.column(name)
    start, end = col.offsets[i].as_py(), col.offsets[i + 1].as_py()
    out: np.ndarray = col.values.to_numpy(zero_copy_only=False)[start:end]
    return out


def _row_sizes(batch: Any) -> np.ndarray:
    """Each row's size in bytes: its record's text and its token arrays."""
    import pyarrow.compute as pc

    out: np.ndarray = pc.fill_null(pc.binary_length(batch.column("record")), 0).to_numpy().astype(np.int64)
    for name in _TOKEN_KEYS:
        col = batch.column(name)
        n = pc.fill_null(pc.list_value_length(col), 0).to_numpy().astype(np.int64)
        out += n * (col.type.value_type.bit_width // 8)
    return out


def _tokens(batch: Any, i: int, record: dict[str, Any], alternatives: bool) -> TokenArrays:
    ids, mask, lps, versions = (_row_arrays(batch, k, i) for k in _TOKEN_KEYS)
    if not alternatives:
        return TokenArrays(ids, mask, lps, versions)
    k = int(batch.column("top_k")[i].as_py() or 0)
    n = len(ids)
    top_ids, top_lps = _row_arrays(batch, "top_ids", i), _row_arrays(batch, "top_logprobs", i)
    if len(top_ids) != n * k or len(top_lps) != n * k:
        raise FormatError(f"top_ids holds {len(top_ids)} values, not top_k {k} for each of {n} tokens")
    return TokenArrays(ids, mask, lps, versions, _row_arrays(batch, "entropy", i), top_ids.reshape(n, k),
                       top_lps.reshape(n, k), bool(record.get("entropy_estimated", False)))


def read(path: Path, ctx: ImportContext) -> Iterator[Episode]:
    """Stream episodes from Parquet files this module wrote, a batch of rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for f in discover(path, (".parquet",)):
        try:
            pf = pq.ParquetFile(str(f))
        except (pa.ArrowException, OSError) as e:
            raise FormatError(f"cannot read as Parquet: {e}", str(f)) from None
        ctx.opened(f)
        missing = [c for c in ("record", *_TOKEN_KEYS) if c not in pf.schema_arrow.names]
        if missing:
            raise FormatError(f"not a Rollscope Parquet export: no column {missing[0]!r}", str(f))
        ctx.expect(pf.metadata.num_rows)
        row = 0
        more = [c for c in ("top_k", *_ALTERNATIVES) if c in pf.schema_arrow.names]
        editable = [c for c in EDITABLE if c in pf.schema_arrow.names]
        counted = [c for c in FIGURES if c in pf.schema_arrow.names]
        for batch in pf.iter_batches(batch_size=64, columns=["record", *_TOKEN_KEYS, *more, *editable, *counted]):
            sizes = _row_sizes(batch)
            column = batch.column("record")
            edits = {c: batch.column(c).to_pylist() for c in editable}
            figures = {c: batch.column(c).to_pylist() for c in counted}
            for i in range(batch.num_rows):
                where = f"{f}: row {row}"
                row += 1
                if sizes[i] > ctx.max_record:  # named and skipped before it becomes Python objects
                    ctx.skip(over_limit(int(sizes[i]), ctx.max_record, "the row", where))
                    continue
                rec = column[i].as_py()
                try:
                    d = jsonbounds.loads(rec, limit=None)
                    ep = within_bounds(read_episode(d, tokens=_tokens(batch, i, d, bool(more))))
                    ep = with_edited_columns(ep, {c: values[i] for c, values in edits.items()}, where, f, ctx)
                    ep = with_stale_checks(ep, {c: values[i] for c, values in figures.items()}, f, ctx)
                except FormatError as e:
                    ctx.skip(e.at(where))
                    continue
                except (TypeError, ValueError, KeyError, AttributeError) as e:
                    ctx.skip(FormatError(f"malformed record ({type(e).__name__}: {e})", where))
                    continue
                yield ep
