"""The compact stored form of an episode's token arrays and of its turns.

Token arrays (``tokens.packed``): one zstd frame over
- the ids, byte-shuffled (the four byte planes of the int32s one after the other: the high planes of
  token ids are nearly constant and compress to almost nothing);
- the loss mask and the policy versions, run-length encoded (they change a few times an episode);
- where the logprobs are NaN, run-length encoded, then the other logprobs, byte-shuffled float32s.

An episode with entropy or top K (format 2; one without is written as format 1, as before) adds
- where the entropy is NaN, run-length encoded, then the other entropies, byte-shuffled float32s;
- which tokens have alternatives, run-length encoded, then those tokens' K ids and K logprobs, byte-shuffled.
K and whether the entropy is estimated go in the header's flags.

A 16-byte header before the frame says the format and the length. The round trip is exact: every id,
mask value, version and logprob bit comes back (NaN comes back as NaN).

Turns (``turns.data``): the turn's JSON without what the episode's arrays already hold. A generation
whose ids (and logprobs) are the episode's ids (and logprobs) at the turn's assistant span says
``{"$span": [start, end]}`` instead; a prompt text is given as pieces of the previous turn's prompt and
generated text (``records.prompts``, as the JSONL export writes it), whether it extends that prompt or
rewrote part of it. The JSON is then zstd-compressed. Rows written before hold JSON text, or a prompt
that extended the previous one as ``{"$extends": n, "rest": ...}``, and read as they are.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
import zstandard

from ..errors import FormatError, StoreError
from ..records import jsonbounds, prompts
from ..records.alternatives import rows
from ..records.episode import Turn
from ..records.token_arrays import TokenArrays

MAGIC = b"RSTK"
VERSION = 1
VERSION_ALTERNATIVES = 2
_HEADER = struct.Struct("<4sHHII")  # magic, format version, flags, n tokens, n sections
_LEVEL = 3
_SMALL = 200  # JSON shorter than this stays text: compressing it saves nothing

_compressor = zstandard.ZstdCompressor(level=_LEVEL)
_decompressor = zstandard.ZstdDecompressor()


def _shuffle(a: np.ndarray) -> bytes:
    """The byte planes of a 4-byte little-endian array, one after the other."""
    return np.ascontiguousarray(a.view(np.uint8).reshape(-1, 4).T).tobytes()


def _unshuffle(raw: bytes, dtype: str) -> np.ndarray:
    planes = np.frombuffer(raw, dtype=np.uint8).reshape(4, -1)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(-1)


def _runs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, lengths) of the runs of equal values in ``a``."""
    if a.size == 0:
        return np.zeros(0, dtype=a.dtype), np.zeros(0, dtype="<u4")
    starts = np.concatenate(([0], np.flatnonzero(a[1:] != a[:-1]) + 1))
    lengths = np.diff(np.concatenate((starts, [a.size])))
    return a[starts], lengths.astype("<u4")


def _expand(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return np.repeat(values, lengths.astype(np.int64))


def pack_tokens(t: TokenArrays) -> bytes:
    """The arrays as one compressed blob."""
    n = len(t)
    mask_v, mask_l = _runs(t.loss_mask)
    ver_v, ver_l = _runs(t.versions.astype("<i4"))
    lp = t.logprobs.astype("<f4")
    nan = np.isnan(lp)
    nan_v, nan_l = _runs(nan.astype(np.uint8))
    sections = [
        _shuffle(t.ids.astype("<i4")),
        mask_v.astype(np.uint8).tobytes(), mask_l.tobytes(),
        ver_v.astype("<i4").tobytes(), ver_l.tobytes(),
        nan_v.tobytes(), nan_l.tobytes(),
        _shuffle(lp[~nan]),
    ]
    version, flags = VERSION, 0
    if t.has_alternatives:
        version, flags = VERSION_ALTERNATIVES, int(t.entropy_estimated) | (t.top_k << 1)
        ent = t.entropy.astype("<f4")
        ent_nan = np.isnan(ent)
        ent_v, ent_l = _runs(ent_nan.astype(np.uint8))
        has = (t.top_ids[:, 0] >= 0) if t.top_k else np.zeros(n, dtype=bool)
        has_v, has_l = _runs(has.astype(np.uint8))
        sections += [
            ent_v.tobytes(), ent_l.tobytes(), _shuffle(ent[~ent_nan]),
            has_v.tobytes(), has_l.tobytes(),
            _shuffle(t.top_ids[has].astype("<i4").reshape(-1)), _shuffle(t.top_logprobs[has].astype("<f4").reshape(-1)),
        ]
    lengths = struct.pack(f"<{len(sections)}I", *(len(s) for s in sections))
    body = _compressor.compress(lengths + b"".join(sections))
    return _HEADER.pack(MAGIC, version, flags, n, len(sections)) + body


def unpack_tokens(blob: bytes) -> TokenArrays:
    """The arrays back from ``pack_tokens``; a StoreError for a blob that is not one."""
    if len(blob) < _HEADER.size:
        raise StoreError("packed token arrays are cut short")
    magic, version, flags, n, count = _HEADER.unpack_from(blob)
    if magic != MAGIC or (version, count) not in ((VERSION, 8), (VERSION_ALTERNATIVES, 15)):
        raise StoreError(f"packed token arrays in an unknown format ({magic!r}, version {version})")
    try:
        raw = _decompressor.decompress(blob[_HEADER.size:])
    except zstandard.ZstdError as e:
        raise StoreError(f"packed token arrays cannot be decompressed: {e}") from None
    sizes = struct.unpack_from(f"<{count}I", raw)
    pos = 4 * count
    parts = []
    for size in sizes:
        parts.append(raw[pos:pos + size])
        pos += size
    ids = _unshuffle(parts[0], "<i4")
    mask = _expand(np.frombuffer(parts[1], dtype=np.uint8), np.frombuffer(parts[2], dtype="<u4"))
    versions = _expand(np.frombuffer(parts[3], dtype="<i4"), np.frombuffer(parts[4], dtype="<u4"))
    nan = _expand(np.frombuffer(parts[5], dtype=np.uint8), np.frombuffer(parts[6], dtype="<u4")).astype(bool)
    logprobs = np.full(n, np.nan, dtype="<f4")
    logprobs[~nan] = _unshuffle(parts[7], "<f4")
    if not (ids.size == mask.size == versions.size == nan.size == n):
        raise StoreError("packed token arrays disagree in length")
    if version == VERSION:
        return TokenArrays(ids, mask, logprobs, versions)
    k = flags >> 1
    ent_nan = _expand(np.frombuffer(parts[8], dtype=np.uint8), np.frombuffer(parts[9], dtype="<u4")).astype(bool)
    has = _expand(np.frombuffer(parts[11], dtype=np.uint8), np.frombuffer(parts[12], dtype="<u4")).astype(bool)
    if not (ent_nan.size == has.size == n):
        raise StoreError("packed token arrays disagree in length")
    entropy = np.full(n, np.nan, dtype="<f4")
    entropy[~ent_nan] = _unshuffle(parts[10], "<f4")
    top_ids = np.full((n, k), -1, dtype="<i4")
    top_lps = np.full((n, k), np.nan, dtype="<f4")
    top_ids[has] = _unshuffle(parts[13], "<i4").reshape(-1, k) if k else top_ids[has]
    top_lps[has] = _unshuffle(parts[14], "<f4").reshape(-1, k) if k else top_lps[has]
    return TokenArrays(ids, mask, logprobs, versions, entropy, top_ids, top_lps, bool(flags & 1))


# -- turns -----------------------------------------------------------------------


def _assistant_start(turn: Turn) -> int | None:
    return next((seg.start for seg in turn.segments if seg.kind == "assistant"), None)


def _orjson(d: Any) -> bytes | None:
    """orjson's JSON of ``d`` where it reads back as ``d`` (None where it would not: a NaN or infinity, which orjson
    writes null; a tuple, a date or anything else ``json`` writes otherwise or refuses; what orjson cannot write)."""
    try:
        raw = orjson.dumps(d)
    except orjson.JSONEncodeError:
        return None
    return raw if orjson.loads(raw) == d else None


def pack_json(d: Any) -> str | bytes:
    """A JSON value as stored: text when short, zstd-compressed JSON when it saves space. Written by orjson where it
    reads back as the value (``_orjson``; about a third of the time of ``json``), else by ``json`` as before."""
    raw = _orjson(d)
    if raw is None:
        text = json.dumps(d, separators=(",", ":"), ensure_ascii=False)
        return text if len(text) < _SMALL else _compressor.compress(text.encode("utf-8"))
    return raw.decode("utf-8") if len(raw) < _SMALL else _compressor.compress(raw)


def json_bytes(data: str | bytes) -> bytes:
    """A stored JSON value's text, decompressed but not parsed."""
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    try:
        return bytes(_decompressor.decompress(data))
    except zstandard.ZstdError as e:
        raise StoreError(f"stored JSON cannot be decompressed: {e}") from None


def unpack_json(data: str | bytes) -> Any:
    """A stored JSON value (text, or compressed)."""
    if isinstance(data, str):
        return jsonbounds.parse(data)
    try:
        return jsonbounds.parse(_decompressor.decompress(data))
    except zstandard.ZstdError as e:
        raise StoreError(f"stored JSON cannot be decompressed: {e}") from None


def pack_turn(turn: Turn, tokens: TokenArrays | None, previous: Turn | None) -> str | bytes:
    """A turn in its compact stored form; ``tokens``: the episode's final arrays, which the generation may
    refer to (None: it may not); ``previous``: the turn before it (index - 1), whose prompt and generated text
    the prompt may refer to (None: it may not)."""
    gen = turn.generation
    refs: dict[str, Any] = {}
    if tokens is not None and gen is not None and gen.token_ids:
        start = _assistant_start(turn)
        n = len(gen.token_ids)
        if start is not None and start + n <= len(tokens) and \
                np.array_equal(tokens.ids[start:start + n], np.asarray(gen.token_ids, dtype=np.int64)):
            refs["token_ids"] = {"$span": [start, start + n]}
            if gen.logprobs is not None and len(gen.logprobs) == n and np.array_equal(
                    np.asarray(gen.logprobs, dtype=np.float64), tokens.logprobs[start:start + n].astype(np.float64),
                    equal_nan=True):
                refs["logprobs"] = {"$span": [start, start + n]}
            if _same_alternatives(gen, tokens, start, n):
                refs["top_ids"] = refs["top_logprobs"] = {"$span": [start, start + n]}
            if gen.entropy is not None and len(gen.entropy) == n and np.array_equal(
                    np.asarray(gen.entropy, dtype=np.float32), tokens.entropy[start:start + n], equal_nan=True):
                refs["entropy"] = {"$span": [start, start + n]}
    if refs and gen is not None:
        # Leave the lists out before they are built: they are what the refs stand for.
        turn = replace(turn, generation=replace(
            gen, token_ids=(), logprobs=None if "logprobs" in refs else gen.logprobs,
            top_ids=() if "top_ids" in refs else gen.top_ids, top_logprobs=() if "top_ids" in refs else gen.top_logprobs,
            entropy=None if "entropy" in refs else gen.entropy))
    d = turn.to_dict()
    if refs:
        d["generation"].update(refs)
    if previous is not None and turn.prompt_text is not None:
        d["prompt_text"] = prompts.compact(turn.prompt_text, _source(previous.prompt_text, previous.generation))
    return pack_json(d)


def _same_alternatives(gen: Any, tokens: TokenArrays, start: int, n: int) -> bool:
    """Whether the generation's top K are the arrays' at ``[start, start + n)``."""
    if len(gen.top_ids) != n or not n:
        return False
    ids, lps = rows(tokens.top_ids[start:start + n], tokens.top_logprobs[start:start + n])
    if [list(r) for r in gen.top_ids] != ids:
        return False
    return all(np.array_equal(np.asarray(r, dtype=np.float32), np.asarray([math.nan if x is None else x for x in w],
                                                                           dtype=np.float32), equal_nan=True)
               for r, w in zip(gen.top_logprobs, lps))




def _source(prompt: Any, gen: Any) -> str | None:
    text = gen.get("text") if isinstance(gen, dict) else getattr(gen, "text", None)
    return prompts.base(prompt if isinstance(prompt, str) else None, text if isinstance(text, str) else None)


def unpack_turn(data: str | bytes, tokens: TokenArrays, previous: dict[str, Any] | None) -> dict[str, Any]:
    """A stored turn row as the turn's ``to_dict()``: JSON text as older versions wrote it, or the
    compact form (``previous``: the turn before it, index - 1, read first; None when there is none)."""
    d = unpack_json(data)
    if not isinstance(d, dict):
        raise StoreError("a stored turn is not a JSON object")
    gen = d.get("generation")
    if gen:
        for key in ("token_ids", "logprobs", "top_ids", "top_logprobs", "entropy"):
            ref = gen.get(key)
            if isinstance(ref, dict) and "$span" in ref:
                a, b = ref["$span"]
                if not 0 <= a <= b <= len(tokens):
                    raise StoreError(f"a stored turn refers to tokens {a}:{b} of an episode of {len(tokens)}")
                if key == "token_ids":
                    gen[key] = tokens.ids[a:b].tolist()
                elif key == "top_ids":
                    gen["top_ids"], gen["top_logprobs"] = rows(tokens.top_ids[a:b], tokens.top_logprobs[a:b])
                elif key == "top_logprobs":
                    continue  # with top_ids
                else:
                    values = (tokens.logprobs if key == "logprobs" else tokens.entropy)[a:b].tolist()
                    gen[key] = [None if math.isnan(x) else x for x in values]
    prompt = d.get("prompt_text")
    if isinstance(prompt, dict):
        before = previous.get("prompt_text") if previous is not None else None
        if "$extends" in prompt:  # the form rows of database schema 8 and before hold
            if not isinstance(before, str) or len(before) < int(prompt["$extends"]):
                raise StoreError("a stored turn's prompt extends a previous prompt that is not there")
            d["prompt_text"] = before[: int(prompt["$extends"])] + str(prompt.get("rest", ""))
        else:
            try:
                d["prompt_text"] = prompts.restore(
                    prompt, _source(before, previous.get("generation") if previous is not None else None))
            except FormatError as e:
                raise StoreError(f"a stored turn's prompt cannot be restored: {e}") from None
    return d
