"""Who may reach the dashboard: loopback by default, a password for anything wider.

The dashboard shows private rollouts and can run models and write to the
database, so listening beyond this machine without a login is refused
rather than warned about.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import hmac
import ipaddress
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
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
"""After this many failures in a row from one address, its logins (the right one too) are refused for
``LOCKOUT_S``; an address the server cannot tell apart (loopback: a proxy, a tunnel) is never locked out."""
LOCKOUT_S = 300.0
MAX_TALLIES = 10_000

CLIENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("rollscope_client", default=None)
"""Who sends the login being checked (``client_key``), set by ``Gate`` around Gradio's /login."""


def client_key(address: str | None) -> str | None:
    """The address a run of failed logins is counted against: an IPv4 address, an IPv6 /64 (one machine's
    range), or None where the server cannot tell clients apart (loopback: a reverse proxy or a tunnel
    shows every client as this machine; unknown)."""
    try:
        ip = ipaddress.ip_address((address or "").strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class _Tally:
    """One address's run of failed logins; its attempts are answered one at a time."""

    def __init__(self) -> None:
        self.failures = 0
        self.locked_until = 0.0
        self.lock = asyncio.Lock()


class LoginGuard:
    """Checks ``user:password`` logins, slowing and then stopping a run of wrong guesses, per address.

    The ``n``-th failure in a row from an address past ``FREE_FAILURES`` makes its next attempt wait
    ``2**(n - FREE_FAILURES)`` seconds (at most ``MAX_DELAY_S``); ``LOCKOUT_FAILURES`` in a row refuse
    that address's logins for ``LOCKOUT_S``, while every other address logs in as before. Logins the
    server cannot tell apart (``client_key`` None: loopback, where a proxy or a tunnel puts everyone)
    share one count that slows but never locks, so the owner's right password gets in after at most
    ``MAX_DELAY_S``. An address's attempts are answered one at a time, so guesses sent in parallel wait
    in line. A right login clears the address's count. Passwords are compared in constant time.
    """

    def __init__(self, user: str, password: str, *, clock: Any = time.monotonic, sleep: Any = None) -> None:
        self._user = user.encode()
        self._password = password.encode()
        self._clock = clock
        self._sleep = sleep or asyncio.sleep
        self._tallies: dict[str | None, _Tally] = {}

    def _tally(self, client: str | None) -> _Tally:
        if client not in self._tallies and len(self._tallies) >= MAX_TALLIES:
            now = self._clock()  # forget the quiet addresses first, so memory stays bounded
            for key, t in list(self._tallies.items()):
                if t.locked_until <= now and not t.lock.locked():
                    del self._tallies[key]
        return self._tallies.setdefault(client, _Tally())

    def failures(self, client: str | None = None) -> int:
        """Failed logins in a row from ``client`` (a ``client_key``)."""
        t = self._tallies.get(client)
        return t.failures if t else 0

    def delay(self, client: str | None = None) -> float:
        """Seconds ``client``'s next attempt waits before it is checked."""
        over = self.failures(client) - FREE_FAILURES
        return 0.0 if over < 0 else min(MAX_DELAY_S, 2.0**over)

    async def check(self, user: str, password: str, client: str | None = None) -> bool:
        tally = self._tally(client)
        async with tally.lock:
            if self._clock() < tally.locked_until:
                return False
            wait = self.delay(client)
            if wait:
                await self._sleep(wait)
            ok = hmac.compare_digest(user.encode(), self._user) & hmac.compare_digest(password.encode(), self._password)
            if ok:
                tally.failures = 0
                return True
            tally.failures += 1
            if client is not None and tally.failures >= LOCKOUT_FAILURES:
                tally.locked_until = self._clock() + LOCKOUT_S
                tally.failures = 0
            return False

    def auth(self) -> Callable[[str, str], Awaitable[bool]]:
        """The coroutine function Gradio takes as ``auth`` (it awaits only plain coroutine functions); who sends
        the login comes from ``CLIENT``, which ``Gate`` sets, as Gradio passes only the name and password."""

        async def auth(user: str, password: str) -> bool:
            return await self.check(user, password, CLIENT.get())

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


# -- who may talk to the server: Host, Origin, a session ---------------------------

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
STATIC = ("/assets/", "/static/", "/svelte/", "/favicon.ico", "/theme.css", "/gradio_api/theme.css",
          "/manifest.json", "/pwa_icon", "/robots.txt")
"""Paths of Gradio's own front end (scripts, styles, fonts, icons): the same for everyone, so the login page
may load them without a session and other sites may load them."""
LOGIN = ("/login", "/login/")
SESSION_COOKIE = "access-token-"
"""How Gradio names the cookies of a session its /login opened (``access-token-ID``, ``-unsecure-ID``)."""
_API_INFO = re.compile(rb"window\.gradio_api_info = .*?;</script>", re.S)


def host_names(host: str, allow: Iterable[str] = ()) -> frozenset[str]:
    """The names the server answers to on ``host`` (as ``--host`` gives it): that address, the loopback names
    when it is loopback, this machine's name when it listens on every interface, and every ``--allow-host``
    name; lowercase, IPv6 without brackets."""
    names = {_bare(host), *(_bare(a) for a in allow)}
    if is_loopback(host):
        names |= LOOPBACK_HOSTS
    if listens_everywhere(host):
        names.add(_bare(socket.gethostname()))
    return frozenset(n for n in names if n)


def listens_everywhere(host: str) -> bool:
    """Whether ``host`` is the any-address (0.0.0.0, ::): the server is reached by any of this machine's
    addresses, so any IP address may name it (a rebinding attack needs a name, never an address)."""
    return _bare(host) in ("0.0.0.0", "::", "")


def check_allowed_host(name: str) -> str:
    """An ``--allow-host`` value as the Host header would carry it, or a ConfigError saying what is wrong."""
    bare = _bare(name)
    if not bare or any(c in bare for c in "/@ \t") or (":" in bare and not _is_ip(bare)):
        raise ConfigError(f"--allow-host {name!r} is not a host name: give the name alone, as a browser's address "
                          "bar shows it, without scheme, port or path (e.g. --allow-host rollscope.lab.example)")
    return bare


def _bare(name: str) -> str:
    return name.strip().strip("[]").rstrip(".").lower()


def _host_of(netloc: str) -> str:
    """The name in a Host header or an origin's ``host[:port]`` (``[v6]:port`` too)."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1:].split("]", 1)[0]
    return (netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc).rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class Gate:
    """ASGI middleware in front of the Gradio app: who may talk to the server at all.

    - The Host header must name this server (``names``; any IP address when it listens on every
      interface): a web page whose name was made to resolve here (DNS rebinding) gets a 421 that says
      to use ``--allow-host``.
    - A request from another origin (its ``Origin`` not this server's own) is refused with a 403, except
      the front end's static files; so no other page can drive the API with the user's browser.
    - With a login (``guard``), only the login page, /login and the static files answer without a
      session; the login page is sent without Gradio's API description; logins are counted per client
      address (``LoginGuard``).
    """

    def __init__(self, app: Any, names: frozenset[str], *, any_address: bool = False,
                 allowed: frozenset[str] = frozenset(), guard: LoginGuard | None = None) -> None:
        self.app = app
        self.names = names
        self.any_address = any_address
        self.allowed = allowed
        self.guard = guard
        self.sessions: set[str] = set()
        """Session tokens Gradio's /login handed out (read from its answers), dropped on /logout."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path = scope.get("path", "")
        method = scope.get("method", "GET")
        static = method in ("GET", "HEAD") and path.startswith(STATIC)
        host = headers.get("host", "")
        name = _host_of(host)
        if name not in self.names and not (self.any_address and _is_ip(name)):
            shown = name[:100] or "(none)"
            await _refuse(scope, send, 421, f"rollscope: this server does not answer to the name {shown} in the "
                          f"request's Host header; if you reach it by that name, start it with --allow-host {shown}")
            return
        origin = headers.get("origin")
        if origin is not None and not static and not self._same_origin(origin, host):
            await _refuse(scope, send, 403, f"rollscope: a request from another site ({origin[:100]}) is refused: "
                          "open the dashboard itself; if a proxy serves it under another name, start it with "
                          "--allow-host NAME")
            return
        if self.guard is None or static:
            await self.app(scope, receive, send)
            return
        tokens = _session_tokens(headers.get("cookie", ""))
        logged_in = any(t in self.sessions for t in tokens)
        if path in LOGIN and method == "POST":
            client = scope.get("client")
            reset = CLIENT.set(client_key(client[0] if client else None))
            try:
                await self.app(scope, receive, self._keep_session(send))
            finally:
                CLIENT.reset(reset)
        elif logged_in:
            if path.rstrip("/") == "/logout":
                self.sessions.difference_update(tokens)
            await self.app(scope, receive, send)
        elif path == "/" and method in ("GET", "HEAD"):
            await self._login_page(scope, receive, send)
        else:
            await _refuse(scope, send, 401, "rollscope: log in first: open the dashboard's address in a browser")

    def _same_origin(self, origin: str, host: str) -> bool:
        netloc = origin.partition("://")[2].lower()
        return bool(netloc) and (netloc == host.lower() or _host_of(netloc) in self.allowed)

    def _keep_session(self, send: Any) -> Any:
        async def keep(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 200:
                for k, v in message.get("headers", []):
                    if k.lower() == b"set-cookie":
                        self.sessions.update(_session_tokens(v.decode("latin-1").split(";", 1)[0]))
            await send(message)

        return keep

    async def _login_page(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Gradio's page for someone not logged in (its login form), without the API description it embeds."""
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]}
        start: dict[str, Any] = {}
        body = bytearray()

        async def collect(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                body.extend(message.get("body", b""))

        await self.app(scope, receive, collect)
        page, found = _API_INFO.subn(b'window.gradio_api_info = {"named_endpoints": {}, "unnamed_endpoints": {}};</script>', bytes(body))
        if not found and b"named_endpoints" in page:
            await _refuse(scope, send, 500, "rollscope: this Gradio's login page cannot be served without its API "
                          "description; install the Gradio version pyproject.toml names")
            return
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(page)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": page if scope.get("method") != "HEAD" else b""})


def _session_tokens(cookie: str) -> set[str]:
    """The values of Gradio's session cookies in a Cookie (or Set-Cookie) header."""
    pairs = (part.strip().partition("=") for part in cookie.split(";"))
    return {value.strip('"') for name, _, value in pairs if name.startswith(SESSION_COOKIE) and value}


async def _refuse(scope: dict[str, Any], send: Any, status: int, text: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": text[:120]})
        return
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
