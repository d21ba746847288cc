"""Imports write a batch of episodes in one transaction, each episode in a savepoint of its own, on a real file."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import StoreError
from engine.records.episode import Episode, Message
from engine.store import EpisodeFilter, Store
from tests.synthetic import synthetic_episodes
from tests.test_episode_stats import chart_maintained, chart_recount, maintained, recount


def test_a_batch_is_one_transaction_with_a_savepoint_per_episode(tmp_path: Path) -> None:
    store = Store(tmp_path / "b.db")
    conn = store.db.conn
    outside: list[str] = []

    def traced(sql: str) -> None:
        # A savepoint opened outside a transaction begins one of its own, and its release commits it.
        if sql.startswith("SAVEPOINT") and not conn.in_transaction:
            outside.append(sql)

    conn.set_trace_callback(traced)
    try:
        done = list(store.save_batches(synthetic_episodes(150), batch=64))
    finally:
        conn.set_trace_callback(None)
    assert [state for _, state, _ in done] == ["new"] * 150 and store.count() == 150
    assert outside == []
    store.close()


def test_a_full_database_keeps_every_episode_before_the_one_that_failed_and_says_so(tmp_path: Path) -> None:
    """SQLite rolls back the whole transaction when the file cannot grow (``max_page_count`` stands in for a full
    disk): the episodes of the batch before the failing one are written again and kept, a record that is bad on its
    own is still listed and skipped, and the error names the cause, what is stored and what is not."""
    eps = list(synthetic_episodes(300))
    # How many pages a batch of 64 takes in this version's stored form, measured on a scratch file.
    scratch = Store(tmp_path / "scratch.db")
    before = scratch.db.execute("PRAGMA page_count").fetchone()[0]
    list(scratch.save_batches(eps[:64], batch=64))
    per_batch = scratch.db.execute("PRAGMA page_count").fetchone()[0] - before
    scratch.close()
    store = Store(tmp_path / "full.db")
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    # Room for two batches of 64 and half a third: the file fills near episode 160.
    store.db.execute(f"PRAGMA max_page_count = {pages + int(2.5 * per_batch)}")
    eps[140] = eps[140].evolve(reward=float("nan"))  # refused on its own, in the batch that fills the file
    done: list[tuple[str, str, str | None]] = []
    with pytest.raises(StoreError) as caught:
        for ep, state, error in store.save_batches(eps, batch=64):
            done.append((ep.id, state, error))
    message = str(caught.value)
    assert "database or disk is full" in message and "savepoint" not in message
    stored = [eid for eid, _, error in done if error is None]
    skipped = [(eid, error) for eid, _, error in done if error is not None]
    assert len(stored) > 130, len(stored)  # more than the two batches committed before
    assert skipped == [(eps[140].id, skipped[0][1])] and "reward" in skipped[0][1]
    failed = eps[len(done)]
    assert stored == [ep.id for ep in eps[: len(done)] if ep.id != eps[140].id]
    assert f"episode {failed.id}" in message and f"{len(stored)} episodes" in message and stored[-1] in message
    store.close()
    again = Store(tmp_path / "full.db")  # a new connection: only what was committed
    assert sorted(again.episode_ids()) == sorted(stored)
    _counts_whole(again)
    # Room again: importing the same episodes again finds the stored ones and writes the rest.
    states = Counter(state for _, state, error in again.save_batches(eps, batch=64) if error is None)
    assert states == {"unchanged": len(stored), "new": len(eps) - len(stored) - 1}
    _counts_whole(again)
    again.close()


def test_a_long_write_holds_no_episode_it_has_stored(tmp_path: Path) -> None:
    """What ``save_batches`` keeps to name when the writing stops is a count and an id: an import of a million
    episodes does not hold them all."""
    import gc
    import weakref

    store = Store(tmp_path / "long.db")
    made: list[weakref.ref[object]] = []

    def episodes() -> Iterator[Episode]:
        for ep in synthetic_episodes(200):
            made.append(weakref.ref(ep))
            yield ep

    n, held = 0, None
    for _ in store.save_batches(episodes(), batch=50):
        n += 1
        if n == 160:  # the fourth batch is being handed out
            gc.collect()
            held = sum(r() is not None for r in made[:150])  # the batches written before it
    assert n == 200 and store.count() == 200
    assert held == 0
    store.close()


def _counts_whole(store: Store) -> None:
    """The aggregates equal a recount of the stored episodes (``test_episode_stats``): each episode a batch wrote
    counted once, whether its batch was committed, written again or rolled back."""
    assert maintained(store) == recount(store.path) and chart_maintained(store) == chart_recount(store.path)
    assert store.browse_query("SELECT COUNT(*) FROM count_mark") == [(0,)]


def _index_is_whole(store: Store) -> None:
    """SQLite's own check of the external-content full-text index: every stored text indexed, nothing else."""
    store.db.execute("INSERT INTO search_fts (search_fts, rank) VALUES ('integrity-check', 1)")


def _found(store: Store, ep: Episode) -> bool:
    text = ep.turns[-1].generation.text[:40] if ep.turns[-1].generation else ""
    return ep.id in {r.id for r in store.page_episodes(EpisodeFilter(text=text), limit=50).rows}


def test_a_batchs_texts_go_into_the_full_text_index_at_its_commit_outside_the_savepoints(tmp_path: Path) -> None:
    """FTS5 writes what it holds, and merges, at every savepoint: the texts a batch adds are indexed in one statement
    before the commit, none inside an episode's savepoint, and every one is found."""
    store = Store(tmp_path / "f.db")
    conn = store.db.conn
    fts: list[bool] = []
    depth = [0]

    def traced(sql: str) -> None:
        if sql.startswith("SAVEPOINT episode"):
            depth[0] += 1
        elif sql.startswith("RELEASE episode"):
            depth[0] -= 1
        elif sql.startswith("INSERT INTO search_fts"):
            fts.append(depth[0] > 0)

    eps = list(synthetic_episodes(150))
    conn.set_trace_callback(traced)
    try:
        done = list(store.save_batches(eps, batch=64))
    finally:
        conn.set_trace_callback(None)
    assert [state for _, state, _ in done] == ["new"] * 150
    assert fts and not any(fts)  # executemany traces each row: all of them outside a savepoint
    _index_is_whole(store)
    assert all(_found(store, ep) for ep in eps[::7])
    store.close()


def test_an_interrupted_batch_commits_nothing_and_the_next_write_indexes_its_texts(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    """Ctrl-C in the middle of a batch: the batches before it are kept, nothing of it is, and the writes after it
    (a live run's) put their texts in the full-text index at once, as outside a batch."""
    store = Store(tmp_path / "i.db")
    eps = list(synthetic_episodes(101))
    write = Store._write_packed
    seen = [0]

    def interrupted(self: Store, p: object, fresh: bool = False) -> None:
        seen[0] += 1
        write(self, p, fresh)  # type: ignore[arg-type]
        if seen[0] == 70:
            raise KeyboardInterrupt

    monkeypatch.setattr(Store, "_write_packed", interrupted)
    with pytest.raises(KeyboardInterrupt):
        list(store.save_batches(eps[:100], batch=64))
    monkeypatch.setattr(Store, "_write_packed", write)
    assert store.count() == 64 and not store.db.conn.in_transaction
    store.save_episode(eps[100])
    assert store.count() == 65
    _index_is_whole(store)
    _counts_whole(store)
    assert _found(store, eps[100]) and _found(store, eps[3]) and not _found(store, eps[66])
    store.close()


class FullAtTheIndex(Store):
    """The file is full when a batch's texts go into the full-text index at its commit, once."""

    full = 0

    def _commit(self, *met: Any) -> BaseException | None:
        if self._fts_pending and not self.full:
            self.full += 1
            self._rollback()
            e = sqlite3.OperationalError("database or disk is full")
            e.sqlite_errorname = "SQLITE_FULL"
            return e
        return super()._commit(*met)


def test_a_batch_whose_texts_do_not_fit_at_its_commit_is_written_again_each_episode_indexed_with_it(tmp_path: Path
                                                                                                   ) -> None:
    store = FullAtTheIndex(tmp_path / "c.db")
    eps = list(synthetic_episodes(40))
    done = list(store.save_batches(eps, batch=64))
    assert store.full == 1 and [state for _, state, error in done if error is None] == ["new"] * 40
    assert store.count() == 40
    _index_is_whole(store)
    _counts_whole(store)
    assert all(_found(store, ep) for ep in eps[::5])
    store.close()


class InterruptedAtTheCommit(Store):
    """Ctrl-C comes as the second batch is about to be committed, once."""

    commits = 0

    def _commit(self, *met: Any) -> BaseException | None:
        self.commits += 1
        if self.commits == 2:
            raise KeyboardInterrupt
        return super()._commit(*met)


def test_a_batch_interrupted_at_its_commit_is_rolled_back_and_the_next_write_indexes_its_texts(tmp_path: Path
                                                                                              ) -> None:
    store = InterruptedAtTheCommit(tmp_path / "k.db")
    eps = list(synthetic_episodes(101))
    with pytest.raises(KeyboardInterrupt):
        list(store.save_batches(eps[:100], batch=64))
    assert store.count() == 64 and not store.db.conn.in_transaction
    store.save_episode(eps[100])
    assert store.count() == 65
    _index_is_whole(store)
    _counts_whole(store)
    assert _found(store, eps[100]) and not _found(store, eps[70])
    store.close()


def test_a_file_another_process_is_writing_stops_the_import_with_what_to_do(tmp_path: Path) -> None:
    """Another process holds the write lock past the wait: the import stops at its first write with a StoreError that
    says so, and a batch whose episodes are all stored already writes nothing and needs no lock."""
    path = tmp_path / "busy.db"
    store = Store(path)
    eps = list(synthetic_episodes(10))
    list(store.save_batches(eps[:5]))
    store.db.execute("PRAGMA busy_timeout = 200")
    other = sqlite3.connect(path)
    other.execute("BEGIN IMMEDIATE")
    try:
        assert [state for _, state, _ in store.save_batches(eps[:5], replace=False)] == ["kept"] * 5
        with pytest.raises(StoreError, match="Another process is writing to it"):
            list(store.save_batches(eps))
    finally:
        other.rollback()
        other.close()
    assert not store.db.conn.in_transaction and store.count() == 5
    assert [state for _, state, _ in store.save_batches(eps)] == ["unchanged"] * 5 + ["new"] * 5
    _counts_whole(store)
    store.close()


def test_a_batch_waits_for_a_write_another_process_commits_after_its_first_read(tmp_path: Path) -> None:
    """A batch reads (is the episode stored?) before it writes. Another process's commit between the two used to
    fail the batch at once with "database is locked": a transaction that has read may not write over a newer
    commit, and SQLite does not wait there. The batch takes the write lock before its first write instead."""
    path = tmp_path / "snap.db"
    store = Store(path)
    other = Store(path)  # a connection of its own, as another process has
    eps = list(synthetic_episodes(6))
    list(store.save_batches(eps[:3]))
    conn = store.db.conn
    seen: list[str] = []

    def traced(sql: str) -> None:
        # The statement after the batch's first read: the other writer commits there, once.
        if seen == ["read"]:
            seen.append("other")
            other.set_starred(eps[0].id, True)
        elif not seen and sql.startswith("SELECT 1 FROM episodes WHERE id"):
            seen.append("read")

    conn.set_trace_callback(traced)
    try:
        states = [state for _, state, _ in store.save_batches(eps)]
    finally:
        conn.set_trace_callback(None)
    assert seen == ["read", "other"]
    assert states == ["unchanged"] * 3 + ["new"] * 3 and store.count() == 6
    assert store.get_episode(eps[0].id).starred  # the other process's change is kept
    _counts_whole(store)
    other.close()
    store.close()


def _import_in_another_process(path: str, start: int, queue: Any) -> None:
    store = Store(path)
    try:
        states = [state for _, state, _ in store.save_batches(synthetic_episodes(400, start=start), batch=40)]
        queue.put((start, states, None))
    except Exception as e:  # noqa: BLE001 - reported to the test
        queue.put((start, [], f"{type(e).__name__}: {e}"))
    finally:
        store.close()


def test_two_processes_importing_into_one_file_take_turns(tmp_path: Path) -> None:
    """Two imports into one file at once (a CLI import into the file a dashboard's watch writes): each batch waits
    for the other's, and every episode of both is stored."""
    path = tmp_path / "two.db"
    Store(path).close()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_import_in_another_process, args=(str(path), start, queue)) for start in (0, 10_000)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert [(start, error) for start, _, error in results] == [(0, None), (10_000, None)]
    assert all(states == ["new"] * 400 for _, states, _ in results)
    store = Store(path)
    assert store.count() == 800
    _counts_whole(store)
    store.close()


def test_a_batch_write_holds_a_larger_page_cache_only_while_it_runs(tmp_path: Path) -> None:
    """The writer's page cache is raised for the batches and set back after them: when they end, when the source
    raises, and when the caller stops reading part way."""
    from engine.store.base import BATCH_CACHE_KB
    from engine.store.core import WRITE_CACHE_KB

    store = Store(tmp_path / "c.db")
    conn = store.db.conn

    def cache() -> int:
        return int(conn.execute("PRAGMA cache_size").fetchone()[0])

    assert cache() == -WRITE_CACHE_KB
    seen: list[int] = []
    for _ in store.save_batches(synthetic_episodes(40), batch=16):
        seen.append(cache())
    assert set(seen) == {-BATCH_CACHE_KB} and cache() == -WRITE_CACHE_KB

    def broken() -> Iterator[Episode]:
        yield from synthetic_episodes(5, start=100)
        raise OSError("the file went away")

    with pytest.raises(OSError):
        list(store.save_batches(broken(), batch=16))
    assert cache() == -WRITE_CACHE_KB and store.count() == 45

    writing = store.save_batches(synthetic_episodes(40, start=200), batch=16)
    next(writing)
    assert cache() == -BATCH_CACHE_KB
    writing.close()
    assert cache() == -WRITE_CACHE_KB
    # Two at once (a dashboard's watches share its store): the cache is set back when the last one ends.
    one = store.save_batches(synthetic_episodes(40, start=400), batch=16)
    two = store.save_batches(synthetic_episodes(40, start=500), batch=16)
    next(one)
    next(two)
    list(one)
    assert cache() == -BATCH_CACHE_KB
    list(two)
    assert cache() == -WRITE_CACHE_KB
    conn.execute("PRAGMA cache_size = -500000")  # one set larger by hand is not lowered, and is kept
    list(store.save_batches(synthetic_episodes(3, start=300)))
    assert cache() == -500000
    conn.execute("PRAGMA cache_size = 1000")  # in pages: 4 MB, raised, and set back as it was given
    seen = [cache() for _ in store.save_batches(synthetic_episodes(3, start=600))]
    assert seen == [-BATCH_CACHE_KB] * 3 and cache() == 1000
    conn.execute("PRAGMA cache_size = 200000")  # in pages: 800 MB, kept
    seen = [cache() for _ in store.save_batches(synthetic_episodes(3, start=700))]
    assert seen == [200000] * 3 and cache() == 200000
    left = store.save_batches(synthetic_episodes(3, start=800))
    next(left)
    store.close()
    left.close()  # its store closed first: set back quietly


def _batch_sizes(store: Store, items: object, **kw: object) -> list[int]:
    """How many episodes each transaction of ``save_batches`` stored: all of a batch are yielded after its commit."""
    counts = [store.count() for _ in store.save_batches(items, **kw)]  # type: ignore[arg-type]
    sizes, before = [], 0
    for c in counts:
        if c != before:
            sizes.append(c - before)
            before = c
    return sizes


def test_a_batch_of_long_texts_is_cut_by_their_size(tmp_path: Path) -> None:
    """Episodes of much text and few tokens (a results file, a long conversation sent as text) fill a batch by their
    bytes: whole episodes, and packed ones whose record is kept to compare."""
    from engine.checks.fanout import Fanout
    from engine.formats import export
    from engine.formats.base import ImportContext
    from engine.formats.jsonl import packed_episodes
    from engine.store.packing import held_bytes

    eps = [ep.evolve(messages=ep.messages + (Message("user", "x" * 20_000),)) for ep in synthetic_episodes(30)]
    held = [held_bytes(ep) for ep in eps]
    assert min(held) > 20_000
    def cut_at(bound: int, sizes: list[int], held: list[int]) -> None:
        """Each batch ends with the episode that takes it to ``bound``, the last one with the episodes."""
        assert sum(sizes) == len(held) and len(sizes) > 1
        at = 0
        for k in sizes:
            got = held[at:at + k]
            assert sum(got[:-1]) < bound and (sum(got) >= bound or at + k == len(held))
            at += k

    for name, kw in (("text.db", {"batch_bytes": 100_000}), ("few.db", {})):
        store = Store(tmp_path / name)
        sizes = _batch_sizes(store, eps, **kw)
        store.close()
        if kw:
            cut_at(100_000, sizes, held)
        else:
            assert sizes == [30]  # the default holds them all

    path = tmp_path / "eps.jsonl"
    export(eps, "jsonl", path)
    packed = list(packed_episodes(path, ImportContext("jsonl"), Fanout(1)))
    lines = path.read_bytes().splitlines(keepends=True)
    assert [p.line_bytes for p in packed] == [len(line) for line in lines]
    assert all(held_bytes(p) > p.line_bytes > 20_000 for p in packed)
    store = Store(tmp_path / "packed.db")
    cut_at(200_000, _batch_sizes(store, iter(packed), batch_bytes=200_000), [held_bytes(p) for p in packed])
    store.close()


def test_a_read_only_store_refuses_a_batch_write_before_reading_any(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    Store(path).close()
    store = Store(path, read_only=True)
    read: list[str] = []

    def episodes() -> Iterator[Episode]:
        for ep in synthetic_episodes(10):
            read.append(ep.id)
            yield ep

    with pytest.raises(StoreError, match="read-only"):
        next(store.save_batches(episodes()))
    assert read == []
    store.close()


def test_an_id_met_again_in_one_write_is_stored_once_and_the_first_record_kept(tmp_path: Path) -> None:
    """A write that meets an id twice (a file that holds a record twice, or two records under one id) stores the
    first: the same again is ``repeated``, another content ``clashed``, whether the id was new or stored before the
    write, in batches or packed; a later write compares with the stored copy as a re-import does."""
    import dataclasses
    import os

    from engine.store.packing import pack_episode

    a, b, c = synthetic_episodes(3)
    other = a.evolve(reward=a.reward - 1.0)
    store = Store(tmp_path / "d.db")
    try:
        got = [(ep.id, state) for ep, state, _ in store.save_batches([a, a, other, b], batch=2, replace=True)]
        assert got == [(a.id, "new"), (a.id, "repeated"), (a.id, "clashed"), (b.id, "new")]
        assert store.get_episode(a.id).reward == a.reward and store.count() == 2
        # Stored before this write: met once, compared; met again, as above.
        # As an import packs them, each with its record to compare with.
        packed = [dataclasses.replace(pack_episode(ep, os.getpid()), reread=lambda ep=ep: ep) for ep in (other, a, other, c, c)]
        got = [(ep.id, state) for ep, state, _ in store.save_batches(packed, batch=2, replace=True)]
        assert got == [(a.id, "replaced"), (a.id, "clashed"), (a.id, "repeated"), (c.id, "new"), (c.id, "repeated")]
        assert store.get_episode(a.id).reward == other.reward and store.count() == 3
        assert store.db.execute("SELECT COUNT(*) FROM temp.sqlite_master").fetchone()[0] == 0  # its table dropped
        assert [state for _, state, _ in store.save_batches([a], replace=True)] == ["replaced"]
        assert maintained(store) == recount(store.path)
    finally:
        store.close()


def test_an_id_another_writer_stores_during_a_write_is_not_taken_for_one_the_write_met(tmp_path: Path) -> None:
    """What another writer stores meanwhile (another process, a watch on the same file) is stored before this
    write's record, which compares with it as a re-import does; and a batch rolled back (the file full at its
    commit, written again) has met none of its ids."""
    a, b, c = synthetic_episodes(3)
    store, other = Store(tmp_path / "w.db"), Store(tmp_path / "w.db")

    def records() -> Iterator[Episode]:
        yield a
        other.save_episode(b)  # between this write's first batch and its second
        yield b.evolve(reward=b.reward - 1.0)

    try:
        got = [state for _, state, _ in store.save_batches(records(), batch=1, replace=True)]
        assert got == ["new", "replaced"] and store.get_episode(b.id).reward == b.reward - 1.0
    finally:
        store.close()
        other.close()
    full = FullAtTheIndex(tmp_path / "f.db")
    try:
        full.save_episode(a)
        again = a.evolve(reward=a.reward + 1.0)
        got = [(ep.id, state) for ep, state, error in full.save_batches([again, c, again, c], replace=True)
               if error is None]
        assert full.full == 1 and got == [(a.id, "replaced"), (c.id, "new"), (a.id, "repeated"), (c.id, "repeated")]
        assert full.get_episode(a.id).reward == again.reward and full.count() == 2
    finally:
        full.close()
