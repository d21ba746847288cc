"""Who may reach the dashboard: loopback by default, a password for anything wider.

The dashboard shows private rollouts and can run models and write to the
database, so listening beyond this machine without a login is refused
rather than warned about.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


def check_port(host: str, port: int) -> None:
    """Raise a ConfigError that says what to do when ``host``:``port`` cannot be listened on (a port in use, a
    name that does not resolve), before anything is built or printed."""
    name = host.strip().strip("[]")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(f"cannot listen on {host!r}: {getattr(e, 'strerror', None) or e}; give --host an address "
                          "of this machine, e.g. 127.0.0.1") from None
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a closing socket is no clash
        try:
            s.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(f"port {port} on {host} is in use (another Rollscope or server?): stop it, or "
                                  f"choose another port with --port") from None
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


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


# -- logins --------------------------------------------------------------------

FREE_FAILURES = 3
"""Failed logins answered at once; each one after waits twice as long as the last (1 s, 2 s, 4 s...)."""
MAX_DELAY_S = 30.0
LOCKOUT_FAILURES = 10
"""After this many failures in a row, every login (the right one too) is refused for ``LOCKOUT_S``."""
LOCKOUT_S = 300.0


class LoginGuard:
    """Checks ``user:password`` logins, slowing and then stopping a run of wrong guesses.

    Gradio hands a login only the name and password, not who sent it, so the count is global: the
    ``n``-th failure in a row past ``FREE_FAILURES`` makes the next attempt wait ``2**(n - FREE_FAILURES)``
    seconds (at most ``MAX_DELAY_S``), and ``LOCKOUT_FAILURES`` in a row refuse every login for
    ``LOCKOUT_S``. Attempts are answered one at a time, so guesses sent in parallel wait in line.
    A right login resets the count. Passwords are compared in constant time.
    """

    def __init__(self, user: str, password: str, *, clock: Any = time.monotonic, sleep: Any = None) -> None:
        self._user = user.encode()
        self._password = password.encode()
        self._clock = clock
        self._sleep = sleep or asyncio.sleep
        self.failures = 0
        self.locked_until = 0.0
        self._lock: asyncio.Lock | None = None

    def delay(self) -> float:
        """Seconds the next attempt waits before it is checked."""
        over = self.failures - FREE_FAILURES
        return 0.0 if over < 0 else min(MAX_DELAY_S, 2.0**over)

    async def check(self, user: str, password: str) -> bool:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._clock() < self.locked_until:
                return False
            wait = self.delay()
            if wait:
                await self._sleep(wait)
            ok = hmac.compare_digest(user.encode(), self._user) & hmac.compare_digest(password.encode(), self._password)
            if ok:
                self.failures = 0
                return True
            self.failures += 1
            if self.failures >= LOCKOUT_FAILURES:
                self.locked_until = self._clock() + LOCKOUT_S
                self.failures = 0
            return False

    def auth(self) -> Callable[[str, str], Awaitable[bool]]:
        """The coroutine function Gradio takes as ``auth`` (it awaits only plain coroutine functions)."""

        async def auth(user: str, password: str) -> bool:
            return await self.check(user, password)

        return auth


# -- files the server writes -----------------------------------------------------


@contextmanager
def private_files() -> Iterator[Path]:
    """A folder only this user can enter, for every file the server writes (Gradio's cache of uploads and
    downloads, exports); ``GRADIO_TEMP_DIR`` points there while it lasts, and it is removed afterwards."""
    _remove_stale()
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))  # mode 0700
    before = os.environ.get(TEMP_ENV)
    os.environ[TEMP_ENV] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(TEMP_ENV, None)
        else:
            os.environ[TEMP_ENV] = before
        shutil.rmtree(folder, ignore_errors=True)


TEMP_ENV = "GRADIO_TEMP_DIR"
PREFIX = "rollscope-serve-"


def _remove_stale() -> None:
    """Remove the folders of servers that were killed before they could (their process is gone)."""
    for old in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        pid = old.name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or not old.is_dir() or old.stat().st_uid != os.getuid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def url_host(host: str) -> str:
    """``host`` as it goes in a URL: an IPv6 address in brackets."""
    bare = host.strip().strip("[]")
    return f"[{bare}]" if ":" in bare else bare
