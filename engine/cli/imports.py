"""``rollscope import``: a training run's dump (or a Rollscope export) into the store, checked if asked."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import DEFAULT_DB, fanout, fanout_options, knob_settings, open_store, record_option


def register(sub: Any) -> None:
    from ..formats import IMPORTERS

    im = sub.add_parser("import", help="import episodes from a training run's dump (or a Rollscope export)",
                        description="Import episodes from a training run's dump (or a Rollscope export). A record "
                        "that cannot be read is named and skipped, the rest imported; the exit status is 1 when "
                        "records were skipped and none imported, 2 when the file cannot be read at all.")
    im.add_argument("file", metavar="FILE_OR_DIR")
    im.add_argument("--format", default="jsonl", choices=sorted(IMPORTERS),
                    help="what wrote it (default jsonl: a Rollscope export): slime (.pt dumps), areal (trajectory "
                    "dumps), verl (rollout dumps, or export --format verl), messages (OpenAI messages JSONL), "
                    "parquet (a Rollscope export), taubench (tau-bench results JSON)")
    im.add_argument("--db", default=DEFAULT_DB, help=f"the database to import into, made if missing (default "
                    f"{DEFAULT_DB})")
    im.add_argument("--tokenizer", help="tokenizer folder or hub id to tokenize and check foreign dumps with "
                    "(slime --dump-details folders bring their own)")
    im.add_argument("--env", help="the env the records ran in, when they do not say (taubench: recognized from "
                    "the policy text; messages: a record's own env comes first), e.g. taubench:airline")
    im.add_argument("--run", help="put the episodes that name no run in this run, as a trainer's dump does (a "
                    "Rollscope export names its own, and keeps it); the run view plots a run by rollout step")
    im.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                    help="--format verl: a knob verl's loop ran with, by verl's name, for rows that do not record "
                    "their knobs, e.g. --set max_parallel_calls=2 (repeatable; the others: the verl-tool preset's, "
                    "verl's defaults); recorded as the episodes' config and read by the checks")
    im.add_argument("--config", help="--format verl: a preset file (JSON, as `rollscope presets --json` prints) with "
                    "the knobs verl's loop ran with, instead of the verl-tool preset's")
    im.add_argument("--check", action="store_true", help="run the fidelity checks on each new episode as it is "
                    "imported (on --workers processes, or --ray)")
    im.add_argument("--replace", action="store_true",
                    help="write a dump's record over the stored episode of its id where the dump says otherwise "
                    "(a reward, the mask, the status: a slime, AReaL, tau-bench or verl rollout_data_dir dump written "
                    "again after a fix); stars, notes and tags are kept, its findings and replays go until it is "
                    "checked again. Without it such episodes are left as they were and counted. jsonl and parquet "
                    "records always replace their stored copy; a chat record or a verl AgentLoopOutput row that says "
                    "otherwise has another id (a new episode)")
    im.add_argument("--reward-key", default="", metavar="KEY",
                    help="the score that is the reward where a record's reward is a reward model's dict of scores "
                    "(slime's --reward-key); without it such a dict gives its 'score', and one without is refused")
    im.add_argument("--quiet", action="store_true", help="no progress bar")
    fanout_options(im, "read a JSONL file of 8 MB or more (each parses lines and packs their rows, which this process "
                       "writes; default: one per CPU up to 4) and run the checks (default: one per CPU)")
    record_option(im)

    im.set_defaults(handler=cmd_import)


def cmd_import(a: argparse.Namespace) -> int:
    from ..errors import FormatError, RollscopeError
    from ..formats import import_path

    if a.file == "-" and not Path(a.file).exists():
        raise FormatError("import reads a file or folder, not standard input: write what you pipe to a file first "
                          "(... > dump.jsonl) and import that", a.file)
    if not Path(a.file).exists():  # before the database is created for nothing
        raise FormatError("no such file", a.file)
    loop = None
    if a.set or a.config:  # as `run` reads them, with verl-tool the preset the knobs change
        from ..formats import check_knobbed
        from ..launch.plan import loop_config

        _, loop = loop_config(None if a.config else "verl-tool", a.env or "", knob_settings(a.set), a.config)
        check_knobbed(a.format, loop)  # before the database is created for nothing
    made = not Path(a.db).exists()
    store = open_store(a.db, must_exist=False)
    pool = None
    if a.check:
        pool = fanout(a)
    elif a.format == "jsonl" and a.ray is None:  # a JSONL file is read on the workers (one writer: a few are enough)
        from ..formats.jsonl import MOST_WORKERS

        pool = fanout(a, most=MOST_WORKERS)
    try:
        report = import_path(a.file, a.format, store, tokenizer=a.tokenizer,
                             progress=not a.quiet and sys.stderr.isatty(), env=a.env, run_id=a.run, check=a.check,
                             fanout=pool, max_record_mb=a.max_record_mb, loop=loop, replace_changed=a.replace,
                             reward_key=a.reward_key)
    except RollscopeError:
        if made:  # a file refused whole leaves no empty database behind, only one this command made and wrote nothing to
            _forget(store, Path(a.db))
        raise
    finally:
        if pool is not None:
            pool.close()
    for spec, why in report.tokenizer_errors.items():
        print(f"rollscope: tokenizer {spec!r} unavailable, token checks skipped: {why}", file=sys.stderr)
    for err in report.errors:
        print(f"rollscope: skipped {err}", file=sys.stderr)
    for note in report.notes:
        print(f"rollscope: note: {note}", file=sys.stderr)
    if made and report.errors and not report.imported:
        _forget(store, Path(a.db))
        print(f"{report.summary()} ({a.db} not made: nothing to put in it)")
        return 1
    print(f"{report.summary()}{f'; {report.checked} checked' if a.check else ''} -> {a.db}")
    return 1 if report.errors and not report.imported else 0


def _forget(store: Any, path: Path) -> None:
    """Remove the database this command made, if it still holds no episode."""
    if store.count():
        return
    store.close()
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)
