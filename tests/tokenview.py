"""Reading the token view's HTML as the browser's script does: its data, each token's classes and text."""

from __future__ import annotations

import html
import json
import re
from typing import Any

_META = re.compile(r'data-meta="([^"]*)"')


def payload(out: str) -> dict[str, Any]:
    """The view's ``data-meta``, unescaped and parsed."""
    m = _META.search(out)
    assert m, "no data-meta in the token view"
    return dict(json.loads(html.unescape(m.group(1))))


def classes(meta: dict[str, Any]) -> list[list[str]]:
    """Each token's classes, as the script gives its span."""
    names = [c.split() for c in meta["cls"]]
    return [names[k] for k in meta["c"]]


def texts(meta: dict[str, Any]) -> list[str] | None:
    """Each token's text (None when the view shows ids)."""
    if "vid" not in meta:
        return None
    vocab = dict(zip(meta["vid"], meta["vtx"], strict=True))
    out = [vocab[i] for i in meta["ids"]]
    for i, text in meta["over"]:
        out[i] = text
    return out


def dense(runs: list[list[Any]], n: int) -> list[float | None]:
    """A per-token list from ``[start, [values]]`` runs, None elsewhere."""
    out: list[float | None] = [None] * n
    for start, values in runs:
        out[start : start + len(values)] = values
    return out


def mask(meta: dict[str, Any]) -> list[int]:
    """The loss mask from its runs of 1."""
    out = [0] * meta["n"]
    for a, b in meta["mask"]:
        out[a:b] = [1] * (b - a)
    return out
