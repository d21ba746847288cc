"""Tokenizers by spec, loaded once per process: the one cache the CLI, the checks and the dashboard share.

A spec is what ``--tokenizer`` takes: None, "" or ``smollm2`` for the
embedded SmolLM2 tokenizer with Rollscope's tool template, else a folder, a
``.gguf`` file or a hub id already in the local cache. A spec that failed
to load is remembered with its error (a missing tokenizer stays missing
while a process runs, and each attempt can take seconds); :func:`forget`
clears them.
"""

from __future__ import annotations

import threading
from typing import Any

from .errors import RollscopeError, TokenizerNotFound
from .records import Episode

EMBEDDED = "smollm2"

_loaded: dict[str | None, Any] = {}
_failed: dict[str | None, RollscopeError] = {}
_lock = threading.RLock()


def key(spec: str | None) -> str | None:
    """The cache key of a spec: None for the embedded tokenizer."""
    s = (spec or "").strip()
    return None if s.lower() in ("", EMBEDDED) else s


def name(spec: str | None) -> str:
    """What an episode records as its tokenizer: the spec, or ``smollm2``."""
    return key(spec) or EMBEDDED


def load(spec: str | None) -> Any:
    """The tokenizer named by ``spec``, shared between callers (do not mutate it).

    Raises TokenizerNotFound (or the error it failed with before) when it cannot be loaded.
    """
    k = key(spec)
    with _lock:
        if k in _loaded:
            return _loaded[k]
        if k in _failed:
            raise _failed[k]
        from .backends.local import load_tokenizer_uncached

        try:
            tok = load_tokenizer_uncached(k)
        except RollscopeError as e:
            _failed[k] = e
            raise
        _loaded[k] = tok
        return tok


def get(spec: str | None) -> tuple[Any, str | None]:
    """(tokenizer, None), or (None, why) when it cannot be loaded."""
    try:
        return load(spec), None
    except RollscopeError as e:
        return None, str(e)


def spec_of(ep: Episode) -> str | None:
    """The spec of the tokenizer an episode was made with (None: the embedded one)."""
    return key(ep.tokenizer)


def for_episode(ep: Episode, override: str | None = None) -> tuple[Any, str | None]:
    """The tokenizer to read an episode's ids with: ``override``, else its own; (None, why) when there is none.

    An imported episode that names no tokenizer holds ids of a vocabulary nobody told us.
    """
    spec = override or ep.tokenizer
    if not (spec or "").strip() and not ep.source.live:
        return None, f"imported from {ep.source.kind} without a tokenizer: give one (--tokenizer) to read its ids"
    return get(spec)


def forget(*specs: str | None) -> None:
    """Drop what is loaded or remembered for ``specs`` (every spec when none is given), e.g. after installing one."""
    with _lock:
        for k in [key(s) for s in specs] if specs else [*_loaded, *_failed]:
            _loaded.pop(k, None)
            _failed.pop(k, None)


__all__ = ["EMBEDDED", "TokenizerNotFound", "for_episode", "forget", "get", "key", "load", "name", "spec_of"]
