"""The ``rollscope`` command: one module per command, registered here in the order ``--help`` lists them.

Library errors (``RollscopeError``) become one line on stderr and exit status 2; anything else is a bug and keeps
its traceback. Commands from other packages register through the ``rollscope.commands`` entry points (the
dashboard's ``serve``), so the engine imports no front end.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from ..errors import RollscopeError
from . import check, curate, demo, diff, explain, export, fork, imports, ls, presets, replay, run, schema, show, watch

COMMANDS = (run, presets, schema, ls, show, explain, curate, export, imports, check, replay, fork, watch, demo, diff)
PLUGINS = "rollscope.commands"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rollscope", description="Trace, store and inspect multi-turn agent rollouts.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    for plugin in sorted(entry_points(group=PLUGINS), key=lambda e: e.name):
        plugin.load()(sub)
    return p


def _exit_on_sigterm() -> Any:
    """SIGTERM exits like Ctrl-C does, through every ``finally``: a command's worker pool is shut down, not
    left running (a command that handles SIGTERM itself, ``serve``, installs its own handler later). Returns
    the handler it replaced, or None."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and threading.current_thread() is threading.main_thread():
        return signal.signal(signal.SIGTERM, _terminated)
    return None


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    args = build_parser().parse_args(argv)
    previous = _exit_on_sigterm()
    try:
        code: int = args.handler(args)
        return code
    except RollscopeError as e:
        print(f"rollscope: error: {e}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as e:
        from ..store import damaged

        error = damaged(e, _database(args))
        if error is None:
            raise  # not a damaged file: a bug, with its traceback
        print(f"rollscope: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `rollscope ls | head`: the reader left; that is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _database(args: argparse.Namespace) -> str:
    """The database a command was given (``--db``, or ``check``'s source)."""
    return str(getattr(args, "db", None) or getattr(args, "source", None) or "the database")
