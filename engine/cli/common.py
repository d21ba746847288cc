"""What the commands share: the default database, argument types, opening the store, the checks' fan-out."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StoreError

DEFAULT_DB = "rollscope.db"


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 episode", "3 episodes"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def positive_int(s: str) -> int:
    return _whole(s, 1)


def nonnegative_int(s: str) -> int:
    return _whole(s, 0)


def _whole(s: str, least: int) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a whole number") from None
    if v < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, not {v}")
    return v


def rate(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {v}")
    return v


def positive_mb(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of MB, not {s}")
    return v


def record_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-record-mb", type=positive_mb, default=64.0, metavar="MB",
                   help="the largest record read (a JSONL line, a slime sample, a Parquet row); a larger one is "
                        "skipped and named, not read into memory (default 64)")


def fanout_options(p: argparse.ArgumentParser, what: str = "run the checks (default: one per CPU)") -> None:
    p.add_argument("--workers", type=positive_int, help=f"processes that {what}; 1: this process alone")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run the checks on Ray workers: a cluster address (ray://host:10001, auto), or none for a "
                        "local Ray on this machine's CPUs (needs the rollscope[ray] extra)")


def fanout(a: argparse.Namespace, most: int | None = None) -> Any:
    """The workers ``--workers`` and ``--ray`` ask for; by default one per CPU (at most ``most``)."""
    from ..checks.fanout import Fanout, default_workers

    cpus = default_workers()
    return Fanout(a.workers or (min(cpus, most) if most else cpus), a.ray)


def where(store: Any, clauses: Sequence[str]) -> Any:
    """The ``EpisodeFilter`` of ``--where`` clauses, the unique id prefixes of an ``id=`` or ``family=`` clause resolved
    to their ids (as ``show`` takes them): one that matches no episode, or more than one, is refused."""
    from ..store import EpisodeFilter

    flt = EpisodeFilter.from_where(clauses)
    if flt.ids:
        flt = dataclasses.replace(flt, ids=tuple(store.resolve_id(i) for i in flt.ids))
    if flt.family:
        flt = dataclasses.replace(flt, family=store.resolve_id(flt.family))
    return flt


def open_store(path: str, must_exist: bool) -> Any:
    from ..store import Store

    if must_exist and not Path(path).exists():
        raise StoreError(f"database {path} does not exist (run `rollscope run --db {path}` or `rollscope import` first)")
    store = Store(path)
    if store.notice:  # a read-only folder whose WAL could not be read: say what is missing
        print(f"rollscope: note: {store.notice}", file=sys.stderr)
    return store


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def knob_settings(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set takes KNOB=VALUE, not {item!r}")
        out[name.strip()] = value
    return out
