"""``rollscope watch`` on a JSONL dump whose last line is still being written: never read before it is whole, so
every record keeps the line number (and the id) a later ``import`` of the finished file gives it."""

from __future__ import annotations

import json
from pathlib import Path

from engine.formats import import_path
from engine.formats.watch import Watcher
from engine.store import Store
from tests.fixtures_formats import verl_rows


def _rows(step: int, n: int) -> bytes:
    rows = verl_rows(step, [(f"What is {i} + {i}? Think step by step.", f"{i} + {i} = {2 * i}. The answer is {2 * i}.",
                             1.0) for i in range(n)])
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _after_line(data: bytes, k: int) -> int:
    """Where line ``k + 1`` of ``data`` starts."""
    end = 0
    for _ in range(k):
        end = data.index(b"\n", end) + 1
    return end


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def _ids_and_lines(store: Store) -> set[tuple[str, int | None]]:
    return {(e.id, e.source.line) for e in store.iter_episodes()}


def test_a_line_cut_mid_way_is_read_whole_once_its_newline_comes_and_keeps_its_number(tmp_path):
    folder = tmp_path / "rollout"
    folder.mkdir()
    data = _rows(2, 8)
    cut = _after_line(data, 4) + 40  # inside line 5
    assert data[cut - 1 : cut] != b"\n" and data[:cut].count(b"\n") == 4
    path = folder / "2.jsonl"
    path.write_bytes(data[:cut])
    store = Store(tmp_path / "w.db")
    watcher = Watcher(store, folder, "verl", settle=0)  # settled at once: the writer has paused past the settle time
    events = watcher.poll() + watcher.poll() + watcher.poll()
    assert sum(e.skipped for e in events) == 0 and sum(e.new for e in events) == 4 and store.count() == 4
    known = store.watched_file(str(path.resolve()))
    assert known is not None and (known.offset, known.lines) == (data[:cut].rindex(b"\n") + 1, 4)
    _append(path, data[cut:])
    [event] = watcher.poll()
    assert (event.state, event.new, event.skipped) == ("partial", 4, 0) and store.count() == 8
    assert watcher.poll() == []
    assert sorted(line for _, line in _ids_and_lines(store)) == list(range(1, 9))
    # The finished file imported whole, into the same store: every record is already there.
    again = import_path(folder, "verl", store)
    assert (again.new, again.already_present, again.skipped) == (0, 8, 0)
    whole = Store(tmp_path / "whole.db")
    import_path(path, "verl", whole)
    assert _ids_and_lines(whole) == _ids_and_lines(store)
    store.close()
    whole.close()


def test_a_crashed_writers_cut_last_line_is_said_once_and_never_read_as_malformed(tmp_path):
    folder = tmp_path / "rollout"
    folder.mkdir()
    data = _rows(3, 4)
    cut = _after_line(data, 3) + 30  # 3 lines, then a cut one
    (folder / "3.jsonl").write_bytes(data[:cut])
    (folder / "4.jsonl").write_bytes(_rows(4, 1)[:50])  # nothing but a cut line
    store = Store(tmp_path / "w.db")
    watcher = Watcher(store, folder, "verl", settle=0)
    events = {Path(e.path).name: e for e in watcher.poll()}
    assert (events["3.jsonl"].state, events["3.jsonl"].new, events["3.jsonl"].skipped) == ("partial", 3, 0)
    assert (events["4.jsonl"].state, events["4.jsonl"].new, events["4.jsonl"].skipped) == ("waiting", 0, 0)
    for name, line in (("3.jsonl", 4), ("4.jsonl", 1)):
        said = events[name].line()
        assert f"{name}: " in said and f"last line, line {line}, has no newline" in said
        assert "read when it completes" in said
    assert watcher.poll() == [] and watcher.poll() == []  # said once, nothing read past the cut
    assert store.count() == 3
    known = store.watched_file(str((folder / "3.jsonl").resolve()))
    assert known is not None and (known.lines, known.n_skipped) == (3, 0)
    # A writer that comes back finishes the line: it is read then, as line 4.
    _append(folder / "3.jsonl", data[cut:])
    [event] = watcher.poll()
    assert (event.new, event.skipped) == (1, 0)
    assert sorted(line for _, line in _ids_and_lines(store)) == [1, 2, 3, 4]
    assert import_path(folder / "3.jsonl", "verl", store).new == 0
    store.close()


def test_a_last_line_that_is_a_whole_record_is_read_once_settled_and_its_newline_starts_no_new_line(tmp_path):
    folder = tmp_path / "rollout"
    folder.mkdir()
    data = _rows(5, 6)
    third = _after_line(data, 3) - 1
    path = folder / "5.jsonl"
    path.write_bytes(data[:third])  # three records, the third without its newline yet
    store = Store(tmp_path / "w.db")
    watcher = Watcher(store, folder, "verl", settle=0)
    [event] = watcher.poll()
    assert (event.new, event.skipped, event.message) == (3, 0, "")
    _append(path, b"  " + data[third:third + 1])  # the rest of line 3: blanks and its newline
    events = watcher.poll()
    assert sum(e.new for e in events) == 0 and sum(e.skipped for e in events) == 0
    _append(path, data[third + 1:])
    [event] = watcher.poll()
    assert (event.new, event.skipped) == (3, 0)
    assert sorted(line for _, line in _ids_and_lines(store)) == list(range(1, 7))
    assert import_path(path, "verl", store).new == 0
    store.close()
