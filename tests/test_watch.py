"""``rollscope watch``: dumps written while it runs, half-written dumps, growing JSONL files, restarts."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.checks.fanout import Fanout
from engine.formats.watch import Watcher, default_run_id
from engine.store import EpisodeFilter, Store
from tests.fixtures_formats import synthetic_slime_samples, verl_rows, write_jsonl, write_slime_dump

ROOT = Path(__file__).resolve().parents[1]


def _dump(folder: Path, rollout_id: int, n: int = 6, length: int = 400) -> Path:
    samples = synthetic_slime_samples(n, length, prompt_len=64, seed=rollout_id)
    for s in samples[: n // 3]:
        s["status"] = "truncated"
    return write_slime_dump(folder / f"{rollout_id}.pt", samples, rollout_id=rollout_id)


def _wait(cond, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_a_dump_written_while_watch_runs_is_imported_checked_and_grouped_by_step(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    _dump(folder, 0)
    store = Store(tmp_path / "w.db")
    watcher = Watcher(store, folder, "slime", settle=0.2)
    stop = threading.Event()
    events = []
    thread = threading.Thread(target=watcher.run, args=(stop, events.append, 0.1), daemon=True)
    thread.start()
    try:
        _wait(lambda: store.count() == 6)
        written = time.monotonic()
        _dump(folder, 1)
        _wait(lambda: store.count() == 12)
        shown_after = time.monotonic() - written
    finally:
        stop.set()
        thread.join(10)
    assert shown_after < 10
    assert watcher.run_id == default_run_id(folder) and watcher.run_id.startswith("run-")
    stats = store.step_stats(watcher.run_id)
    assert [s.step for s in stats] == [0, 1] and [s.n for s in stats] == [6, 6]
    assert all(s.truncated == 2 and abs(s.truncated_rate - 1 / 3) < 1e-9 for s in stats)
    assert all(s.response_tokens == pytest.approx(400 - 64 - 40 * 2) for s in stats)  # mask-1 tokens per sample
    assert [r.run_id for r in store.runs_with_steps()] == [watcher.run_id]
    assert store.count(EpisodeFilter(run_id=watcher.run_id, rollout_step=1)) == 6
    # Checked as they came in: the truncated samples' last turns are findings of their own.
    assert store.count(EpisodeFilter(finding_kind="not_checked")) == 12
    assert [(e.path.endswith(f"{k}.pt"), e.state, e.new) for k, e in enumerate(x for x in events if x.state == "done")] \
        == [(True, "done", 6), (True, "done", 6)]
    store.close()


def test_a_half_written_dump_waits_until_it_is_whole(tmp_path):
    folder = tmp_path / "run"
    whole = _dump(tmp_path, 3)
    data = whole.read_bytes()
    folder.mkdir()
    target = folder / "3.pt"
    target.write_bytes(data[: len(data) // 2])
    store = Store(tmp_path / "w.db")
    watcher = Watcher(store, folder, "slime", settle=0)
    [event] = watcher.poll()
    assert event.state == "waiting" and store.count() == 0
    assert watcher.poll() == []  # said once
    with target.open("ab") as f:
        f.write(data[len(data) // 2 :])
    [event] = watcher.poll()
    assert (event.state, event.new) == ("done", 6) and store.count() == 6
    assert store.step_stats(watcher.run_id)[0].step == 3
    store.close()


def test_a_restarted_watch_reads_nothing_twice_and_a_rewritten_dump_only_adds_its_new_samples(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    _dump(folder, 0)
    _dump(folder, 1)
    db = tmp_path / "w.db"
    store = Store(db)
    assert sorted(e.new for e in Watcher(store, folder, "slime", settle=0).poll()) == [6, 6]
    store.close()
    store = Store(db)  # a new process, the same database
    again = Watcher(store, folder, "slime", settle=0)
    assert again.poll() == [] and store.count() == 12
    samples = synthetic_slime_samples(9, 400, prompt_len=64, seed=1)  # the trainer rewrote step 1 with 3 more
    for s in samples[:2]:
        s["status"] = "truncated"
    os.utime(write_slime_dump(folder / "1.pt", samples, rollout_id=1), (time.time() - 5, time.time() - 5))
    [event] = again.poll()
    assert (event.new, event.present) == (3, 6) and store.count() == 15
    store.close()


def test_a_growing_jsonl_dump_is_read_line_by_line_as_it_grows(tmp_path):
    folder = tmp_path / "rollout"
    path = write_jsonl(folder / "7.jsonl", verl_rows(7, [("1+1?", "2", 1.0), ("2+2?", "5", 0.0), ("3+3?", "6", 1.0)]))
    store = Store(tmp_path / "w.db")
    watcher = Watcher(store, folder, "verl", run_id="verl-run", settle=60)
    [event] = watcher.poll()
    assert (event.state, event.new) == ("partial", 3)
    more = [*verl_rows(7, [("4+4?", "8", 1.0)]), *verl_rows(8, [("5+5?", "9", 0.0)])]
    import json

    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(more[0]) + "\n" + json.dumps(more[1])[:20])  # a line still being written
    [event] = watcher.poll()
    assert event.new == 1 and store.count() == 4
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(more[1])[20:] + "\n")
    [event] = watcher.poll()
    assert event.new == 1 and store.count() == 5
    assert watcher.poll() == []
    known = store.watched_file(str(path.resolve()))
    assert known is not None and (known.lines, known.offset, known.n_episodes) == (5, path.stat().st_size, 5)
    # Line numbers carry on across reads: each episode names the line it came from.
    lines = sorted(e.source.line for e in store.iter_episodes())
    assert lines == [1, 2, 3, 4, 5]
    assert [(s.step, s.n) for s in store.step_stats("verl-run")] == [(7, 4), (8, 1)]
    store.close()


def test_a_last_line_without_newline_is_read_once_the_file_settles(tmp_path):
    folder = tmp_path / "rollout"
    folder.mkdir()
    import json

    path = folder / "1.jsonl"
    path.write_text(json.dumps(verl_rows(1, [("a", "b", 1.0)])[0]), encoding="utf-8")
    store = Store(tmp_path / "w.db")
    watcher = Watcher(store, folder, "verl", settle=30)  # however slow the machine, it has not settled yet
    assert watcher.poll() == [] and store.count() == 0
    old = time.time() - 31
    os.utime(path, (old, old))  # unchanged for longer than the settle time
    [event] = watcher.poll()
    assert event.new == 1
    store.close()


def test_a_corrupt_dump_fails_alone_and_is_tried_again_when_it_changes(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    _dump(folder, 0)
    bad = folder / "1.pt"
    import zipfile

    with zipfile.ZipFile(bad, "w") as z:  # a whole zip, not a torch dump
        z.writestr("archive/data.pkl", b"not a pickle")
    store = Store(tmp_path / "w.db")
    watcher = Watcher(store, folder, "slime", settle=0)
    events = {Path(e.path).name: e for e in watcher.poll()}
    assert events["0.pt"].new == 6 and events["1.pt"].state == "failed" and "1.pt" in events["1.pt"].message
    assert watcher.poll() == []  # not tried again while unchanged
    _dump(folder, 1)
    [event] = watcher.poll()
    assert event.state == "done" and event.new == 6
    store.close()


def test_watch_once_on_the_command_line_with_checks_on_two_workers(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for k in range(3):
        _dump(folder, k)
    db = tmp_path / "w.db"
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "watch", str(folder), "--format", "slime", "--db", str(db),
                           "--once", "--settle", "0", "--workers", "2", "--run", "r1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("read: 6 new") == 3 and "18 new episodes from 3 file reads" in proc.stderr
    assert "2 worker processes" in proc.stderr
    store = Store(db)
    assert [(s.step, s.n, s.truncated) for s in store.step_stats("r1")] == [(0, 6, 2), (1, 6, 2), (2, 6, 2)]
    store.close()
    missing = subprocess.run([sys.executable, "-m", "engine.cli", "watch", str(tmp_path / "nope"), "--format", "slime",
                              "--db", str(tmp_path / "x.db"), "--once"], cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode == 2 and "is not a folder" in missing.stderr and not (tmp_path / "x.db").exists()


def test_import_with_checks_and_a_run_gives_each_episode_its_run_step_and_findings(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    _dump(folder, 4)
    store = Store(tmp_path / "i.db")
    from engine.formats import import_path

    with Fanout(1) as fan:
        report = import_path(folder / "4.pt", "slime", store, run_id="exp", check=True, fanout=fan)
    assert (report.new, report.checked) == (6, 6)
    eps = list(store.iter_episodes())
    assert {(e.run_id, e.source.rollout_step) for e in eps} == {("exp", 4)}
    assert all(any(f.kind == "not_checked" for f in e.all_findings()) for e in eps)
    again = import_path(folder / "4.pt", "slime", store, run_id="exp", check=True)
    assert (again.new, again.already_present, again.checked) == (0, 6, 0)  # nothing checked or written twice
    store.close()


def test_a_watch_commits_a_smaller_batch_than_an_import(tmp_path, monkeypatch):
    """A dashboard's watches share its store's lock with opening an episode and Launch's turns, and a batch holds it
    while it writes: a watch commits ``WATCH_BATCH`` episodes at a time, a one-off import more."""
    from engine.formats import import_path
    from engine.formats.watch import WATCH_BATCH
    from engine.store.writes import BATCH_EPISODES, Writes

    assert WATCH_BATCH < BATCH_EPISODES
    n = WATCH_BATCH + 40
    folder = tmp_path / "rollout"
    write_jsonl(folder / "3.jsonl", verl_rows(3, [(f"{i}+1?", f"{i + 1}", 1.0) for i in range(n)]))
    batches: list[int] = []
    real = Writes._save_savepoints

    def counted(self, chunk, replace, call):
        batches.append(len(chunk))
        return real(self, chunk, replace, call)

    monkeypatch.setattr(Writes, "_save_savepoints", counted)
    watched = Store(tmp_path / "w.db")
    [event] = Watcher(watched, folder, "verl", run_id="r", settle=0).poll()
    assert event.new == n and batches == [WATCH_BATCH, 40]
    batches.clear()
    imported = Store(tmp_path / "i.db")
    assert import_path(folder / "3.jsonl", "verl", imported).new == n and batches == [n]
    watched.close()
    imported.close()
