"""``rollscope serve``: the dashboard's command, registered with the engine's CLI as a ``rollscope.commands`` entry
point, so the engine does not import the dashboard. Importing this module does not import Gradio."""

from __future__ import annotations

import argparse
from typing import Any

DEFAULT_DB = "rollscope.db"


def register(sub: Any) -> None:
    sv = sub.add_parser("serve", help="start the dashboard")
    sv.add_argument("--db", default=DEFAULT_DB)
    sv.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1: this machine only; any other needs --auth)")
    sv.add_argument("--port", type=int, default=7860)
    sv.add_argument("--auth", metavar="USER:PASSWORD",
                    help="require this login (needed with a non-loopback --host; or set ROLLSCOPE_AUTH)")
    sv.add_argument("--allow-host", metavar="NAME", action="append", default=[],
                    help="also answer requests that name the server NAME (a reverse proxy's or a DNS name; "
                         "repeatable); by default only --host's address (and localhost on loopback) is answered")
    sv.set_defaults(handler=cmd_serve)


def cmd_serve(a: argparse.Namespace) -> int:
    from .server import check_allowed_host, check_port, resolve_auth

    auth = resolve_auth(a.host, a.auth)  # before importing Gradio: a refused host or a busy port fails fast
    allow = [check_allowed_host(n) for n in a.allow_host]
    check_port(a.host, a.port)
    from .app import launch

    launch(db=a.db, host=a.host, port=a.port, auth=auth, allow_hosts=allow)
    return 0
