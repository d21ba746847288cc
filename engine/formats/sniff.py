"""What a file given as JSON lines is, from its first bytes: JSON text in UTF-8 (past a byte order mark), or a
known binary format, UTF-16 or UTF-32, binary data, one JSON document spread over lines or text of no JSON objects
(a CSV), each refused whole with a sentence saying what it is; and of a file read as one JSON document (tau-bench's
results), whether it is JSON lines or binary instead."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from ..errors import FormatError
from ..records import jsonbounds

_MAGIC = ((b"PAR1", "a Parquet file: one Rollscope wrote imports with --format parquet"),
          (b"SQLite format 3\x00", "a SQLite database: a Rollscope database is opened with --db, not imported"),
          (b"PK\x03\x04", "a zip archive (as a torch .pt file is: a slime dump imports with --format slime)"),
          (b"\x1f\x8b", "gzip-compressed: gunzip it first"))


def start_of_text(f: IO[bytes], path: Path, end: int | None = None) -> int:
    """Where the JSON text of ``f`` (open at its start) begins: past a UTF-8 byte order mark, which ``f`` is left at
    (0 or 3). A FormatError when its first bytes (no further than ``end``) say it is not text (``not_text``)."""
    head = f.read(4096 if end is None else min(4096, end))
    not_text(head, path)
    skip = utf8_bom(head)
    f.seek(skip)
    return skip


def utf8_bom(data: bytes) -> int:
    """How long the UTF-8 byte order mark ``data`` starts with is: 3, or 0 when it has none."""
    return 3 if data.startswith(b"\xef\xbb\xbf") else 0


_WIDE_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"), (b"\xff\xfe", "UTF-16"),
              (b"\xfe\xff", "UTF-16"))
# Without a byte order mark, where the zero bytes fall among the first four says the encoding of a text whose first
# character is ASCII: x000 is UTF-32LE, 000x UTF-32BE, x0x0 UTF-16LE, 0x0x UTF-16BE (the index: that character's).
_WIDE_ZEROS: dict[tuple[int, ...], tuple[str, int]] = {
    (0, 1, 1, 1): ("UTF-32LE", 0), (1, 1, 1, 0): ("UTF-32BE", 3), (0, 1, 0, 1): ("UTF-16LE", 0),
    (1, 0, 1, 0): ("UTF-16BE", 1)}
_OPENS = frozenset(b'{["\t\n\r ')
"""What a JSON text's first character can be, in a JSONL file."""
_HIGH = bytes(range(0x80, 0x100))
"""Bytes past ASCII: a line that opens a record may follow them (a byte order mark, bytes not UTF-8) with ``{``."""


def wide_encoding(head: bytes) -> str | None:
    """The UTF-16 or UTF-32 encoding the first bytes of a JSON text are in, as iconv names it; None when they are in
    neither (UTF-8, or not text). A byte order mark counts when nothing follows it or a NUL is in the two bytes
    after it (JSON's first character is ASCII, which these encodings write with NULs): else the bytes are UTF-8
    that is wrong at its start."""
    for bom, name in _WIDE_BOMS:
        if head.startswith(bom) and (len(head) == len(bom) or b"\x00" in head[len(bom):len(bom) + 2]):
            return name
    found = _WIDE_ZEROS.get(tuple(int(b == 0) for b in head[:4]))
    return found[0] if found is not None and head[found[1]] in _OPENS else None


def not_text(head: bytes, path: Path) -> None:
    """A FormatError when the first bytes of ``path`` (``head``) say it is not JSON text in UTF-8: a known binary
    format; UTF-16 or UTF-32; a NUL byte in the first line, which no JSON text holds; or a NUL byte after a line that
    does not open a record (``{``, past any bytes beyond ASCII): a binary format whose first bytes hold a newline
    (an old torch pickle, a PNG, a safetensors file). A NUL after lines that each open a record is that line's
    error alone: a text file whose end was zeroed in a crash still reads up to it."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            raise FormatError(f"not JSONL but {what}", str(path))
    wide = wide_encoding(head)
    if wide is not None:
        raise FormatError(f"not UTF-8 but {wide} text: convert it to UTF-8 (iconv -f {wide} -t UTF-8 FILE > "
                          "out.jsonl)", str(path))
    nul = head.find(b"\x00")
    if nul < 0:
        not_records(head, path)
        return
    lines = head[:nul].split(b"\n")
    if len(lines) == 1 or any(line.strip() and not line.strip().lstrip(_HIGH).startswith(b"{") for line in lines):
        raise FormatError(f"not JSONL text: binary data (a NUL byte at byte {nul})", str(path))


_SAMPLE = 20
"""The most lines of a file's first bytes ``not_records`` looks at."""


def _record_like(line: bytes) -> bool:
    # A line that holds one JSON object (past any bytes beyond ASCII, each such line's own error).
    return line.lstrip(_HIGH).startswith(b"{") and line.endswith(b"}")


def not_records(head: bytes, path: Path) -> None:
    """A FormatError when the first bytes of a UTF-8 text (``head``) say it holds no JSON lines at all: one JSON
    document spread over lines (its first line a lone ``[`` or ``{``: no record is), or two or more lines of which
    none holds an object (a CSV). Only lines ended within ``head`` are looked at, the first ``_SAMPLE``. A file with
    some bad lines among records is read, each bad line its own error."""
    text = head[utf8_bom(head):]
    lines = [s for line in text.split(b"\n")[:-1] if (s := line.strip())][:_SAMPLE]
    if not lines:
        return
    if lines[0] in (b"[", b"{", b"[{"):
        how = ("an array", "jq -c '.[]' FILE > out.jsonl writes its items so; a tau-bench results file imports "
               "with --format taubench") if lines[0].startswith(b"[") else ("an object", "jq -c . FILE > out.jsonl "
                                                                             "writes it so")
        raise FormatError(f"not JSON lines but one JSON document, {how[0]}, spread over lines: JSONL holds one "
                          f"record a line ({how[1]})", str(path))
    if len(lines) >= 2 and not any(map(_record_like, lines)):
        shown = lines[0].decode("utf-8", "replace")
        raise FormatError(f"not JSON lines: none of its first {len(lines)} lines holds a JSON object (line 1 reads "
                          f"{shown[:60]!r}{'...' if len(shown) > 60 else ''}): a CSV or other text?", str(path))


def not_torch_save(head: bytes, path: Path) -> None:
    """A FormatError when the first bytes of ``path`` (``head``) say it is not a ``torch.save`` dump (a zip archive or
    a pickle) but a known other format: compressed, a Parquet file or a database, or JSON text (the JSONL formats).
    Anything else is left to the loader, which refuses what it cannot read safely."""
    for magic, what in _MAGIC:
        if head.startswith(magic) and magic != b"PK\x03\x04":
            raise FormatError(f"not a torch.save dump but {what}", str(path))
    text = head[utf8_bom(head):].lstrip()
    if text[:1] in (b"{", b"[") and b"\x00" not in head:
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.start < len(head) - 3:  # not a character cut at the end of the sample: not UTF-8 text
                return
        raise FormatError("not a torch.save dump but JSON text: a Rollscope export imports with --format jsonl, verl's "
                          "rows with --format verl, AReaL's with --format areal, OpenAI messages with --format "
                          "messages, tau-bench results with --format taubench", str(path))


def not_json_list(raw: bytes, path: Path, fmt: str, what: str) -> None:
    """A FormatError when a file ``fmt`` reads as one JSON document (``what``: what writes it) is not one: a known
    binary format, UTF-16 or UTF-32 text, or JSON lines (one record a line), whose first record says which
    ``--format`` reads it. Anything else is left to the JSON parser, which names its first error."""
    for magic, kind in _MAGIC:
        if raw.startswith(magic):
            raise FormatError(f"not {what} but {kind}", str(path))
    wide = wide_encoding(raw[:4096])
    if wide is not None:
        raise FormatError(f"not UTF-8 but {wide} text: convert it to UTF-8 (iconv -f {wide} -t UTF-8 FILE > "
                          "out.json)", str(path))
    text = raw[utf8_bom(raw):]
    first, _, rest = text.lstrip().partition(b"\n")
    if not (_record_like(first.strip()) and rest.strip()[:1] == b"{"):
        return
    try:
        keys = set(jsonbounds.loads(first.decode("utf-8", "replace"), limit=None))
    except (ValueError, TypeError):  # not JSON, or nested past what is read: the parser names it
        return
    shape = next(((reader, kind) for reader, kind, need in _SHAPES if need <= keys), None)
    said = (f"{shape[1]}" + (f": import them with --format {shape[0]}" if shape[0] else "") if shape is not None
            else f"--format {fmt} reads one JSON document, a list (jq -s . FILE > out.json writes the lines so)")
    raise FormatError(f"not {what} (one JSON document) but JSON lines, one record a line: {said}", str(path))


# The record shapes of the JSON-lines formats: (the format that reads it, what it is, the keys that say so). A record
# is taken for one when it holds all of its keys, the first shape that fits from the top.
_SHAPES: tuple[tuple[str | None, str, frozenset[str]], ...] = (
    ("jsonl", "Rollscope episode records", frozenset({"schema_version", "id", "turns", "tokens"})),
    (None, "an areal-realhf export (realhf's SequenceSample fields), which Rollscope writes for AReaL's RealHF "
           "trainer and does not read back: import the jsonl or areal export of the same episodes",
     frozenset({"packed_input_ids", "prompt_mask"})),
    ("verl", "verl AgentLoopOutput rows", frozenset({"prompt_ids", "response_ids"})),
    ("verl", "verl AgentLoopOutput rows", frozenset({"prompts", "responses"})),
    ("verl", "verl rollout_data_dir rows", frozenset({"input", "output"})),
    ("areal", "AReaL per-turn sequences", frozenset({"input_ids", "loss_mask", "episode_id", "turn"})),
    ("areal", "AReaL trajectory records", frozenset({"task_id", "sample_idx", "prompt", "completion"})),
    ("messages", "OpenAI messages records", frozenset({"messages"})),
)
# What a record must hold to be read as each format (one of the key sets).
_READS: dict[str, tuple[frozenset[str], ...]] = {
    "jsonl": (frozenset({"id", "turns", "tokens"}),),
    "verl": (frozenset({"prompt_ids", "response_ids"}), frozenset({"prompts", "responses"}),
             frozenset({"input", "output"})),
    "areal": (frozenset({"input_ids", "loss_mask"}), frozenset({"task_id", "sample_idx", "prompt", "completion"})),
    "messages": (frozenset({"messages"}),),
}


def other_format(record: object, fmt: str) -> str:
    """What a file's first record says when it is another format's, which ``fmt`` cannot read ("" when ``fmt`` can
    read it, or it is no shape known): what the records are, and the ``--format`` that reads them."""
    if not isinstance(record, dict) or fmt not in _READS:
        return ""
    keys = set(record)
    if any(need <= keys for need in _READS[fmt]):
        if fmt != "jsonl" and _SHAPES[0][2] <= keys:  # a Rollscope record holds "messages" too: read as messages it
            # would lose its token ids, mask, logprobs and findings
            return (f"not {fmt} records but {_SHAPES[0][1]}: import them with --format jsonl (read as {fmt} they "
                    "would keep their messages and lose their token ids, loss mask, logprobs and findings)")
        return ""
    for reader, what, need in _SHAPES:
        if need <= keys and reader != fmt:
            return f"not {fmt} records but {what}" + (f": import them with --format {reader}" if reader else "")
    return ""
