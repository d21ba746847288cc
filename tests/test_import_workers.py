"""A JSONL file read on worker processes (each parses lines and packs their rows, the calling process writes them)
stores what the same file read in one process stores, row for row, and says the same of its bad lines; the
full-text index, which the writer fills, stays equal to the texts it indexes."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.checks.fanout import Fanout
from engine.errors import FormatError
from engine.formats import export, import_path, jsonl
from engine.formats.jsonl import LINES_A_CHUNK
from engine.store import EpisodeFilter, Store
from tests.synthetic import synthetic_episode, synthetic_episodes

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
N = 2 * LINES_A_CHUNK * 2 + 40  # more than the two workers' first round: the pool starts
# Columns written at the moment of writing, not read from the record.
_NOW = {"updated_at"}


def _tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table but the full-text index's own (checked apart), without the write times."""
    conn = sqlite3.connect(path)
    out = {}
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                        "'search_fts%' AND name NOT LIKE 'sqlite_%' AND name != 'migrations'")]
    for name in names:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({name})") if r[1] not in _NOW]
        out[name] = sorted(conn.execute(f"SELECT {', '.join(cols)} FROM {name}").fetchall(), key=repr)
    conn.close()
    return out


def _index_is_whole(path: Path) -> None:
    """SQLite's own check of an external-content full-text index: every stored text indexed, nothing else."""
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO search_fts (search_fts, rank) VALUES ('integrity-check', 1)")
    conn.close()


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """N episodes with, among them, a blank line, a line that is not JSON, a record missing a field, a line over a
    1 MB record limit, a record holding a lone surrogate and one with an integer SQLite cannot hold."""
    d = tmp_path_factory.mktemp("dump")
    good = d / "good.jsonl"
    export(synthetic_episodes(N), "jsonl", good)
    lines = good.read_text(encoding="utf-8").splitlines()
    broken = json.loads(lines[7])
    del broken["turns"]
    odd = json.loads(lines[70])
    user = next(m for m in odd["messages"] if m["role"] == "user")  # the opening: indexed from the messages
    user["content"] += " lone \ud800 surrogate"
    lines[7] = json.dumps(broken)
    lines[20] = "{not json"
    lines[33] = ""
    lines[50] = json.dumps({"id": "huge", "pad": "x" * (2 << 20)})
    lines[70] = json.dumps(odd)  # ASCII escapes: a lone surrogate is valid JSON
    too_big = json.loads(lines[89])
    too_big["sample_index"] = 2**70  # past 64 bits: refused as it is read, as SQLite could not hold it
    lines[89] = json.dumps(too_big)
    path = d / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """These files are small: read on the workers all the same."""
    monkeypatch.setattr(jsonl, "WORKERS_FROM_BYTES", 0)


def _import(path: Path, db: Path, workers: int, **kw: object) -> Any:
    store = Store(db)
    with Fanout(workers) as pool:
        report = import_path(path, "jsonl", store, fanout=pool, max_record_mb=1.0, **kw)
        assert (pool._pool is not None) == (workers > 1)  # the workers read it, or this process alone
    store.close()
    return report


def test_read_on_workers_stores_what_one_process_stores(dump: Path, tmp_path: Path) -> None:
    one = _import(dump, tmp_path / "one.db", 1, run_id="imported")
    two = _import(dump, tmp_path / "two.db", 2, run_id="imported")
    assert [str(e) for e in two.errors] == [str(e) for e in one.errors]
    assert len(one.errors) == 4 and [e.where for e in one.errors] == [f"{dump}:{k}" for k in (8, 21, 51, 90)]
    assert "over the 1 MB record limit" in str(one.errors[2])
    assert str(one.errors[3]).startswith(f"{dump}:90: field 'sample_index': must be an integer within 64 bits")
    assert (two.new, two.already_present, two.files) == (one.new, one.already_present, one.files) == \
        (N - 5, 0, [str(dump)])
    rows_one, rows_two = _tables(tmp_path / "one.db"), _tables(tmp_path / "two.db")
    assert rows_one.keys() == rows_two.keys() and len(rows_one["episodes"]) == N - 5
    for name in rows_one:
        assert rows_two[name] == rows_one[name], name
    for db in ("one.db", "two.db"):
        _index_is_whole(tmp_path / db)
        store = Store(tmp_path / db, read_only=True)
        found = store.page_episodes(EpisodeFilter(text="lone \ufffd surrogate"), limit=5).rows
        assert [r.id for r in found] == [synthetic_episode(70).id]
        assert store.get_episode(synthetic_episode(70).id).findings[-1].kind == "text_replaced"
        # The run named on the command line is each episode's that named none.
        assert {e.run_id or "imported" for e in synthetic_episodes(N)} == \
            {r[0] for r in store.db.execute("SELECT DISTINCT run_id FROM episodes")}
        store.close()


def test_a_file_read_again_on_workers_is_compared_with_what_is_stored(dump: Path, tmp_path: Path) -> None:
    """Imported again, each episode is read again whole and compared, as in one process: the same ones are left as
    they are; a changed one is replaced, keeping the star and tags a person gave it (and so is the one whose
    ``text_replaced`` finding names the file, now another)."""
    lines = dump.read_text(encoding="utf-8").splitlines()
    changed = json.loads(lines[3])
    changed["reason"] = "changed in the dump"
    lines[3] = json.dumps(changed)
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n", encoding="utf-8")
    first = synthetic_episode(3)
    said = {}
    for workers in (1, 2):
        db = tmp_path / f"again{workers}.db"
        _import(dump, db, workers)
        store = Store(db)
        store.set_starred(first.id, True)
        store.set_tags(first.id, ["looked-at"])
        store.close()
        again = _import(dump, db, workers)
        third = _import(edited, db, workers)
        said[workers] = [(r.new, r.already_present, r.replaced) for r in (again, third)]
        store = Store(db, read_only=True)
        ep = store.get_episode(first.id)
        assert ep.reason == "changed in the dump" and ep.starred and "looked-at" in ep.tags
        store.close()
        _index_is_whole(db)
    assert said[2] == said[1] == [(0, N - 5, 0), (0, N - 5, 2)]
    assert _tables(tmp_path / "again1.db") == _tables(tmp_path / "again2.db")


def test_the_writer_keeps_the_full_text_index_whole(tmp_path: Path) -> None:
    """Without the trigger of schema 13, every way of writing texts (whole, in batches, turn by turn, again) leaves
    the index equal to the stored texts, and a search finds what was written."""
    store = Store(tmp_path / "s.db")
    assert store.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_texts_ai'").fetchone() is None
    eps = list(synthetic_episodes(30))
    store.save_episodes(eps[:10])
    for ep in eps[10:12]:  # turn by turn, as a live run writes
        for k in range(len(ep.turns)):
            store.save_turn(ep.evolve(turns=ep.turns[: k + 1]), ep.turns[k])
        store.finish_episode(ep)
    list(store.save_batches(eps[12:]))
    store.save_episode(eps[3].evolve(reason="written again"))
    store.close()
    _index_is_whole(tmp_path / "s.db")
    store = Store(tmp_path / "s.db", read_only=True)
    needle = eps[20].turns[0].generation.text[:40]
    assert eps[20].id in {r.id for r in store.page_episodes(EpisodeFilter(text=needle), limit=50).rows}
    store.close()


def test_a_schema_13_file_is_indexed_by_the_writer_after_its_step(tmp_path: Path) -> None:
    path = tmp_path / "thirteen.sqlite"
    shutil.copy(GOLDEN / "dbschema13.sqlite", path)
    store = Store(path)
    assert store.applied == ["0021_search_filled_by_writer", "0022_counts_at_commit",
                             "0023_episodes_found_by_the_browse_index", "0024_findings_counted_without_notes",
                             "0025_checked"]
    ep = synthetic_episode(5000)
    store.save_episode(ep)
    assert ep.id in {r.id for r in store.page_episodes(EpisodeFilter(text=ep.turns[-1].generation.text[:30]),
                                                        limit=20).rows}
    store.close()
    _index_is_whole(path)


def test_the_command_line_reads_a_jsonl_file_on_its_workers(dump: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Read on two workers as the file holds more than ``WORKERS_FROM_BYTES`` (lines over the record limit, skipped
    unread, make it so); a file under it is read in the process alone, which says the same."""
    monkeypatch.undo()
    pad = json.dumps({"id": "pad", "x": "y" * (3 << 20)})
    said = {}
    for name, extra in (("big", f"{pad}\n" * 3), ("small", "")):
        # Each file read by the same relative name, so the positions the records are said to come from agree.
        folder = tmp_path / name
        folder.mkdir()
        (folder / "dump.jsonl").write_text(dump.read_text(encoding="utf-8") + extra, encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "engine.cli", "import", "dump.jsonl", "--db", "x.db", "--workers",
                               "2", "--max-record-mb", "1", "--quiet"], capture_output=True, text=True, cwd=folder,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
        assert proc.returncode == 0, proc.stderr
        said[name] = proc.stderr
        _index_is_whole(folder / "x.db")
    assert (tmp_path / "big" / "dump.jsonl").stat().st_size >= jsonl.WORKERS_FROM_BYTES > dump.stat().st_size
    big, small = said["big"].splitlines(), said["small"].splitlines()
    extra = [x for x in big if x not in small]  # (a line that could not be stored is listed once its batch is written)
    # The same note on both: the synthetic episodes were never checked.
    stored = Store(tmp_path / "small" / "x.db")
    assert [x for x in small if x.startswith("rollscope: note: ")] == [
        f"rollscope: note: {stored.count()} new episodes not checked: `rollscope check x.db` runs the fidelity checks "
        '(until then `ls` and Browse say "not checked" where the findings go; --check checks as it imports)']
    stored.close()
    assert len(big) == 8 and len(small) == 5 and set(small) <= set(big)
    assert len(extra) == 3 and all("over the 1 MB record limit" in x for x in extra)
    assert _tables(tmp_path / "big" / "x.db") == _tables(tmp_path / "small" / "x.db")


def test_little_jsonl_is_read_in_the_writing_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    small = tmp_path / "small.jsonl"
    export(synthetic_episodes(N), "jsonl", small)
    assert not jsonl.worth_workers(small) and not jsonl.worth_workers(tmp_path)
    (tmp_path / "more.jsonl").write_bytes(b"\n" * jsonl.WORKERS_FROM_BYTES)
    assert jsonl.worth_workers(tmp_path)  # a folder's files together


_pack_chunks = jsonl.pack_chunks


def _dies_at_line_100(chunks: list[list[tuple[object, ...]]]) -> list[object]:
    """A worker's part that is killed at line 100 (as the kernel kills a process out of memory)."""
    if any(str(line[0]).endswith(":100") for chunk in chunks for line in chunk):
        os._exit(9)
    return jsonl.pack_chunks(chunks)  # type: ignore[arg-type]


def test_a_worker_that_dies_stops_the_import_saying_what_is_stored(dump: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl, "pack_chunks", _dies_at_line_100)
    db = tmp_path / "died.db"
    store = Store(db)
    with Fanout(2) as pool, pytest.raises(FormatError) as caught:
        import_path(dump, "jsonl", store, fanout=pool, max_record_mb=1.0)
    said = str(caught.value)
    stored = store.count()
    store.close()
    # The pool breaks: the chunks not yet back (the one that held line 100, and those before it the other worker had
    # not finished) are lost; every episode of the lines before the first of them is stored, and the error says so.
    line = int(said.split(": a worker process reading this file died")[0].rsplit(":", 1)[1])
    assert line in (1, 33, 65, 97) and said.startswith(f"{dump}:{line}: ") and "--workers 1" in said
    not_episodes = {8, 21, 34, 51, 90}  # malformed, not JSON, blank, over the limit, not storable
    assert stored == len(set(range(1, line)) - not_episodes)
    if stored:
        assert f"; {stored} episodes read from this file before that are stored in {db}" in said
    monkeypatch.setattr(jsonl, "pack_chunks", _pack_chunks)
    again = _import(dump, db, 2)  # imported again: the stored ones found, the rest written
    assert (again.new, again.already_present) == (N - 5 - stored, stored)
