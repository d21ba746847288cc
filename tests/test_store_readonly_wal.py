"""A read-only folder whose WAL holds committed changes a killed writer left: read through it, or say so.

File permissions only hold for a process without CAP_DAC_OVERRIDE: as root the commands run under
``setpriv`` with that capability dropped (skipped where setpriv is missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine import Store
from engine.store.readonly import wal_commits

from .test_cli import rollscope
from .test_hostile_files import _unprivileged

ROOT = Path(__file__).resolve().parents[1]
KILLED_WRITER = textwrap.dedent("""
    import dataclasses, os, sys
    from engine import Store
    store = Store(sys.argv[1])
    store.db.conn.execute("PRAGMA wal_autocheckpoint=0")  # as a writer killed before its next checkpoint
    ep = store.get_episode(store.list_episodes()[0].id)
    for i in range(int(sys.argv[2])):
        store.save_episode(dataclasses.replace(ep, id=f"late-{i}"))
    os.kill(os.getpid(), 9)
""")


@pytest.fixture(scope="module")
def killed_writer(tmp_path_factory) -> Path:
    """x.db with 2 episodes, and a WAL holding 3 more committed by a writer that was then killed."""
    db = tmp_path_factory.mktemp("writer") / "x.db"
    rollscope("run", "--env", "math", "--tasks", "0:2", "--db", str(db), "--quiet")
    Store(db).close()
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(db), "3"], cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    return db


def _read_only_folder(killed_writer: Path, tmp_path: Path, shm: str) -> Path:
    """A copy of ``killed_writer``'s folder nobody may write, its -shm index ``missing`` or ``unreadable``."""
    folder = tmp_path / "ro"
    shutil.copytree(killed_writer.parent, folder)
    db = folder / "x.db"
    index = folder / "x.db-shm"
    if shm == "missing":
        index.unlink()
    for p in folder.iterdir():
        p.chmod(0 if p == index else 0o444)
    folder.chmod(0o555)
    return db


def _as_unprivileged(*args: str, tmpdir: Path) -> subprocess.CompletedProcess:
    """The command run without file-permission overrides, its temporary files in ``tmpdir`` (Python's
    tempfile skips a TMPDIR it cannot write, so the folder is set in the process itself)."""
    run = f"import sys, tempfile; tempfile.tempdir = {str(tmpdir)!r}; from engine.cli import main; sys.exit(main())"
    return subprocess.run([*_unprivileged(), sys.executable, "-c", run, *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("shm", ["missing", "unreadable"])
def test_a_read_only_folder_with_a_killed_writers_wal_shows_every_committed_episode(killed_writer, tmp_path, shm):
    prefix = _unprivileged()
    assert wal_commits(killed_writer) > 3  # a transaction for each episode saved, one for the statistics on opening
    db = _read_only_folder(killed_writer, tmp_path, shm)
    before = sorted((p.name, p.read_bytes()) for p in db.parent.iterdir() if p.name != "x.db-shm")
    temp = tmp_path / "temp"
    temp.mkdir()
    try:
        ls = _as_unprivileged("ls", "--db", str(db), tmpdir=temp)
        assert ls.returncode == 0 and "(5 of 5 episodes)" in ls.stdout, (prefix, ls.stdout, ls.stderr)
        assert "late-2" in ls.stdout and "not visible" not in ls.stderr
        shown = _as_unprivileged("show", "late-1", "--db", str(db), tmpdir=temp)
        assert shown.returncode == 0 and "late-1" in shown.stdout, shown.stderr
    finally:
        db.parent.chmod(0o755)
    assert list(temp.iterdir()) == []  # the private copy is gone with the process that read it
    assert sorted((p.name, p.read_bytes()) for p in db.parent.iterdir() if p.name != "x.db-shm") == before


def test_where_no_copy_can_be_made_it_says_how_many_committed_changes_it_cannot_show(killed_writer, tmp_path):
    _unprivileged()
    db = _read_only_folder(killed_writer, tmp_path, "missing")
    try:
        ls = _as_unprivileged("ls", "--db", str(db), tmpdir=tmp_path / "no-such-folder")
    finally:
        db.parent.chmod(0o755)
    assert ls.returncode == 0 and "(2 of 2 episodes)" in ls.stdout, ls.stderr
    assert ls.stderr.strip() == (f"rollscope: note: {wal_commits(db)} committed changes not visible: the folder is read-only (a writer "
                                 "left them in x.db-wal); open it once with write access to see them")
