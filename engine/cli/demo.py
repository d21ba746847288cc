"""``rollscope demo``: the demo database (``engine.launch.demo``, imported when the command runs)."""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from typing import Any

from .common import DEFAULT_DB


def register(sub: Any) -> None:
    d = sub.add_parser("demo", help="build a small database that shows what Rollscope finds (scripted policy, "
                                    "seconds)")
    d.add_argument("--db", default=DEFAULT_DB, help="the database to build it in (it must hold no episodes yet)")
    d.add_argument("--qwen3", metavar="DIR",
                   help="the real Qwen3 tokenizer's folder (tokenizer.json, tokenizer_config.json), for the history "
                        "rewrite part (default: $ROLLSCOPE_QWEN3_TOKENIZER, else .cache/tokenizers/qwen3; without "
                        "it that part is skipped)")
    d.add_argument("--force", "--append", dest="force", action="store_true",
                   help="add the demo's runs to a database that already holds episodes")
    d.add_argument("--part", action="append", metavar="NAME",
                   help="build only this part (repeatable): clean-tito, history-rewrite, system-block, "
                        "missing-gen-prompt, parse-abort, truncated-turn, zero-spread")
    d.set_defaults(handler=cmd_demo)


def cmd_demo(a: argparse.Namespace) -> int:
    from ..launch.demo import build_demo, choose, find_qwen3, notes
    from ..store import Store

    t0 = time.perf_counter()
    choose(a.part)  # a mistake in the parts or the tokenizer folder, before the database is made
    find_qwen3(a.qwen3)
    store = Store(a.db)
    try:
        report = build_demo(store, qwen3=a.qwen3, parts=a.part, force=a.force, progress=lambda s: print(s, flush=True))
    finally:
        store.close()
    runs = len(report.runs)
    print(f"\n{report.n_episodes} episodes in {runs} run{'s' if runs != 1 else ''} -> {a.db}, built in "
          f"{time.perf_counter() - t0:.1f}s\n")
    rows = [[r.part.tag, str(r.n_episodes), r.run_id, ", ".join(r.root_kinds) or "none"] for r in report.runs]
    rows += [[p.tag, "0", "skipped", "needs the Qwen3 tokenizer (see above)"] for p, _ in report.skipped]
    header = ["tag", "episodes", "run", "root findings"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for r in [header, *rows]:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    print(f"\nWhat each tag shows (the dashboard: `rollscope serve --db {a.db}`, then Browse's tags filter; "
          f"here: `rollscope ls --db {a.db} --where tag=TAG`):")
    for tag, title, look in notes(report):
        print(f"\n  {tag}: {title}")
        print(textwrap.fill(look, width=100, initial_indent="    ", subsequent_indent="    "))
    if not report.n_episodes and report.skipped:  # every part asked for was skipped: nothing to look at
        print("rollscope: nothing built: the parts asked for need the Qwen3 tokenizer (see above)", file=sys.stderr)
        return 2
    return 0
