"""``rollscope watch``: a training run's dump folder imported and checked as it writes (``engine.formats.watch``)."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..formats.watch import WATCH_FORMATS, Watcher, WatchEvent
from .common import DEFAULT_DB, fanout, fanout_options, open_store, record_option


def register(sub: Any) -> None:
    w = sub.add_parser("watch", help="import and check a training run's dumps as it writes them")
    w.add_argument("folder", metavar="DIR", help="the run's dump folder (slime: --dump-details DIR or its "
                   "rollout_data; AReaL: its rollout log folder; verl: trainer.rollout_data_dir)")
    w.add_argument("--format", required=True, choices=sorted(WATCH_FORMATS))
    w.add_argument("--db", default=DEFAULT_DB)
    w.add_argument("--run", help="the run the episodes go to (default: the folder's name and a hash of its path)")
    w.add_argument("--tokenizer", help="tokenizer folder or hub id, to tokenize and check the dumps with")
    w.add_argument("--env", help="the env the records ran in, when they do not say")
    w.add_argument("--reward-key", default="", metavar="KEY",
                   help="the score that is the reward where a record's reward is a dict of scores (as import's)")
    w.add_argument("--interval", type=float, default=2.0, help="seconds between looks at the folder")
    w.add_argument("--settle", type=float, default=2.0,
                   help="seconds a JSONL dump must stay unchanged before its last line, without its newline, is "
                        "read if it is a whole JSON record (a line cut mid-record waits for its newline; a .pt dump "
                        "is read as soon as it is whole)")
    w.add_argument("--no-check", action="store_true", help="import only; run `rollscope check` later")
    w.add_argument("--once", action="store_true", help="look once, import what is ready, and exit")
    fanout_options(w)
    record_option(w)
    w.set_defaults(handler=cmd_watch)


def cmd_watch(a: argparse.Namespace) -> int:
    if not Path(a.folder).is_dir():  # before the database is created for nothing
        raise ConfigError(f"{a.folder} is not a folder: watch a training run's dump folder")
    return watch(a, open_store(a.db, must_exist=False), fanout(a))


def watch(a: argparse.Namespace, store: Any, pool: Any) -> int:
    watcher = Watcher(store, a.folder, a.format, run_id=a.run, tokenizer=a.tokenizer, check=not a.no_check,
                      fanout=pool, settle=a.settle, env=a.env, max_record_mb=a.max_record_mb,
                      reward_key=a.reward_key)
    totals = {"new": 0, "files": 0, "failed": 0}

    def show(e: WatchEvent) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(e.at))
        print(f"{stamp} {e.line()}" + (f" in {e.seconds:.1f}s" if e.state in ("done", "partial") else ""), flush=True)
        totals["new"] += e.new
        totals["files"] += e.state in ("done", "partial")
        totals["failed"] += e.state == "failed"

    print(f"watching {watcher.folder} ({a.format}) into {a.db}, run {watcher.run_id}; checks on "
          f"{'no one' if a.no_check else pool.describe()}" + ("" if a.once else "; Ctrl-C to stop"),
          file=sys.stderr, flush=True)
    try:
        if a.once:
            for e in watcher.poll():
                show(e)
        else:
            watcher.run(threading.Event(), show, a.interval)
    except KeyboardInterrupt:
        pass
    finally:
        pool.close()
    for spec, why in watcher.tokenizer_errors.items():
        print(f"rollscope: tokenizer {spec!r} unavailable, token checks skipped: {why}", file=sys.stderr)
    print(f"{totals['new']} new episodes from {totals['files']} file reads"
          + (f", {totals['failed']} files failed" if totals["failed"] else "") + f" -> {a.db}", file=sys.stderr)
    return 1 if totals["failed"] and not totals["files"] else 0
