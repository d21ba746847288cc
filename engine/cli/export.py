"""``rollscope export``: stored episodes written in a format a trainer loads."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .common import DEFAULT_DB, counted, open_store, where


def register(sub: Any) -> None:
    from ..formats import EXPORTERS

    ex = sub.add_parser("export", help=f"export episodes to a file ({', '.join(EXPORTERS)})")
    ex.add_argument("--db", default=DEFAULT_DB)
    ex.add_argument("--format", default="jsonl", choices=sorted(EXPORTERS))
    ex.add_argument("-o", "--output", required=True, help="output file ('-' for stdout, text formats only)")
    ex.add_argument("--where", action="append", default=[], help="filter like `ls`: status=completed, reward>=0.5 ...")
    ex.add_argument("--id", action="append", default=[], help="only this episode (repeatable; an id prefix is enough)")
    ex.add_argument("--tag", action="append", default=[], help="only episodes with this tag (repeatable: all of them)")
    ex.add_argument("--starred", action="store_true", help="only starred episodes")
    ex.add_argument("--full-prompts", action="store_true",
                    help="jsonl: write every turn's prompt text whole (by default a prompt that repeats the turn "
                         "before is written as pieces of it, which `rollscope import` restores)")
    ex.set_defaults(handler=cmd_export)


def cmd_export(a: argparse.Namespace) -> int:
    from ..formats import export

    if a.full_prompts and a.format != "jsonl":  # before anything is read: the other formats have no pieces to undo
        raise ConfigError(f"--full-prompts is for --format jsonl ({a.format} writes no prompt as pieces)")
    store = open_store(a.db, must_exist=True)
    flt = where(store, a.where)
    if a.id:
        flt = replace(flt, ids=tuple(store.resolve_id(i) for i in a.id))
    if a.tag:
        flt = replace(flt, tags=(*flt.tags, *a.tag))
    if a.starred:
        flt = replace(flt, starred=True)
    if not store.count(flt):
        raise ConfigError("no episodes match: nothing to export (`rollscope ls` with the same --where lists what "
                          "there is)")
    notes: list[str] = []
    n = export(store.iter_episodes(flt), a.format, a.output, notes, full_prompts=a.full_prompts)
    # On stderr: with -o - the episodes themselves are on stdout.
    print(f"exported {counted(n, 'episode')} ({a.format}) to {a.output}", file=sys.stderr)
    for note in notes:
        print(note, file=sys.stderr)
    if n:
        return 0
    if a.output != "-":  # episodes matched and the format could carry none of them: no empty file left behind
        Path(a.output).unlink(missing_ok=True)
        print(f"(no file written: {a.output} would hold nothing)", file=sys.stderr)
    return 2
