"""``rollscope presets``: the loop presets, their knobs and the code each reproduces."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import ConfigError


def register(sub: Any) -> None:
    pr = sub.add_parser("presets", help="list the loop presets, their knobs and the code each reproduces")
    pr.add_argument("name", nargs="?", help="one preset: print its knobs")
    pr.add_argument("--json", action="store_true", help="print preset files (the format --config reads)")
    pr.set_defaults(handler=cmd_presets)


def cmd_presets(a: argparse.Namespace) -> int:
    from ..presets import PRESET_INFO, PRESET_LIST, knobs, preset_document

    chosen = PRESET_LIST
    if a.name:
        if a.name not in PRESET_INFO:
            raise ConfigError(f"unknown preset {a.name!r}; choose one of: {', '.join(PRESET_INFO)}")
        chosen = (PRESET_INFO[a.name],)
    if a.json:
        docs = [preset_document(p) for p in chosen]
        print(json.dumps(docs[0] if a.name else docs, indent=2))
        return 0
    for p in chosen:
        print(f"{p.name}\n  reproduces: {p.reproduces}\n  {p.summary}")
        if a.name:
            for note in p.notes:
                print(f"  note: {note}")
        if a.name:
            values = p.config.to_dict()
            for k in knobs():
                print(f"  {k['name']} = {values[k['name']]!r}\n      {k['doc']}")
        print()
    if not a.name:
        print("`rollscope presets NAME` shows a preset's knobs; `rollscope run --set KNOB=VALUE` changes one.")
    return 0
