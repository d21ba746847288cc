"""``rollscope check``: the fidelity checks over a database or a JSONL file, with each episode's diagnosis."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StoreError
from ..records.episode import Finding, Status
from .common import DEFAULT_DB, counted, fanout, fanout_options, open_store, record_option, where


def register(sub: Any) -> None:
    ck = sub.add_parser("check", help="run the fidelity checks on stored or exported episodes")
    ck.add_argument("source", metavar="FILE_OR_DB", nargs="?",
                    help=f"a Rollscope database or a Rollscope JSONL file (or --db, as the other commands take it; "
                    f"default {DEFAULT_DB})")
    ck.add_argument("--db", help="the database to check: the same as giving it first")
    ck.add_argument("--episode", action="append", default=[], help="only this episode (repeatable; an id prefix is enough)")
    ck.add_argument("--where", action="append", default=[], help="database only: filter like `ls`")
    ck.add_argument("--json", action="store_true", help="one JSON object per finding")
    ck.add_argument("--tokenizer", help="tokenizer to check with (default: the one each episode names)")
    ck.add_argument("--recompute-logprobs", action="store_true",
                    help="teacher-force a local model and compare its logprobs with the rollout's")
    ck.add_argument("--model", help="with --recompute-logprobs: local model folder (default: the episode's own local model)")
    ck.add_argument("--top-logprobs", type=int, metavar="K",
                    help="with --recompute-logprobs: also fill, at every trained token, the exact entropy and the K "
                         "most likely tokens (default: as many as the episode recorded, else 5), and store them")
    ck.add_argument("--threshold", type=float, default=0.5, help="logprob difference that counts as a mismatch")
    ck.add_argument("--no-store", action="store_true", help="database only: do not save the findings back")
    ck.add_argument("--info", action="store_true", help="also print info findings (what was not checked, and why)")
    ck.add_argument("--all", action="store_true", help="print, under each root finding, the findings that follow from it")
    fanout_options(ck)
    record_option(ck)
    ck.set_defaults(handler=cmd_check)


def _is_sqlite(path: Path) -> bool:
    if path.is_dir():  # a folder of JSONL files
        return False
    try:
        with path.open("rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None


def cmd_check(a: argparse.Namespace) -> int:
    """Check the episodes of a database or a JSONL file, print each one's diagnosis and roots, and store the
    findings unless ``--no-store``."""
    pool = fanout(a)
    try:
        return check(a, pool, lambda path: open_store(path, must_exist=True))
    finally:
        pool.close()  # also when stopped (Ctrl-C, SIGTERM): no worker outlives the command


def check(a: argparse.Namespace, pool: Any, open_db: Callable[[str], Any]) -> int:
    """``cmd_check`` with the checks run by ``pool`` and a database opened by ``open_db``."""
    from ..checks.diagnosis import RUN_KINDS, consequences, diagnosis, roots, run_level, unchecked_kind
    from ..checks.fanout import check_episodes
    from ..formats import jsonl
    from ..store import EpisodeFilter

    for flag, given in (("--model", a.model), ("--top-logprobs", a.top_logprobs)):
        if given is not None and not a.recompute_logprobs:
            raise ConfigError(f"{flag} works with --recompute-logprobs only: add it, or leave {flag} out")
    if a.source and a.db and Path(a.source).resolve() != Path(a.db).resolve():
        raise ConfigError(f"two files to check: {a.source} and --db {a.db}; give one")
    a.source = a.source or a.db or DEFAULT_DB  # as every command that reads a database defaults
    src = Path(a.source)
    if not src.exists():
        raise ConfigError(f"database {src} does not exist (run `rollscope run --db {src}` or `rollscope import` "
                          "first)" if src.suffix in (".db", ".sqlite") else f"{src} does not exist")
    tokenizer_errors: dict[str, str] = {}
    store = None
    report = None
    if _is_sqlite(src):
        store = open_db(str(src))
        if store.read_only and not a.no_store:
            raise StoreError(f"{src} is read-only (no write permission), so findings cannot be saved in it: "
                             "add --no-store to check without saving")
        ids = [store.resolve_id(e) for e in a.episode]
        flt = where(store, a.where)
        if ids:
            flt = EpisodeFilter(**{**flt.__dict__, "ids": tuple(ids)})
        episodes = store.iter_episodes(flt)
    else:
        if src.suffix.lower() in (".db", ".sqlite", ".sqlite3") and src.is_file() and src.stat().st_size:
            raise ConfigError(f"{src} is not a SQLite database (its first bytes are not SQLite's), though its name "
                              "says one: check takes a Rollscope database or a Rollscope JSONL file")
        if a.where:
            raise ConfigError("--where works on databases; for a JSONL file use --episode")
        report = jsonl.ReadReport()
        episodes = (e for e in jsonl.read(src, report, int(a.max_record_mb * 2**20)) if not a.episode or any(e.id.startswith(p) for p in a.episode))
    n_eps = running = in_part = 0
    # Per episode, only what the report needs (the checked episode itself is stored or dropped at once):
    # its id, its run, its findings without the per-token difference lists.
    shown: list[tuple[str, str, list[Finding]]] = []
    # run id -> per episode: (the run-level candidates it has, the kinds its checks could not look for)
    runs: dict[str, list[tuple[set[str], set[str]]]] = {}
    for checked in check_episodes(pool, episodes, tokenizer=a.tokenizer, recompute_logprobs=a.recompute_logprobs,
                                  model=a.model, threshold=a.threshold, errors=tokenizer_errors,
                                  top_logprobs=a.top_logprobs):
        n_eps += 1
        if checked.status is Status.RUNNING:
            # Its loop still writes it (and checks it as it ends): stored, its process's mark would be this one's.
            running += 1
        elif store is not None and not a.no_store:
            store.finish_episode(checked)
        found = [replace(f, evidence={k: v for k, v in f.evidence.items() if k != "diff"})
                 for f in checked.all_findings()]
        run_key = checked.run_id or checked.source.file or "(no run)"
        runs.setdefault(run_key, []).append(
            ({f.kind for f in found if f.kind in RUN_KINDS and f.severity.value != "info"},
             {k for k in map(unchecked_kind, found) if k is not None}))
        shown.append((checked.id, run_key, found))
        in_part += bool(checked.checks_not_run)
    # A kind every episode of a run has is the run's (its preset, template or source): said once. An episode
    # its check could not look at (a prompt refused, no answer after a reply) does not count against it.
    run_levels = {run: run_level(sets) for run, sets in runs.items()}
    run_level_of = {run: kinds for run, kinds in run_levels.items() if kinds}
    root_counts: dict[str, int] = {}
    n_err = n_caused = 0
    for episode_id, run, found in shown:
        common = run_level_of.get(run, set())
        rs = [r for r in roots(found) if r.kind not in common]
        for f in found:
            if f.severity.value == "error":
                n_err += 1
        for r in roots(found):
            if r.severity.value == "error":
                key = f"{r.kind} (run-level)" if r.kind in common else r.kind
                root_counts[key] = root_counts.get(key, 0) + 1
        n_caused += sum(1 for f in found if f.caused_by is not None)
        if a.json:
            for f in found:
                if f.severity.value == "info" and not a.info:
                    continue
                row = {"episode_id": episode_id, **{k: v for k, v in f.to_dict().items() if k != "evidence"}}
                row["run_level"] = f.kind in common
                row["evidence"] = f.evidence
                print(json.dumps(row, ensure_ascii=False, default=str))
            continue
        line = diagnosis(found, leave_out=common)
        # Its roots the run shares are said once, under the run; with --all, what follows from them here too.
        shared = [r for r in roots(found) if r.kind in common and (a.all and consequences(found, r))]
        if not rs and not a.info and not shared:
            continue
        run_only = sorted({r.kind for r in roots(found) if r.kind in common})
        said = line or (f"only the run-level {', '.join(run_only)} (said below)" if run_only else "no findings")
        print(f"{episode_id}  {said}")
        for r in rs + shared:
            follow = consequences(found, r)
            head = f"  {_finding_line(r)}" if r not in shared else f"  run-level {r.id} {r.kind}"
            print(head + (f"  (causes {len(follow)}: {_kinds(follow)})" if follow else ""))
            if a.all:
                for f in follow:
                    print(f"      <- {f.caused_by}  {_finding_line(f)}")
        if a.info:
            for f in found:
                if f.severity.value == "info":
                    print(f"  {_finding_line(f)}")
    if not a.json:
        for run, kinds in sorted(run_level_of.items()):
            for kind in sorted(kinds):
                instances = [(eid, f) for eid, r, found in shown if r == run for f in found
                             if f.kind == kind and f.severity.value != "info"]
                # the severest instance speaks for the run, as the summary counts it (a harmless one may come first)
                first, sample = next((x for x in instances if x[1].severity.value == "error"), instances[0])
                n = sum(kind in has for has, _ in runs[run])
                rest = len(runs[run]) - n
                # Its words are one episode's (its counts and positions differ from episode to episode): named.
                print(f"run {run}: {kind} in {'all ' if n > 1 else ''}{counted(n, 'episode')}"
                      + (f" it applies to ({rest} could not be checked for it)" if rest else "")
                      + f" ({sample.severity.value}); in {first}: {sample.message}")
    skipped = list(report.errors) if report is not None else []
    for err in skipped:
        print(f"rollscope: skipped {err}", file=sys.stderr)
    pool.close()
    for spec, why in tokenizer_errors.items():
        print(f"rollscope: tokenizer {spec!r} unavailable, token checks skipped: {why}", file=sys.stderr)
    if n_eps == 0:
        why = ((f"none of the {len(skipped)} records in {src} could be read" if len(skipped) > 1 else
                f"the one record in {src} could not be read") if skipped else
               "no episode matched" if a.episode or a.where else f"{src} holds no episodes")
        print(f"rollscope: nothing checked: {why}", file=sys.stderr)
        return 2
    summary = ", ".join(f"{k} {v}" for k, v in sorted(root_counts.items(), key=lambda kv: -kv[1])) or "none"
    run_kinds = sorted({k for kinds in run_level_of.values() for k in kinds})
    malformed = f" ({counted(len(skipped), 'malformed record')} skipped)" if skipped else ""
    print(f"checked {counted(n_eps, 'episode')}{malformed}: "
          f"{counted(sum(root_counts.values()), 'root error')} by kind: {summary}; "
          f"{counted(n_caused, 'finding')} {'follows' if n_caused == 1 else 'follow'} from a root"
          + (f"; run-level: {', '.join(run_kinds)}" if run_kinds else "")
          + f" ({counted(n_err, 'error')} in all)", file=sys.stderr if a.json else sys.stdout)  # --json: stdout is rows
    if in_part:  # its findings are those of the checks that ran: said, as ls and Browse say it beside the count
        print(f"rollscope: {counted(in_part, 'episode')} checked in part: a check needed a tokenizer or a model not "
              "given (--tokenizer, --recompute-logprobs --model); --info lists which", file=sys.stderr)
    if running and store is not None and not a.no_store:
        how = ("it stands and not stored: its loop writes it, and checks it as it ends" if running == 1 else
               "they stand and not stored: their loops write them, and check each as it ends")
        print(f"rollscope: {counted(running, 'running episode')} checked as {how}", file=sys.stderr)
    return 1 if n_err else 0


def _finding_line(f: Finding) -> str:
    span = f"[{f.token_start}:{f.token_end}]" if f.token_start is not None else ""
    turn = f"turn {f.turn}" if f.turn is not None else "episode"
    return f"{f.id:4s} {turn:8s} {f.severity.value:7s} {f.kind} {span}  {f.message}"


def _kinds(found: Sequence[Finding]) -> str:
    counts: dict[str, int] = {}
    for f in found:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in counts.items())
