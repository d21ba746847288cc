"""Worker processes die with their parent: the real command in a subprocess, its children found, the parent
stopped with SIGTERM, SIGINT or SIGKILL, and every child gone within a few seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .fixtures_formats import synthetic_slime_samples, write_slime_dump
from .synthetic import synthetic_episodes

ROOT = Path(__file__).resolve().parents[1]
GONE_S = 5.0


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (psutil when installed, else /proc)."""
    try:
        import psutil
    except ImportError:
        parents: dict[int, int] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        out, todo = set(), [pid]
        while todo:
            p = todo.pop()
            kids = {c for c, pp in parents.items() if pp == p}
            out |= kids
            todo.extend(kids)
        return out
    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped is gone: it holds no memory and runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _start(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "engine.cli", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for_workers(proc: subprocess.Popen[str], n: int, within: float = 60.0) -> set[int]:
    """The parent's children once ``n`` spawned workers are among them."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        kids = _children(proc.pid)
        workers = [k for k in kids if "spawn_main" in _cmdline(k)]
        if len(workers) >= n:
            return kids
        if proc.poll() is not None:
            pytest.fail(f"the command ended before its workers were seen: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    pytest.fail("no workers started")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _all_gone(kids: set[int]) -> set[int]:
    end = time.monotonic() + GONE_S
    while time.monotonic() < end:
        left = {k for k in kids if _alive(k)}
        if not left:
            return left
        time.sleep(0.1)
    return {k for k in kids if _alive(k)}


def test_kill_9_of_an_import_with_workers_leaves_no_worker_behind(tmp_path):
    path = tmp_path / "many.jsonl"
    lines = "".join(json.dumps(ep.to_dict()) + "\n" for ep in synthetic_episodes(300))
    path.write_text(lines * 10, encoding="utf-8")  # long enough to be killed mid-way
    proc = _start("import", str(path), "--db", str(tmp_path / "x.db"), "--check", "--workers", "2", "--quiet")
    try:
        kids = _wait_for_workers(proc, 2)
        proc.kill()
        proc.wait(10)
        left = _all_gone(kids)
        assert not left, [(k, _cmdline(k)) for k in left]
    finally:
        for k in _children(proc.pid):
            os.kill(k, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["TERM", "INT", "KILL"])
def test_a_stopped_watch_leaves_no_worker_or_resource_tracker_behind(tmp_path, sig):
    folder = tmp_path / "run"
    write_slime_dump(folder / "0.pt", synthetic_slime_samples(24, 96, prompt_len=16))
    proc = _start("watch", str(folder), "--format", "slime", "--db", str(tmp_path / "x.db"), "--workers", "2",
                  "--interval", "0.2")
    try:
        assert proc.stdout is not None and "0.pt: read: 24 new" in proc.stdout.readline()
        kids = _wait_for_workers(proc, 2, within=10)  # idle now, waiting for the next dump
        proc.send_signal(sig)
        proc.wait(15)
        left = _all_gone(kids)
        assert not left, [(k, _cmdline(k)) for k in left]
        if sig != signal.SIGKILL:
            assert proc.returncode in (0, 128 + signal.SIGTERM), proc.stderr.read() if proc.stderr else ""
    finally:
        for k in _children(proc.pid):
            os.kill(k, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
