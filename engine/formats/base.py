"""What every importer and exporter shares.

Importers are generators: they yield one :class:`Episode` per good record
and hand every malformed record to :meth:`ImportContext.skip` as a
:class:`FormatError` naming the file, the position and the field, so one bad
record never stops an import. Only a file that cannot be read at all (or
must not be, see :func:`safe_torch_load`) raises.

Episodes built from token-level dumps get their turns and segments from the
loss mask (:func:`mask_structure`): every maximal run of mask 1 after the
prompt is one turn with a :class:`Generation` of those ids and logprobs, so
the token view and the checks work on imported data as on live data.
"""

from __future__ import annotations

import array
import hashlib
import json
import math
import os
import pickle
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError
from ..presets import LoopConfig
from ..records import jsonbounds, numbers, textsafe
from ..records.episode import Episode, Finding, Severity
from ..records.reading import json_type
from ..tokens.tokenizer import Tokenizer
from .limits import MAX_RECORD_MB, bounded_lines, check_inflation, open_entry, over_limit
from .sniff import other_format, start_of_text


class UnsafeFileError(FormatError):
    """A file that would run code if loaded: always refused, never skipped past."""


@dataclass(frozen=True)
class LineRange:
    """Part of a JSONL file: the lines from byte ``start`` (line number ``first_line``, 1-based) up to byte ``end``."""

    start: int = 0
    first_line: int = 1
    end: int | None = None


@dataclass
class ImportContext:
    """State one import shares with its reader: tokenizer, errors, notes, progress."""

    fmt: str
    tokenizer: Tokenizer | None = None
    tokenizer_name: str = ""
    errors: list[FormatError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    on_progress: Callable[[int], None] | None = None
    on_total: Callable[[int], None] | None = None
    env: str = ""
    """The env the records ran in, when the format does not say (``import --env``)."""
    replaced: dict[str, int] = field(default_factory=dict)
    """Characters UTF-8 cannot hold (lone surrogates) replaced per record, by position."""
    lines: LineRange | None = None
    """Only these lines of a JSONL file (``watch`` reading a file still being written)."""
    max_record: int = int(MAX_RECORD_MB * 2**20)
    """The largest record read, in bytes (``--max-record-mb``); a larger one is skipped and named."""
    self_described: bool = False
    """Set by a reader whose records named their own tokenizer (no ``--tokenizer`` needed for them)."""
    loop: LoopConfig | None = None
    """The loop's knobs the records ran with (``import --set`` / ``--config``), for records that do not say."""
    known: Callable[[str], bool] | None = None
    """Whether the database holds an episode of this id (a reader whose ids changed looks its old ids up)."""
    occurrences: dict[tuple[str, str], int] = field(default_factory=dict)
    """How many records of each content (a file's name, ``stable_id`` of the record) this import read so far:
    identical records are distinct samples, numbered by their order of appearance in their file, not their line."""
    at: str = ""
    """Where the record read last is (a JSONL file's ``path:line``): what the import names a record it cannot store
    by, when the episode's own source names another file (a Rollscope record keeps where it first came from)."""
    named: dict[str, tuple[Tokenizer | None, str]] = field(default_factory=dict)  # ``named_tokenizer``'s, by name
    reward_key: str = ""
    """Which score of a reward model's dict is the reward (``import --reward-key``; ``reward_value``)."""

    def reward(self, value: Any, where: str, name: str = "reward", key: str = "") -> float:
        """A record's reward (``reward_value`` with ``--reward-key``, else ``key``: the one the record names); one
        that holds none (null: a sample never scored) reads as 0.0, and the import says so."""
        if value is None:
            self.note(f"some records hold no {name} (null: a sample never scored): each reads as 0.0")
        return reward_value(value, where, name, self.reward_key or key)

    def skip(self, error: FormatError) -> None:
        """Record a malformed record; the reader goes on with the next one."""
        self.errors.append(error)
        if self.on_progress is not None:
            self.on_progress(1)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def named_tokenizer(self, name: Any) -> tuple[Tokenizer | None, str]:
        """The tokenizer (and its name) to read a record with: ``--tokenizer``'s, else the one the record names
        (Rollscope's exports of trainer formats write it beside the trainer's fields), loaded as ``check`` loads an
        episode's (a hub id from the local cache alone), once a name; (None, "") where neither is to be had."""
        if self.tokenizer is not None or not isinstance(name, str) or not name.strip():
            return self.tokenizer, self.tokenizer_name
        if name not in self.named:
            from ..backends.tokenizers import tokenizer_key, try_tokenizer

            tok, why = try_tokenizer(tokenizer_key(name))
            self.named[name] = (tok, name if tok is not None else "")
            self.self_described |= tok is not None
            self.note(f"read with the tokenizer the records name, {name} (--tokenizer reads them with another)"
                      if tok is not None else f"the records name the tokenizer {name!r}, which could not be loaded "
                      f"({why}): --tokenizer gives one to decode their ids and run the token-level checks")
        return self.named[name]

    def expect(self, n: int) -> None:
        """Tell the progress bar that ``n`` more records are coming."""
        if self.on_total is not None:
            self.on_total(n)

    def opened(self, path: Path) -> None:
        self.files.append(str(path))

    def mark_replaced(self, ep: Episode, where: str) -> Episode:
        """``ep`` with a ``text_replaced`` finding when its record held text UTF-8 cannot hold."""
        return mark_replaced(ep, where, self.replaced.pop(where, 0))


def mark_replaced(ep: Episode, where: str, n: int) -> Episode:
    """``ep`` with a ``text_replaced`` finding when its record at ``where`` held ``n`` characters UTF-8 cannot hold."""
    if not n:
        return ep
    found = Finding("text_replaced", Severity.WARNING,
                    f"the record at {where} held {n} character{'s' if n != 1 else ''} UTF-8 cannot hold "
                    "(lone surrogates): replaced with U+FFFD", evidence={"where": where, "replaced": n})
    return ep.evolve(findings=(*ep.findings, found))


def stable_id(fmt: str, *parts: Any, tokens: Any = None) -> str:
    """A deterministic episode id: the same record imported twice gets the same id."""
    h = hashlib.sha256(fmt.encode())
    for p in parts:
        h.update(b"\x1f")
        h.update(json.dumps(p, sort_keys=True, default=str, ensure_ascii=False).encode())
    if tokens is not None:
        h.update(b"\x1e")
        h.update(np.ascontiguousarray(tokens, dtype="<i4").tobytes())
    return h.hexdigest()[:16]


def discover(path: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files an import reads: the file itself, or every matching file under a folder."""
    if path.is_file():
        return [path]
    found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    if not found:
        raise FormatError(f"no {' or '.join(suffixes)} files in this folder", str(path))
    return found


def raw_lines(path: Path, ctx: ImportContext) -> Iterator[tuple[str, bytes | int]]:
    """(position, line) for every line of a JSONL file in ``ctx.lines`` (all by default): its bytes, or its length
    when it is over ``ctx.max_record`` (not read)."""
    ctx.opened(path)
    try:
        f = path.open("rb")
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror}", str(path)) from None
    part = ctx.lines or LineRange()
    pos = part.start
    with f:
        if not part.start:
            pos = start_of_text(f, path, part.end)
        else:
            f.seek(part.start)
        for lineno, raw in enumerate(bounded_lines(f, ctx.max_record), part.first_line):
            if part.end is not None and pos >= part.end:
                break
            pos += raw if isinstance(raw, int) else len(raw)
            yield f"{path}:{lineno}", raw


def first_record_is_ours(record: object, path: Path, fmt: str) -> None:
    """A FormatError for the whole file when its first record is another format's, which ``fmt`` cannot read
    (``sniff.other_format``): one sentence saying what it is and which format reads it, not an error a line."""
    if said := other_format(record, fmt):
        raise FormatError(said, str(path))


def json_lines(path: Path, ctx: ImportContext) -> Iterator[tuple[str, dict[str, Any]]]:
    """(position, object) for every non-blank line; bad lines, and lines over ``ctx.max_record``, go to ``ctx.skip``.
    A file whose first record is another format's is refused whole (``first_record_is_ours``)."""
    first = True
    for where, raw in raw_lines(path, ctx):
        if isinstance(raw, int):
            ctx.skip(over_limit(raw, ctx.max_record, "the line", where))
            continue
        try:
            obj, n = json_object(raw, where)
        except FormatError as e:
            ctx.skip(e)
            continue
        if obj is None:
            continue
        if first:
            first_record_is_ours(obj, path, ctx.fmt)
            first = False
        if n:
            ctx.replaced[where] = n
        ctx.at = where
        yield where, obj


def json_object(raw: bytes, where: str) -> tuple[dict[str, Any] | None, int]:
    """One line of a JSONL file: (its object, or None for a blank line; characters UTF-8 cannot hold, replaced).

    Bytes, decoded per line: a file cut mid-character loses one line, not the read. A line that is not
    UTF-8, not JSON, nested past what the reader can follow or not an object is a FormatError.
    """
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"not UTF-8 text (byte {e.start})", where) from None
    if not line.strip():
        return None, 0
    try:
        obj = jsonbounds.loads(line.rstrip("\r\n"), limit=None)  # an error's column counts on its line, not the next
    except ValueError as e:
        cut = "" if raw.endswith(b"\n") or not jsonbounds.ends_early(e, line) else (
            ": the file's last line, with no newline after it, so cut off (a file still being written, or copied "
            "short?)")
        raise FormatError(f"not valid JSON ({jsonbounds.describe(e)}){cut}", where) from None
    if not isinstance(obj, dict):
        raise FormatError(f"expected a JSON object, got {json_type(obj)}", where)
    if textsafe.may_hold_surrogates(raw):
        obj, n = textsafe.clean_value(obj)
        return obj, n
    return obj, 0


# -- field checks ---------------------------------------------------------------


def _array(value: Any, where: str, name: str) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor from a weights_only load
        value = value.detach().cpu().numpy()
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise FormatError(f"must be a list, got {json_type(value)}", where, name)
    if len(value) == 0:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        raise FormatError("must be a flat list of numbers", where, name) from None
    if arr.ndim != 1:
        raise FormatError("must be a flat list of numbers", where, name)
    return arr


def _fast(value: Any, code: str, first: tuple[type, ...]) -> np.ndarray | None:
    """A list of plain numbers as an array at C speed (``array.array``); None when it holds anything else
    (the slow path then says what is wrong)."""
    if type(value) is not list or not value or type(value[0]) not in first:
        return None
    try:
        return np.frombuffer(array.array(code, value), dtype=np.int64 if code == "q" else np.float64)
    except (TypeError, OverflowError):
        return None


def int_array(value: Any, where: str, name: str, *, lo: int = 0) -> np.ndarray:
    """Integers in int32 range (token ids by default: ``lo=0``); floats, bools and strings are rejected."""
    arr = _fast(value, "q", (int,))
    if arr is not None and (arr.min() < lo or arr.max() > np.iinfo(np.int32).max):
        arr = None  # out of range: said by the slow path
    if arr is not None:
        return arr.astype(np.int32)
    arr = _array(value, where, name)
    what = "integer token ids" if lo == 0 else "integers"
    if arr.size and arr.dtype.kind not in "iu":
        raise FormatError(f"must be {what}, got {_kind_name(arr)}", where, name)
    if arr.size and (arr.min() < lo or arr.max() > np.iinfo(np.int32).max):
        raise FormatError(f"{what} must be between {lo} and 2**31-1", where, name)
    return arr.astype(np.int32)


def mask_array(value: Any, where: str, name: str) -> np.ndarray:
    arr = _fast(value, "q", (int,))
    if arr is not None and ((arr == 0) | (arr == 1)).all():
        return arr.astype(np.uint8)
    arr = _array(value, where, name)
    if arr.size and arr.dtype.kind not in "iub":
        raise FormatError(f"must be a list of 0 and 1, got {_kind_name(arr)}", where, name)
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise FormatError("must contain only 0 and 1", where, name)
    return arr.astype(np.uint8)


def float_array(value: Any, where: str, name: str) -> np.ndarray:
    """Logprobs: numbers (``None`` is unknown, NaN)."""
    arr = _fast(value, "d", (float, int))
    if arr is not None:
        return arr.astype(np.float32)
    arr = _array(value, where, name)
    if arr.dtype.kind == "O" and isinstance(value, (list, tuple)):  # None among numbers: unknown logprobs
        arr = _array([math.nan if x is None else x for x in value], where, name)
    if arr.size and arr.dtype.kind not in "iuf":
        raise FormatError(f"must be a list of numbers, got {_kind_name(arr)}", where, name)
    return arr.astype(np.float32)


def logprob_array(value: Any, where: str, name: str) -> tuple[np.ndarray, list[tuple[int, float]]]:
    """Logprobs as :func:`float_array` reads them, and (index, value) of each that was a number but not finite
    (NaN, infinite): those are NaN now, unknown, for ``marks.unknown_logprobs`` to mark. ``None`` is the
    ordinary unknown and is not listed."""
    arr = float_array(value, where, name)
    if not arr.size or np.isfinite(arr).all():
        return arr, []
    if isinstance(value, (list, tuple)):
        bad = numbers.nonfinite_positions(value, unknown="none")
    else:
        bad = np.flatnonzero(~np.isfinite(arr)).tolist()
    found = [(i, float(arr[i])) for i in bad]
    arr = arr.copy()
    arr[bad] = np.nan
    return arr, found


def _kind_name(arr: np.ndarray) -> str:
    return {"f": "floats", "b": "booleans", "U": "strings", "S": "bytes", "O": "mixed values"}.get(arr.dtype.kind, str(arr.dtype))


def int_field(value: Any, where: str, name: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise FormatError(f"must be an integer, got {value!r}"[:200], where, name)
    if not -(2 ** 63) <= int(value) < 2 ** 63:  # what SQLite and the trainers' arrays hold
        raise FormatError(f"must be an integer within 64 bits, got one of {len(str(abs(int(value)))):,} digits", where,
                          name)
    return int(value)


def reward_value(value: Any, where: str, name: str = "reward", key: str = "") -> float:
    """A record's reward as one float.

    Numbers are taken as they are; ``None`` (a sample never scored) is 0.0 (``ImportContext.reward`` says so); a
    dict (a reward model returning several scores) gives its ``key`` entry (``import --reward-key``, as slime's
    ``--reward-key`` picks one), else its ``score`` (verl's reward managers' key), else it is refused: which of
    several scores is the reward is not to be guessed. Anything else, and non-finite numbers, is a malformed record.
    """
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if value is None:
        return 0.0
    if isinstance(value, dict):
        keys = ", ".join(repr(str(k)) for k in list(value)[:8]) + (", ..." if len(value) > 8 else "")
        if key:
            if key not in value:
                raise FormatError(f"has no key {key!r} (--reward-key); its keys: {keys or 'none'}", where, name)
            return reward_value(value[key], where, f"{name}.{key}")
        if "score" in value:
            return reward_value(value["score"], where, f"{name}.score")
        raise FormatError(f"is a dict of scores ({keys or 'empty'}) without a 'score' key: --reward-key NAME (the "
                          "dashboard's watch: reward key) says which one is the reward, as slime's --reward-key does",
                          where, name)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        shown = "" if value is None or isinstance(value, (dict, list)) else f" {value!r:.40}"
        raise FormatError(f"must be a number, got {json_type(value)}{shown}", where, name)  # as a record's fields say
    if not numbers.is_finite(value):  # NaN, an infinity, or an integer past what a float holds
        raise FormatError(numbers.not_finite(value), where, name)
    return float(value)


def jsonable(value: Any) -> Any:
    """Plain JSON types for whatever a dump holds (tensors become lists)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def unstable_finding(turn: int, what: str, delta: Any, at_token: int) -> Finding:
    """The loop's own finding for a template that rewrote history while tokenizing."""
    return Finding("template_not_prefix_stable", Severity.ERROR,
                   f"rendering the {what} message of turn {turn} rewrote earlier text at character {delta.diff_at}; "
                   "the sliced delta (and its loss mask) is wrong", turn=turn, token_start=at_token,
                   evidence=delta.evidence())


# -- files ----------------------------------------------------------------------


@contextmanager
def atomic_path(out: Path) -> Iterator[Path]:
    """A ``.part`` path beside ``out`` that becomes ``out`` only if the block succeeds."""
    tmp = out.with_name(out.name + ".part")
    try:
        yield tmp
        os.replace(tmp, out)  # never leave a half-written file under the real name
    finally:
        tmp.unlink(missing_ok=True)


class NeedsTorch(Exception):
    """A pickle that holds more than plain values: a global (what it names) or a tensor storage."""


class PlainUnpickler(pickle.Unpickler):
    """Admits plain containers, strings and numbers only: every global or storage is refused.

    Pickles run code only through objects ``find_class`` returns (and
    persistent ids); with both refused nothing from the file can execute.
    """

    def find_class(self, module: str, name: str) -> Any:
        raise NeedsTorch(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise NeedsTorch("a tensor storage")


_NOTHING = object()
def _plain_load(path: Path) -> Any:
    """The object in a zip-format ``torch.save`` file if it is plain containers only, else ``_NOTHING``."""
    try:
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if len(names) != 1:
                return _NOTHING
            with open_entry(z, names[0], path) as f:  # buffered: the unpickler reads ahead, not per opcode
                return PlainUnpickler(f).load()
    except (NeedsTorch, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, OSError):
        return _NOTHING  # let torch's own loader accept it (tensors) or say what is wrong


def safe_torch_load(path: Path, max_record: int = int(MAX_RECORD_MB * 2**20)) -> Any:
    """Load a ``torch.save`` file without ever running code from it.

    Dumps of plain lists, dicts, strings and numbers (what slime writes)
    are read by a restricted C unpickler that refuses every global: as safe
    as ``weights_only`` and many times faster than torch's pure-Python
    one. Anything else goes to ``torch.load(weights_only=True)``, which
    admits tensors and refuses a pickle that needs arbitrary globals (a
    class, a function: the way a malicious file runs code) before any of it
    executes; zip-format files are memory-mapped so tensors are not copied
    into RAM. A zip entry that would inflate past ``MAX_INFLATION`` times its size (and ``max_record``) is
    refused before it is opened (``check_inflation``).
    """
    try:
        size = path.stat().st_size
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror}", str(path)) from None
    if size == 0:
        raise FormatError("empty file, not a torch.save dump", str(path))
    mmap = zipfile.is_zipfile(path)  # mmap needs the zip format; legacy pickles load without it
    if mmap:
        try:
            with zipfile.ZipFile(path) as z:
                check_inflation(z, path, max_record)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError):
            pass  # torch's loader says what is wrong
        obj = _plain_load(path)
        if obj is not _NOTHING:
            return obj
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about pickle protocols it still reads
            return torch.load(path, weights_only=True, mmap=mmap, map_location="cpu")
    except pickle.UnpicklingError as e:
        why = next((line.strip() for line in str(e).splitlines() if "Unsupported" in line or "GLOBAL" in line), "")
        raise UnsafeFileError(
            f"refusing to unpickle: loading it would need arbitrary code{f' ({why})' if why else ''}; "
            "only plain tensors/lists/dicts are accepted",
            str(path),
        ) from None
    except (RuntimeError, EOFError, KeyError, ValueError, OSError, IndexError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise FormatError(f"cannot read as a torch.save file (truncated or corrupt?): {first}", str(path)) from None


def read_jsonl_records(
    path: Path, ctx: ImportContext, to_episode: Callable[[dict[str, Any], str, Path, int, ImportContext], Episode]
) -> Iterator[Episode]:
    """Episodes from every ``.jsonl`` under ``path``, one record a line; bad records are skipped and reported."""
    for f in discover(path, (".jsonl",)):
        for where, d in json_lines(f, ctx):
            try:
                ep = to_episode(d, where, f, int(where.rsplit(":", 1)[1]), ctx)
            except FormatError as e:
                ctx.skip(e)
                continue
            yield ctx.mark_replaced(ep, where)
