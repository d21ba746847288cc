"""Who may reach the dashboard: loopback by default, a password for anything wider.

The dashboard shows private rollouts and can run models and write to the
database, so listening beyond this machine without a login is refused
rather than warned about.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

from engine import ConfigError

AUTH_ENV = "ROLLSCOPE_AUTH"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine."""
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a hostname: it may resolve to any interface


def parse_auth(spec: str, where: str = "--auth") -> tuple[str, str]:
    """``user:password`` as a (user, password) pair; the password may itself contain ``:``."""
    user, sep, password = spec.partition(":")
    if not sep or not user.strip() or not password:
        raise ConfigError(f"{where} must look like user:password (both non-empty)")
    return user.strip(), password


def resolve_auth(host: str, auth: str | None, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The login the server needs for ``host``: from ``--auth``, else ``$ROLLSCOPE_AUTH``.

    Loopback hosts need none (but use one if given). Any other host without
    one is a ConfigError that says how to give it.
    """
    env = os.environ if environ is None else environ
    if auth:
        return parse_auth(auth)
    if env.get(AUTH_ENV):
        return parse_auth(env[AUTH_ENV], f"${AUTH_ENV}")
    if is_loopback(host):
        return None
    raise ConfigError(
        f"--host {host} makes the dashboard reachable from other machines; it then needs a login: "
        f"add --auth user:password (or set {AUTH_ENV}=user:password), or keep the default --host 127.0.0.1"
    )
