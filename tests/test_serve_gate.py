"""Who ``rollscope serve`` answers, probed over HTTP on real servers: the Host header (DNS rebinding),
the Origin (other sites driving the API), a session under --auth, failed logins counted per address."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from dashboard.server import FREE_FAILURES

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _outside_address() -> str | None:
    """An address of this machine that is not loopback, as clients on the network would reach it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.123", 9))  # no packet is sent: this only picks the route's source address
            address = str(s.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@dataclass
class Served:
    proc: subprocess.Popen
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _start(tmp: Path, *args: str) -> Served:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--db", str(tmp / f"{port}.db"), "--port",
                             str(port), *args], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    return Served(proc, port)


def _wait(served: Served) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"{served.base}/", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert served.proc.poll() is None and time.monotonic() < deadline, served.proc.stdout.read() \
            if served.proc.stdout else ""
        time.sleep(0.5)


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[tuple[Served, Served]]:
    """(open, guarded): loopback without a login and one more name allowed; every interface with a login.
    Both start at once, so their start-up overlaps."""
    tmp = tmp_path_factory.mktemp("serve")
    started = [_start(tmp, "--allow-host", "rollscope.test"), _start(tmp, "--host", "0.0.0.0", "--auth", "ann:pw")]
    try:
        for s in started:
            _wait(s)
        yield started[0], started[1]
    finally:
        for s in started:
            s.proc.kill()
            s.proc.wait()


def test_a_request_naming_another_host_is_refused_with_what_to_do(servers):
    open_, guarded = servers
    for served in (open_, guarded):
        for method, path in [("GET", "/"), ("GET", "/gradio_api/info"), ("POST", "/gradio_api/queue/join")]:
            r = httpx.request(method, f"{served.base}{path}", headers={"Host": f"evil.example:{served.port}"})
            assert r.status_code == 421 and "--allow-host evil.example" in r.text and len(r.text.splitlines()) == 1
            assert "named_endpoints" not in r.text
    for host in ("127.0.0.1", "localhost", "[::1]", "LOCALHOST.", "rollscope.test"):
        r = httpx.get(f"{open_.base}/gradio_api/info", headers={"Host": f"{host}:{open_.port}"})
        assert r.status_code == 200 and "named_endpoints" in r.text, host
    # Listening on every interface: any address names it, a name must be allowed.
    assert httpx.get(f"{guarded.base}/", headers={"Host": f"10.1.2.3:{guarded.port}"}).status_code == 200
    assert httpx.get(f"{guarded.base}/", headers={"Host": "rollscope.test"}).status_code == 421


def test_calls_from_another_origin_are_refused(servers):
    open_, _ = servers
    join = f"{open_.base}/gradio_api/queue/join"
    for origin in ("http://evil.example", "null", f"http://localhost:{open_.port + 1}", "http://127.0.0.1"):
        r = httpx.post(join, json={}, headers={"Origin": origin})
        assert r.status_code == 403 and "another site" in r.text, origin
        assert httpx.get(f"{open_.base}/gradio_api/info", headers={"Origin": origin}).status_code == 403
    for origin in (f"http://127.0.0.1:{open_.port}", "https://rollscope.test"):  # itself; an allowed proxy's name
        assert httpx.post(join, json={}, headers={"Origin": origin}).status_code not in (401, 403, 421), origin
    # The front end's static files are the same for every site.
    assert httpx.get(f"{open_.base}/theme.css", headers={"Origin": "http://evil.example"}).status_code == 200


def test_under_a_login_nothing_but_the_login_page_answers_without_a_session(servers):
    _, guarded = servers
    body = {"event_id": "x", "session_hash": "x", "fn_index": 0}  # what /cancel and /reset accept
    for method, path in [("POST", "/gradio_api/cancel"), ("POST", "/gradio_api/reset"), ("GET", "/config"),
                         ("GET", "/gradio_api/info"), ("GET", "/gradio_api/openapi.json"), ("POST", "/gradio_api/upload"),
                         ("GET", "/gradio_api/file=/etc/hostname"), ("POST", "/gradio_api/queue/join"),
                         ("GET", "/gradio_api/queue/data?session_hash=x"), ("GET", "/gradio_api/heartbeat/x"),
                         ("GET", "/gradio_api/startup-events"), ("GET", "/monitoring/x"), ("GET", "/gradio_api/user"),
                         ("POST", "/gradio_api/call/open_typed"), ("GET", "/gradio_api/runs")]:
        r = httpx.request(method, f"{guarded.base}{path}", json=body)
        assert r.status_code == 401 and r.text.startswith("rollscope: log in first"), (method, path, r.status_code)
    page = httpx.get(f"{guarded.base}/")
    assert page.status_code == 200 and '"auth_required":true' in page.text.replace(" ", "")
    assert len(page.content) < 16_000 and "named_endpoints\": {}" in page.text and "open_typed" not in page.text
    assert httpx.get(f"{guarded.base}/theme.css").status_code == 200


def test_a_session_opens_every_route_until_logout(servers):
    _, guarded = servers
    with httpx.Client(base_url=guarded.base) as client:
        assert client.post("/login", data={"username": "ann", "password": "pw"}).json() == {"success": True}
        config = client.get("/config")
        assert config.status_code == 200 and "open_typed" in config.text
        page = client.get("/")
        assert "open_typed" in page.text and len(page.content) > 100_000
        assert client.post("/gradio_api/reset", json={"event_id": "x"}).status_code not in (401, 403)
        client.get("/logout")
        assert client.get("/config").status_code == 401


@pytest.mark.solo
def test_failed_logins_from_one_address_do_not_slow_the_owners(servers):
    _, guarded = servers
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no address but loopback: clients cannot come from two addresses")
    times = []
    for _ in range(FREE_FAILURES + 2):  # the last two wait 1 s and 2 s
        t0 = time.perf_counter()
        r = httpx.post(f"http://{outside}:{guarded.port}/login", data={"username": "ann", "password": "guess"},
                       timeout=30)
        times.append(time.perf_counter() - t0)
        assert r.status_code == 400
    assert times[FREE_FAILURES] >= 1.0 and times[FREE_FAILURES + 1] >= 2.0
    t0 = time.perf_counter()
    ok = httpx.post(f"{guarded.base}/login", data={"username": "ann", "password": "pw"}, timeout=30)
    assert ok.status_code == 200 and time.perf_counter() - t0 < 1.0  # the owner, on this machine, waits for no one


def test_an_allowed_host_must_be_a_name(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "serve", "--db", str(tmp_path / "x.db"), "--allow-host",
                           "https://x.example/"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("rollscope: error: --allow-host 'https://x.example/' is not")
    assert "e.g. --allow-host" in proc.stderr and not (tmp_path / "x.db").exists()
