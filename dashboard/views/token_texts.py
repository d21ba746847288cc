"""Each token's text as the token view shows it: decoded one id at a time, pieces of a character put together.

Byte-level BPE vocabularies (SmolLM2, Qwen, Llama 3) split a CJK character or an emoji across tokens; each
piece decodes alone to U+FFFD. ``decode_token_texts`` puts the character on the token that completes it, so
the texts join to the decoded sequence.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from typing import Any


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's reversible byte <-> printable character map, used by every
    # byte-level BPE vocabulary (SmolLM2, Qwen, Llama 3).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}
_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _byte_reader(tokenizer: Any) -> Any:
    """A function id -> raw bytes for byte-level or byte-fallback vocabularies, else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = repr(getattr(backend, "decoder", None))
    if "ByteLevel" in decoder:
        def read(i: int) -> bytes:
            piece = tokenizer.convert_ids_to_tokens(i)
            if all(c in _UNICODE_TO_BYTE for c in piece):
                return bytes(_UNICODE_TO_BYTE[c] for c in piece)
            return piece.encode("utf-8")
        return read
    if "ByteFallback" in decoder:
        def read_sp(i: int) -> bytes:
            piece = tokenizer.convert_ids_to_tokens(i)
            m = _SP_BYTE.match(piece)
            return bytes([int(m.group(1), 16)]) if m else piece.replace("▁", " ").encode("utf-8")
        return read_sp
    return None


def decode_token_texts(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """The text of each token, in order, such that the texts join to the decoded sequence.

    Each distinct id is decoded once. A token holding only part of a UTF-8
    character (byte-level BPE splits CJK and emoji across tokens) decodes
    alone to U+FFFD; for those, bytes are fed through an incremental UTF-8
    decoder so the character appears on the token that completes it and the
    earlier pieces get ``""`` (the token view marks them as partial).
    """
    ids = [int(i) for i in ids]
    uniq = sorted(set(ids))
    texts = tokenizer.batch_decode([[i] for i in uniq], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    plain = dict(zip(uniq, texts, strict=True))
    broken = {i for i, s in plain.items() if "\ufffd" in s}
    read = _byte_reader(tokenizer) if broken else None
    if read is None:
        return [plain[i] for i in ids]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out: list[str] = []
    dangling = False  # bytes of an unfinished character in the decoder
    for i in ids:
        if i in broken:
            out.append(decoder.decode(read(i)))
            dangling = bool(decoder.getstate()[0])
            continue
        if dangling:
            # Bytes left dangling by a cut-off character: show them as U+FFFD
            # on the token that left them, as a full decode would.
            tail = decoder.decode(b"", final=True)
            if out:
                out[-1] += tail
            decoder.reset()
            dangling = False
        out.append(plain[i])
    if dangling and out:
        out[-1] += decoder.decode(b"", final=True)
    return out


def special_token_ids(tokenizer: Any) -> set[int]:
    """Ids the tokenizer marks special (``<|im_start|>``, ``<|im_end|>``, ...)."""
    out = {int(i) for i in getattr(tokenizer, "all_special_ids", ()) if i is not None}
    for i, tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(tok, "special", False):
            out.add(int(i))
    return out


