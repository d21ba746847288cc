"""``rollscope serve`` as a process: an IPv6 host, throttled logins (per address), a private folder removed on
SIGTERM. What the server answers to is tests/test_serve_gate.py."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from dashboard.server import FREE_FAILURES, LOCKOUT_FAILURES, LOCKOUT_S, MAX_DELAY_S, PREFIX, LoginGuard, client_key

ROOT = Path(__file__).resolve().parents[1]


def _free_port_v6() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


def _guard() -> tuple[LoginGuard, list[float], list[float]]:
    now = [0.0]
    waited: list[float] = []

    async def sleep(s):
        waited.append(s)
        now[0] += s

    return LoginGuard("ann", "pw", clock=lambda: now[0], sleep=sleep), now, waited


def test_logins_slow_down_then_lock_out_one_address_and_a_right_one_resets():
    guard, now, waited = _guard()
    eve, bob = "203.0.113.9", "198.51.100.4"

    async def attempts():
        results = [await guard.check("ann", "wrong", eve) for _ in range(LOCKOUT_FAILURES - 1)]
        assert await guard.check("ann", "pw", eve) is True and guard.failures(eve) == 0  # a right login resets
        results += [await guard.check("eve", "guess", eve) for _ in range(LOCKOUT_FAILURES)]
        locked = await guard.check("ann", "pw", eve)  # locked out: even the right password is refused
        others = (await guard.check("ann", "pw", bob), await guard.check("ann", "pw", None))  # but nobody else
        now[0] += LOCKOUT_S
        after = await guard.check("ann", "pw", eve)
        return results, locked, others, after

    results, locked, others, after = asyncio.run(attempts())
    assert not any(results) and locked is False and others == (True, True) and after is True
    assert waited[: LOCKOUT_FAILURES - 1 - FREE_FAILURES] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0][: LOCKOUT_FAILURES - 1 - FREE_FAILURES]


def test_logins_the_server_cannot_tell_apart_slow_down_but_never_lock_the_owner_out():
    guard, now, waited = _guard()

    async def attempts():
        wrong = [await guard.check("ann", "guess", None) for _ in range(3 * LOCKOUT_FAILURES)]
        before = now[0]
        right = await guard.check("ann", "pw", None)
        return wrong, right, now[0] - before

    wrong, right, wait = asyncio.run(attempts())
    assert not any(wrong) and right is True and wait <= MAX_DELAY_S


def test_the_address_a_login_is_counted_against():
    assert client_key("203.0.113.9") == "203.0.113.9" and client_key("::ffff:203.0.113.9") == "203.0.113.9"
    assert client_key("2001:db8:1:2:3:4:5:6") == client_key("2001:db8:1:2::9") == "2001:db8:1:2::/64"
    assert client_key("127.0.0.1") is client_key("::1") is client_key(None) is client_key("unix-socket") is None


@pytest.mark.solo
def test_serve_on_ipv6_with_a_login_and_a_private_folder_removed_on_sigterm(tmp_path):
    port = _free_port_v6()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "serve", "--db", str(tmp_path / "x.db"), "--host", "::1", "--port",
         str(port), "--auth", "ann:pw"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://[::1]:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/", timeout=2).status_code in (200, 401):
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.5)
        folders = list(Path(tempfile.gettempdir()).glob(f"{PREFIX}{proc.pid}-*"))
        assert len(folders) == 1 and stat.S_IMODE(folders[0].stat().st_mode) == 0o700
        times = []
        for _ in range(FREE_FAILURES + 2):
            t0 = time.perf_counter()
            r = httpx.post(f"{base}/login", data={"username": "ann", "password": "wrong"}, timeout=30)
            times.append(time.perf_counter() - t0)
            assert r.status_code == 400
        assert max(times[:FREE_FAILURES]) < 1.0 and times[FREE_FAILURES] >= 1.0 and times[FREE_FAILURES + 1] >= 2.0
        ok = httpx.post(f"{base}/login", data={"username": "ann", "password": "pw"}, timeout=30)
        assert ok.status_code == 200 and ok.json() == {"success": True}
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert not folders[0].exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_on_a_busy_port_says_so_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"}
        proc = subprocess.run([sys.executable, "-m", "engine.cli", "serve", "--db", str(tmp_path / "x.db"), "--port",
                               str(port)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"rollscope: error: port {port} on 127.0.0.1 is in use (another Rollscope or "
                                   "server?): stop it, or choose another port with --port")
    assert not (tmp_path / "x.db").exists()
