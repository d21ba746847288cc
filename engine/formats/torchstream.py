"""Reading a slime dump one sample at a time, so memory holds one sample, not the whole dump.

``torch.save({"rollout_id": ..., "samples": [dict, ...]})`` of plain Python values is a zip holding one
pickle (protocol 2) that builds the outer dict, then the list, then each sample dict in turn. Loaded
whole, 8,000 tokens of ids, mask and logprobs become about 75 bytes a token of Python objects: seven
times the file. Here the pickle is read in blocks and cut at the sample dicts' starts; each sample is
unpickled alone, by the same restricted unpickler as the whole-file path (no global, no storage: no
code from the file can run), with the pickle memo carried from one sample to the next, so a sample
that refers to a string an earlier one defined (a dict key, a prompt its group shares) gets it.

A sample starts where its dict does: ``EMPTY_DICT``, a memo put, ``MARK`` and its first key, which is
the first sample's first key (a memo get of it from the second sample on). The bytes there are
recognized, and the cut is confirmed by the piece unpickling to a dict holding ``tokens``; a piece that
does not (the pattern inside binary data) is joined with the next. The memo keeps every scalar the
header and the first sample defined, and the last ``WINDOW`` entries after that; containers (the token
lists) are dropped from it once their sample is built.

Anything this does not recognize (another protocol, another layout, a memo reference reaching further
back than the window) is reported as ``NotStreamable`` before or while reading, and the caller reads the
file whole instead, skipping the samples already read.

A sample whose pickle runs past ``max_record`` bytes is not held: the reader reads on, keeping a few bytes,
to the next sample's start, and yields a :class:`Skipped` in its place. The zip entry is checked against its
header before it inflates (``base.check_inflation``) and read no further than the header declares.
"""

from __future__ import annotations

import io
import pickle
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .base import NeedsTorch, PlainUnpickler
from .limits import MAX_RECORD_MB, check_inflation, open_entry

BLOCK = 1 << 20
WINDOW = 4096
MAX_JOIN = 64
_PUT = rb"(?:q.|r....)"
_HEADER = re.compile(rb"X\x07\x00\x00\x00samples" + _PUT + rb"\]" + _PUT + rb"\(", re.DOTALL)
_SCALARS = (str, int, float, bool, type(None))
SMALL = 64
HOT = 64  # samples an entry needed from further back stays in front of the next ones


def _short(value: Any) -> bool:
    return isinstance(value, _SCALARS) and (not isinstance(value, str) or len(value) <= SMALL)


def _keep(value: Any) -> bool:
    """Whether a memo entry is carried to later samples: scalars, and small containers (a prompt's message
    list that the samples of a group share), never the token lists."""
    if isinstance(value, _SCALARS):
        return True
    if isinstance(value, (list, tuple)):
        return len(value) <= SMALL and all(isinstance(v, _SCALARS) or isinstance(v, dict) and len(v) <= SMALL
                                           for v in value)
    if isinstance(value, dict):
        return len(value) <= SMALL and all(isinstance(v, _SCALARS) for v in value.values())
    return False


class NotStreamable(Exception):
    """The file is not a dump this reader can cut into samples (read it whole instead)."""


@dataclass(frozen=True)
class Skipped:
    """A sample read past, not held: its pickle is ``size`` bytes or more, over the record limit."""

    size: int


def _memo_ops(memo: dict[int, Any]) -> bytes:
    """Pickle opcodes that put each value of ``memo`` at its index (and leave the stack as it was).

    Setting ``Unpickler.memo`` from a dict loses the entries on some Pythons (3.11), so the memo a piece
    needs goes in front of it, as opcodes."""
    out = bytearray()
    for idx, value in memo.items():
        buf = io.BytesIO()
        p = pickle.Pickler(buf, protocol=2)
        p.fast = True  # no memo puts of its own, which would overwrite the file's
        p.dump(value)
        out += buf.getvalue()[2:-1]
        out += b"q" + bytes([idx]) if idx < 256 else b"r" + idx.to_bytes(4, "little")
        out += b"0"  # POP
    return bytes(out)


def _unpickle(data: bytes) -> tuple[Any, dict[int, Any]]:
    u = PlainUnpickler(io.BufferedReader(io.BytesIO(data)))  # buffered: the unpickler reads ahead, not per opcode
    try:
        obj = u.load()
    except NeedsTorch as e:
        raise NotStreamable(f"holds {e}") from None
    return obj, u.memo.copy()


@dataclass
class DumpStream:
    """An open dump: ``header`` (its top-level keys before ``samples``), then ``samples()``; ``tail`` (the keys
    after ``samples``) once they are read."""

    header: dict[str, Any]
    _f: IO[bytes]
    _zip: zipfile.ZipFile
    _prefix: bytes
    _buf: bytearray
    _memo: dict[int, Any]
    tail: dict[str, Any] = field(default_factory=dict)
    read: int = 0
    """Samples yielded so far."""
    _recent: dict[int, Any] = field(default_factory=dict)
    """Memo entries of the last ``WINDOW`` indices worth keeping (``_keep``)."""
    _short: dict[int, Any] = field(default_factory=dict)
    """Every short scalar any sample defined (statuses, labels, keys): small, and referred to for ever."""
    _hot: dict[int, tuple[Any, int]] = field(default_factory=dict)
    """Entries a recent sample needed from further back (a prompt a group shares), with the sample that did."""
    _top: int = 0
    _memo_ops: bytes = b""
    _hot_ops: bytes = b""
    max_record: int = int(MAX_RECORD_MB * 2**20)
    """The largest sample read, in bytes of pickle; a larger one is read past (``Skipped``)."""
    skipped: int = 0
    """Samples read past for their size."""
    _needle: bytes = b""

    def close(self) -> None:
        self._f.close()
        self._zip.close()

    def _more(self) -> bool:
        block = self._f.read(BLOCK)
        self._buf += block
        return bool(block)

    def samples(self) -> Iterator[Any]:
        """Each sample dict in order (a ``Skipped`` for one over the limit); ``NotStreamable`` if the rest cannot be
        cut (the caller reads it whole)."""
        try:
            yield from self._samples()
        finally:
            self.close()

    def _load(self, piece: bytes, head: bytes = b"\x80\x02") -> Any:
        """``head`` + ``piece`` unpickled with the memo it needs in front of the piece: what the header and the
        first sample defined, the short scalars and recently needed entries of other samples, and any
        entry it turns out to need from the last ``WINDOW``."""
        extra = b""
        for _ in range(MAX_JOIN):
            try:
                obj, defined = _unpickle(head + self._memo_ops + self._hot_ops + extra + piece)
            except pickle.UnpicklingError as e:
                m = re.match(r"Memo value not found at index (\d+)", str(e))
                if m is None:
                    raise
                idx = int(m.group(1))
                if idx in self._short:  # needed once, needed again (a status): from now on always there
                    self._memo_ops += _memo_ops({idx: self._short[idx]})
                elif idx in self._recent:
                    self._hot[idx] = (self._recent[idx], self.read)
                    extra += _memo_ops({idx: self._recent[idx]})
                else:
                    raise NotStreamable(f"a sample refers to memo entry {idx}, defined too far back") from None
                continue
            new = {i: v for i, v in defined.items() if i > self._top and _keep(v)}
            if new:
                self._recent.update(new)
                self._short.update((i, v) for i, v in new.items() if _short(v))
                self._top = max(self._top, *new)
                if len(self._recent) > 2 * WINDOW:
                    self._recent = {i: v for i, v in self._recent.items() if i > self._top - WINDOW}
            if extra or any(self.read - at > HOT for _, at in self._hot.values()):
                self._hot = {i: (v, at) for i, (v, at) in self._hot.items() if self.read - at <= HOT}
                self._hot_ops = _memo_ops({i: v for i, (v, _) in self._hot.items()})
            return obj
        raise NotStreamable("a sample refers to too many earlier memo entries")

    def _samples(self) -> Iterator[Any]:
        while len(self._buf) < 4096 and self._more():
            pass
        needle = self._needle = self._learn_start()
        pos, first = 0, True
        eof = False
        while True:
            sample = None
            at = pos
            for _ in range(MAX_JOIN):
                found = self._next_start(needle, at)
                if found < 0:
                    break
                at = found
                piece = bytes(self._buf[pos:at])
                if piece.endswith(b"e("):  # the list's APPENDS every 1,000 items, and its next MARK
                    piece = piece[:-2]
                try:
                    obj = self._load(piece + b".")
                except NotStreamable:
                    raise
                except Exception:  # noqa: BLE001 - a cut inside the sample: join with the next piece
                    continue
                if isinstance(obj, dict) and "tokens" in obj:
                    sample, pos = obj, at
                    break
            if sample is not None:
                if first:  # what the first sample defined (its keys above all) stays in the memo
                    self._memo = {**self._memo, **{i: v for i, v in self._recent.items() if _short(v)}}
                    self._memo_ops = _memo_ops(self._memo)
                    first = False
                self.read += 1
                yield sample
                if pos > BLOCK:
                    del self._buf[:pos]
                    pos = 0
                continue
            if len(self._buf) - pos > self.max_record:  # no sample ends within the limit: read past this one
                size, more = self._skip(pos)
                self.read += 1
                self.skipped += 1
                yield Skipped(size)
                if not more:
                    return  # the dump ends inside it: what followed the samples list is not read
                pos = 0
                continue
            if not eof:
                eof = not self._more()
                continue
            # The rest: the last samples and the end of the outer dict, read with the header in front.
            obj = self._load(bytes(self._buf[pos:]), self._prefix)
            if not isinstance(obj, dict) or not isinstance(obj.get("samples"), list):
                raise NotStreamable("the end of the dump is not the end of its samples list")
            self.tail = {k: v for k, v in obj.items() if k != "samples" and k not in self.header}
            for s in obj["samples"]:
                self.read += 1
                yield s
            return

    def _skip(self, pos: int) -> tuple[int, bool]:
        """Read past the sample starting at ``pos``, holding a few bytes at a time: (its size, whether another
        sample follows, the buffer then starting with it)."""
        del self._buf[:pos]
        size = 0
        after = 0  # not the skipped sample's own start
        while True:
            found = self._next_start(self._needle, after)
            if found >= 0:
                del self._buf[:found]
                return size + found, True
            keep = 16  # a start cut by the block's end is found once the next block is read
            if len(self._buf) > keep:
                size += len(self._buf) - keep
                del self._buf[: len(self._buf) - keep]
                after = -1
            if not self._more():
                size += len(self._buf)
                self._buf.clear()
                return size, False

    def _next_start(self, needle: bytes, after: int) -> int:
        """The first sample start after ``after`` (-1: none in the buffer): ``}``, a memo put, then ``needle``
        (``(`` and the first key's memo get)."""
        buf = self._buf
        k = after + 3
        while True:
            k = buf.find(needle, k + 1)
            if k < 0:
                return -1
            if k - 3 > after and buf[k - 3] == 0x7D and buf[k - 2] == 0x71:  # } q i
                return k - 3
            if k - 6 > after and buf[k - 6] == 0x7D and buf[k - 5] == 0x72:  # } r iiii
                return k - 6

    def _learn_start(self) -> bytes:
        """What follows a sample dict's memo put (its MARK and first key's memo get), from the first sample."""
        head = re.match(rb"\}" + _PUT + rb"\(X(....)", bytes(self._buf[:16]), re.DOTALL)
        if head is None:
            raise NotStreamable("the samples are not dicts of several keys")
        key_end = head.end() + int.from_bytes(head.group(1), "little")
        put = re.match(rb"q(.)|r(....)", bytes(self._buf[key_end : key_end + 5]), re.DOTALL)
        if put is None:
            raise NotStreamable("the first key is not memoized")
        idx = put.group(1)[0] if put.group(1) is not None else int.from_bytes(put.group(2), "little")
        get = b"h" + bytes([idx]) if idx < 256 else b"j" + idx.to_bytes(4, "little")
        return b"(" + get


def open_dump(path: Path, max_record: int = int(MAX_RECORD_MB * 2**20)) -> DumpStream:
    """The dump at ``path`` ready to be read sample by sample; ``NotStreamable`` when it is not of that shape, a
    ``FormatError`` when an entry would inflate past what is allowed (``check_inflation``)."""
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise NotStreamable(str(e)) from None
    f: IO[bytes] | None = None
    try:
        check_inflation(z, path, max_record)
        names = [n for n in z.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(names) != 1 or any("/data/" in n for n in z.namelist()):
            raise NotStreamable("holds tensor storages")
        f = open_entry(z, names[0], path, buffered=False)
        try:
            first = f.read(BLOCK)
        except (zipfile.BadZipFile, OSError, EOFError) as e:  # damaged (a checksum that does not match)
            raise NotStreamable(str(e)) from None
        m = _HEADER.search(first, 0, 4096)
        if not first.startswith(b"\x80\x02") or m is None:
            raise NotStreamable("not a protocol-2 pickle of a dict with a samples list")
        prefix = first[: m.end()]
        header, memo = _outer(prefix)
        memo = {i: v for i, v in memo.items() if isinstance(v, _SCALARS)}
        return DumpStream(header, f, z, prefix, bytearray(first[m.end() :]), memo, _top=max(memo, default=0),
                          _memo_ops=_memo_ops(memo), max_record=max_record)
    except BaseException:
        if f is not None:
            f.close()
        z.close()
        raise


def _outer(prefix: bytes) -> tuple[dict[str, Any], dict[int, Any]]:
    """The outer dict's keys before ``samples`` (the pickle up to the samples list, closed), and its memo."""
    for close in (b"eu.", b"es."):  # the outer dict's items set together, or ``samples`` alone
        try:
            header, memo = _unpickle(prefix + close)
        except NotStreamable:
            raise
        except Exception:  # noqa: BLE001 - the other way the outer dict can end
            continue
        if not isinstance(header, dict):
            raise NotStreamable("not a dict at the top")
        return {k: v for k, v in header.items() if k != "samples"}, memo
    raise NotStreamable("the outer dict could not be read")
