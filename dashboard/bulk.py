"""Browse's actions on the ticked rows: tag, untag, star, unstar, export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine import EpisodeFilter, RollscopeError, Store

from .views.html import note

BULK_ACTIONS = ("tag", "untag", "star", "unstar", "export")
MAX_BULK = 10_000


def bulk(store: Store, data: dict[str, Any]) -> tuple[str, Path | None]:
    """Do what ``browse_table.js`` asked for the ticked rows: ``{"bulk": action, "ids": [...], "tag": ...,
    "format": ...}``. (a note saying what was done, the exported file or None). Every id is checked before
    anything changes, and a change is one transaction (``Store.curate``)."""
    action = str(data.get("bulk") or "")
    raw = data.get("ids")
    ids = [str(i) for i in raw if isinstance(i, str) and i] if isinstance(raw, list) else []
    if action not in BULK_ACTIONS:
        return note(f"unknown action {action!r}", "error"), None
    if not ids:
        return note("No rows are ticked: tick the rows to act on (the box in the header ticks the whole page).",
                    "warn"), None
    if len(ids) > MAX_BULK:
        return note(f"{len(ids):,} rows ticked: at most {MAX_BULK:,} at once; use Export with a filter or "
                    "`rollscope tag --where`", "error"), None
    n = len(ids)
    rows = f"{n:,} episode{'s' if n != 1 else ''}"
    try:
        if action == "export":
            from .tabs.export import write

            fmt = str(data.get("format") or "jsonl")
            path, written, said = write(store, EpisodeFilter(ids=tuple(store.resolve_id(i) for i in ids)), fmt)
            if not written:  # the format could carry none of them: no empty file to download
                path.unlink(missing_ok=True)
                return note(f"Nothing written as {fmt}.", "warn") + "".join(note(x, "warn") for x in said), None
            return note(f"Exported {written:,} ticked episode{'s' if written != 1 else ''} as {fmt}: {path.name} "
                        "(downloading; the link below downloads it again)", "ok") + "".join(
                note(x, "warn") for x in said), path
        if store.read_only:
            return note(f"{store.path} is open read-only: nothing changed", "error"), None
        if action in ("tag", "untag"):
            tag = str(data.get("tag") or "").strip()
            if not tag:
                return note("Type a tag in the box beside Tag first.", "warn"), None
            add, remove = ([tag], []) if action == "tag" else ([], [tag])
            store.curate(ids, add_tags=add, remove_tags=remove)
            return note(f"{'Tagged' if action == 'tag' else 'Untagged'} {rows} {tag!r}", "ok"), None
        store.curate(ids, starred=action == "star")
        return note(f"{'Starred' if action == 'star' else 'Unstarred'} {rows}", "ok"), None
    except RollscopeError as e:
        return note(str(e), "error"), None
