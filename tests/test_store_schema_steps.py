"""What the schema's later steps leave: a read-only copy that lacks the derived ones still pages, the episodes are
found by their columns through the browse index alone (no query plan reads every episode row), and an episode's
findings count its errors and warnings, in a new file and in one written before."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from engine import MatchCount
from engine.errors import StoreError
from engine.records.episode import Status
from engine.store import EpisodeFilter, Store, migrations
from tests.test_store_paging import GOLDEN, varied


def test_a_read_only_copy_lacking_only_derived_steps_opens_and_pages_without_them(tmp_path: Path) -> None:
    path = tmp_path / "eight.sqlite"
    shutil.copy(GOLDEN / "dbschema8.sqlite", path)
    # 0013 adds an index, 0014 only marks the file, 0015 rewrites outcomes that readers compute again as they read,
    # 0016 adds figures read from the token arrays, 0017, 0019 and 0020 aggregates counted from the index, 0018 two
    # indexes, 0021 only changes who fills the search index, 0022 who counts a batch, 0023 drops indexes that the
    # browse index stands in for, 0024 counts findings without notes, and 0025 records which episodes the checks ran
    # on: readers do without all thirteen.
    store = Store(path, read_only=True)
    assert [m.name for m in migrations.pending(store.db)] == ["0013_run_time_index", "0014_prompt_pieces",
                                                              "0015_summed_outcomes", "0016_entropy_stats",
                                                              "0017_chart_stats", "0018_status_sort_indexes",
                                                              "0019_listing_stats", "0020_chart_totals",
                                                              "0021_search_filled_by_writer", "0022_counts_at_commit",
                                                              "0023_episodes_found_by_the_browse_index",
                                                              "0024_findings_counted_without_notes",
                                                              "0025_checked"]
    run = store.list_episodes(limit=1)[0].run_id
    flt = EpisodeFilter(run_id=run)
    page = store.page_episodes(flt, limit=2, matches=MatchCount(1, False))
    assert [r.id for r in page.rows] == [r.id for r in store.list_episodes(flt, limit=2)]
    # Without ``checked``, every episode reads as checked ("?": the version unknown), in the rows and the filters.
    assert {r.checked for r in page.rows} == {"?"}
    everything = store.count()
    assert (store.count(EpisodeFilter(checked=False)), store.count(EpisodeFilter(checked=True))) == (0, everything)
    assert store.count_upto(EpisodeFilter(checked=True, has_findings=False)).n == \
        store.count(EpisodeFilter(has_findings=False))
    store.close()


def _plans_reading_every_episode(conn: sqlite3.Connection, statements: list[str]) -> list[tuple[str, str]]:
    """The statements among ``statements`` (as traced, their values bound) whose query plan reads every row of
    ``episodes`` (each carries the episode's record, KBs): (statement, plan step)."""
    found = []
    for sql in statements:
        if not sql.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE", "WITH")):
            continue
        for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
            step = str(row[-1])
            if step.startswith("SCAN episodes") and "COVERING INDEX" not in step:
                found.append((sql, step))
    return found


def test_no_query_by_a_column_reads_every_episode_and_the_episodes_keep_only_their_key(tmp_path: Path) -> None:
    """``episodes`` holds each record: found by id alone. What finds episodes by their columns (an export's or a
    check's ids under a filter, an episode and its forks, a run's name, the running episodes at open) reads the
    browse index, and the episodes' own indexes by column are gone, in a new file and in one migrated."""
    old = tmp_path / "thirteen.sqlite"
    shutil.copy(GOLDEN / "dbschema13.sqlite", old)
    for path in (tmp_path / "new.db", old):
        store = Store(path)
        indexes = {r[0] for r in store.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'episodes' AND sql IS NOT NULL")}
        assert indexes == set(), (path.name, indexes)
        store.close()

    store = Store(tmp_path / "new.db")
    eps = [varied(i) for i in range(40)]
    fork = eps[5].evolve(id="fork-of-5", parent_id=eps[5].id, fork_turn=0)
    running = eps[6].evolve(id="still-running", status=Status.RUNNING)
    store.save_episodes([*eps, fork, running])
    traced: list[str] = []
    conns = [store.db.conn, *(store._reader(background=b)[0] for b in (False, True))]
    for conn in conns:
        conn.set_trace_callback(traced.append)
    try:
        run = next(e.run_id for e in eps if e.run_id)
        assert store.recover_interrupted() == 0  # this process runs it: left running
        by_run = store.episode_ids(EpisodeFilter(run_id=run))
        assert sorted(by_run) == sorted(e.id for e in eps if e.run_id == run)
        assert store.episode_ids(EpisodeFilter(family=eps[5].id)) == [eps[5].id, "fork-of-5"]
        assert [e.id for e in store.iter_episodes(EpisodeFilter(status=("running",)))] == ["still-running"]
        assert store.has_run(run) and not store.has_run("no-such-run")
        assert store.resolve_id("fork-of") == "fork-of-5" and store.resolve_id(eps[7].id) == eps[7].id
        for prefix, said in ((eps[7].id[:3], "is ambiguous"), ("fork-of-5x", "no episode"), ("", "is ambiguous")):
            with pytest.raises(StoreError, match=said):
                store.resolve_id(prefix)
    finally:
        for conn in conns:
            conn.set_trace_callback(None)
    assert len(traced) > 6
    assert _plans_reading_every_episode(store.db.conn, traced) == []
    store.close()


def test_an_episodes_findings_count_its_errors_and_warnings_not_its_notes(tmp_path: Path) -> None:
    """``n_findings`` (ls's and Browse's findings column, its sort and "has findings") counts what ``check`` and
    ``show`` list: errors and warnings. A note, severity info, is not one: a clean episode counts 0, in a new file and
    in one written before (``0024_findings_counted_without_notes`` counts them again)."""
    from engine.records.episode import Finding, Severity

    def counts(conn: sqlite3.Connection) -> dict[str, tuple[int, int, int]]:
        """Each episode's stored count, its findings of every severity, and those that are not notes."""
        return {r[0]: (r[1], r[2], r[3]) for r in conn.execute(
            "SELECT e.id, e.n_findings, (SELECT COUNT(*) FROM findings f WHERE f.episode_id = e.id), "
            "(SELECT COUNT(*) FROM findings f WHERE f.episode_id = e.id AND f.severity != 'info') FROM episodes e")}

    old = tmp_path / "thirteen.sqlite"
    shutil.copy(GOLDEN / "dbschema13.sqlite", old)
    conn = sqlite3.connect(old)
    before = counts(conn)
    conn.close()
    noted = [eid for eid, (n, every, _) in before.items() if n == every and every > 0]
    assert any(before[eid][2] < before[eid][1] for eid in noted)  # the golden file holds notes, counted
    store = Store(old)
    after = counts(store.db.conn)
    assert all(n == kept for n, _, kept in after.values()) and after.keys() == before.keys()
    assert {r[0]: r[1] for r in store.db.execute("SELECT id, n_findings FROM episode_index")} == \
        {eid: n for eid, (n, _, _) in after.items()}
    from tests.test_episode_stats import chart_maintained, chart_recount, maintained, recount

    assert maintained(store) == recount(old) and chart_maintained(store) == chart_recount(old)
    assert store.db.execute("SELECT COUNT(*) FROM count_mark").fetchone()[0] == 0
    store.set_starred(noted[0], True)  # the browse index follows a change again
    assert store.db.execute("SELECT starred FROM episode_index WHERE id = ?", [noted[0]]).fetchone()[0] == 1
    store.close()

    store = Store(tmp_path / "new.db")
    note = Finding("not_checked", Severity.INFO, "the tool schema was not recorded")
    warn = Finding("truncated_turn", Severity.WARNING, "turn 0 stopped on the length limit")
    clean, warned = varied(1).evolve(findings=(note,)), varied(2).evolve(findings=(note, warn))
    store.save_episodes([clean, warned])
    assert counts(store.db.conn) == {clean.id: (0, 1, 0), warned.id: (1, 2, 1)}
    assert [e.id for e in store.list_episodes(EpisodeFilter(has_findings=True))] == [warned.id]
    assert store.count(EpisodeFilter(finding_kind="not_checked")) == 2  # a note is still found by its kind
    store.close()


def test_an_episode_no_check_ran_on_reads_as_not_checked_not_as_clean(tmp_path: Path) -> None:
    """``checked`` (the checks' version, NULL where none ran) in the episodes and the browse index: filled by
    ``0025_checked`` from each record of a file written before (compressed, or text), kept by every write after, and
    read by the findings filter, ``ls`` and Browse's findings cell, which say "not checked" where a 0 would read as
    clean."""
    import subprocess
    import sys

    from dashboard.views.browse import render_table
    from engine.store import codec
    from tests.test_episode_stats import maintained, recount

    old = tmp_path / "fourteen.sqlite"
    shutil.copy(GOLDEN / "dbschema14.sqlite", old)
    conn = sqlite3.connect(old)
    records = {eid: codec.unpack_json(data) for eid, data in conn.execute("SELECT id, data FROM episodes")}
    text_row = "20d438f2cfbb52f6"  # checked, and its record stored as text (the SQL path of the fill)
    conn.execute("UPDATE episodes SET data = ? WHERE id = ?",
                 [codec.json_bytes(conn.execute("SELECT data FROM episodes WHERE id = ?", [text_row]).fetchone()[0])
                  .decode("utf-8"), text_row])
    # An empty version names no checks: it reads as none, in the record and in the column.
    blank = "e28fa3e34eb37b76"
    conn.execute("UPDATE episodes SET data = ? WHERE id = ?",
                 [json.dumps({**records[blank], "checked": ""}), blank])
    conn.commit()
    conn.close()
    checked = {eid for eid, d in records.items() if d.get("checked") is not None}
    assert checked == {"f3acbca0961a4057", "aed3b9d9ead44815", text_row} and len(records) == 10

    store = Store(old)
    assert "0025_checked" in store.applied
    stored = dict(store.db.execute("SELECT id, checked FROM episodes").fetchall())
    assert stored == {eid: ("4" if eid in checked else None) for eid in records}
    assert dict(store.db.execute("SELECT id, checked FROM episode_index").fetchall()) == stored
    assert all(store.get_episode(eid).checked == stored[eid] for eid in records)
    assert maintained(store) == recount(old)
    assert store.db.execute("SELECT COUNT(*) FROM count_mark").fetchone()[0] == 0

    # The filters: no check ran; clean (checked, nothing found); ``--where checked=``.
    unchecked = {e.id for e in store.list_episodes(EpisodeFilter(checked=False), limit=20)}
    assert unchecked == set(records) - checked
    assert [e.id for e in store.list_episodes(EpisodeFilter(checked=True, has_findings=False))] == [text_row]
    assert EpisodeFilter.from_where(["checked=no"]) == EpisodeFilter(checked=False)
    with pytest.raises(Exception, match="checked is true or false"):
        EpisodeFilter.from_where(["checked=maybe"])

    # Browse's findings cell: a count where the checks ran, "not checked" where they did not.
    rows = {s.id: s for s in store.list_episodes(limit=20)}
    cell = {eid: render_table([s], "created_at", True).split('<td class="c-findings', 1)[1].split("</td>", 1)[0]
            for eid, s in rows.items()}
    assert all(("not checked" in cell[eid]) == (eid not in checked) for eid in records)
    assert "rs-bad-text" in cell["f3acbca0961a4057"] and "rs-warn-text" in cell["aed3b9d9ead44815"]

    # A later write keeps it: the checks run on an episode, its row and the browse index say so.
    ep = store.get_episode("e28fa3e34eb37b76")
    store.save_episodes([ep.evolve(checked="4")])
    assert store.db.execute("SELECT e.checked, i.checked FROM episodes e JOIN episode_index i ON i.id = e.id "
                            "WHERE e.id = ?", [ep.id]).fetchone() == ("4", "4")
    assert maintained(store) == recount(old)
    store.close()

    out = subprocess.run([sys.executable, "-m", "engine.cli", "ls", "--db", str(old), "--where", "source=live"],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=120)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len([x for x in lines if x.rstrip().endswith("not checked")]) == 6, out.stdout
    assert lines[-1] == (f"6 of these not checked: no fidelity check ran on them, so finding nothing means nothing yet "
                         f"(`rollscope check {old}` runs the checks)")

    new = tmp_path / "new.db"
    store = Store(new)
    running = varied(3).evolve(status=Status.RUNNING, reason="")
    store.save_episodes([varied(1), varied(2).evolve(checked="4"), running])
    assert dict(store.db.execute("SELECT id, checked FROM episode_index").fetchall()) == \
        {varied(1).id: None, varied(2).id: "4", running.id: None}
    pid = store.db.execute("SELECT pid FROM episodes WHERE id = ?", [running.id]).fetchone()[0]
    store.close()
    # ``check`` stores what it found on the finished episodes; a running one is its loop's to write (and check as it
    # ends): stored, it would carry the check's process as its writer, marked interrupted once that ends.
    out = subprocess.run([sys.executable, "-m", "engine.cli", "check", str(new)], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert "rollscope: 1 running episode checked as it stands and not stored" in out.stderr, out.stderr
    store = Store(new)
    assert store.db.execute("SELECT id, checked, pid FROM episodes WHERE checked IS NULL").fetchall() == \
        [(running.id, None, pid)]
    assert [(r.id, r.status) for r in store.list_episodes(EpisodeFilter(checked=False))] == [(running.id, "running")]
    store.close()
