"""Partial states are said as they are: a damaged database is one line naming the file and the way to recover
it, never a traceback or an episode stored ``failed``; a dump refused part way says what of it is stored."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engine import Store
from engine.cli.main import main

from .fixtures_formats import Boom, slime_sample, synthetic_slime_samples, write_slime_dump
from .synthetic import synthetic_episodes


def _damaged(tmp_path: Path) -> Path:
    """A database of 40 episodes whose episodes' primary-key index has two pages overwritten."""
    db = tmp_path / "x.db"
    store = Store(db)
    list(store.save_batches(synthetic_episodes(40)))
    store.close()
    with sqlite3.connect(db) as c:
        pages = [p for (p,) in c.execute("SELECT pageno FROM dbstat WHERE name = 'sqlite_autoindex_episodes_1'")]
        size = c.execute("PRAGMA page_size").fetchone()[0]
    c.close()
    data = bytearray(db.read_bytes())
    for p in pages[:2]:
        data[(p - 1) * size : p * size] = b"\xff" * size
    db.write_bytes(bytes(data))
    return db


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    return _damaged(tmp_path_factory.mktemp("damaged"))


@pytest.mark.parametrize("command", ["ls", "export", "check", "run"])
def test_a_damaged_database_is_one_line_naming_the_file_and_the_recovery(damaged, tmp_path, capsys, command):
    db = str(damaged)
    argv = {"ls": ["ls", "--db", db], "export": ["export", "--db", db, "-o", str(tmp_path / "o.jsonl")],
            "check": ["check", db, "--workers", "1"],
            "run": ["run", "--env", "math", "--tasks", "0:2", "--policy", "scripted", "--db", db]}[command]
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rollscope") or "Error" in line]
    assert err == [f"rollscope: error: the database {db} is damaged (database disk image is malformed): recover what "
                   f"it still holds with `sqlite3 {db} .recover | sqlite3 recovered.db`, then use --db recovered.db"]


def test_a_dump_refused_late_says_how_many_of_its_samples_are_stored_and_in_which_run(tmp_path, capsys):
    marker = tmp_path / "pwned"
    evil = {**slime_sample([1, 2, 3], 1, index=150), "payload": Boom(marker)}  # shaped like the others but for this
    samples = [*synthetic_slime_samples(150, 64, prompt_len=16), evil]
    dump = write_slime_dump(tmp_path / "late.pt", samples)
    db = tmp_path / "x.db"
    assert main(["import", str(dump), "--format", "slime", "--db", str(db), "--run", "step-7", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"rollscope: error: {dump}: refusing to unpickle" in err
    assert (f"; 150 episodes read from this file before that are stored in {db}, in run step-7 (150 new, 0 already "
            "there)") in err
    assert not marker.exists()
    # Again, without a run: the same samples are there already, and said to be in no run.
    assert main(["import", str(dump), "--format", "slime", "--db", str(db), "--quiet"]) == 2
    assert ("150 episodes read from this file before that are stored in "
            f"{db}, in no run (import with --run NAME to put them in one) (0 new, 150 already there)"
            ) in capsys.readouterr().err
    store = Store(db)
    assert store.count() == 150
    store.close()
