"""Keyset pages and bounded counts on a real SQLite file: the pages a token walks are the pages an offset gives,
over every sortable column in both directions, with ties and NULLs; a bounded count is exact under its bound."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import EpisodePage, MatchCount
from engine.errors import ConfigError
from engine.records.episode import Episode, Status
from engine.records.outcome import OUTCOME_KINDS, Outcome
from engine.records.provenance import Source
from engine.store import SORTABLE, EpisodeFilter, Store, reads
from tests.synthetic import synthetic_episode

GOLDEN = Path(__file__).parent / "golden"
N = 420
PAGE = 37  # odd, so pages cross the ties of every column


def varied(i: int) -> Episode:
    """Episode ``i`` with the columns that may be NULL set on some episodes and not on others: group, run,
    rollout step, outcome. Rewards and statuses repeat (ties)."""
    ep = synthetic_episode(i)
    step = i % 5 if i % 9 else None
    kind = OUTCOME_KINDS[i % len(OUTCOME_KINDS)] if i % 4 else None
    outcome = None if kind is None else Outcome(kind, None, None, None, (), (), (), (), None, "planted")
    return ep.evolve(group_id=None if i % 7 == 0 else ep.group_id, run_id=None if i % 11 == 0 else f"run{i % 3}",
                     source=Source(kind="slime", details={} if step is None else {"rollout_step": step}),
                     outcome=outcome, created_at=1.7e9 + (i // 4))  # four episodes a second: ties in time too


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    s = Store(tmp_path_factory.mktemp("paging") / "paging.db")
    s.save_episodes(varied(i) for i in range(N))
    return s


def test_the_planted_columns_hold_nulls_and_values(store: Store) -> None:
    for col in ("group_id", "run_id", "rollout_step", "outcome"):
        nulls, values = store.browse_query(f"SELECT SUM({col} IS NULL), SUM({col} IS NOT NULL) FROM episode_index")[0]
        assert nulls > PAGE and values > PAGE, col


@pytest.mark.parametrize("column", SORTABLE)
def test_keyset_pages_are_the_offset_pages_forward_and_back(store: Store, column: str) -> None:
    flt = EpisodeFilter(min_turns=2)
    total = store.count(flt)
    assert PAGE * 4 < total < N
    for descending in (True, False):
        by_offset = [[r.id for r in store.list_episodes(flt, column, descending, PAGE, k)]
                     for k in range(0, total, PAGE)]
        assert sorted(i for p in by_offset for i in p) == sorted(store.episode_ids(flt))
        forward: list[list[str]] = []
        page = store.page_episodes(flt, column, descending, PAGE)
        assert page.before is None
        while True:
            forward.append([r.id for r in page.rows])
            if page.after is None:
                break
            page = store.page_episodes(flt, column, descending, PAGE, after=page.after)
        assert forward == by_offset
        back: list[list[str]] = []
        while page.before is not None:
            page = store.page_episodes(flt, column, descending, PAGE, before=page.before)
            back.append([r.id for r in page.rows])
        assert back[::-1] == by_offset[:-1]
        # Read along the sorted column's index (a filter that selects many): the same pages.
        many = MatchCount(10, False)
        walked = store.page_episodes(flt, column, descending, PAGE, matches=many)
        assert [r.id for r in walked.rows] == by_offset[0]
        assert [r.id for r in store.page_episodes(flt, column, descending, PAGE, after=walked.after,
                                                  matches=many).rows] == by_offset[1]
        # A page reached by an offset carries the tokens of its neighbours.
        middle = store.page_episodes(flt, column, descending, PAGE, offset=2 * PAGE)
        assert middle.before is not None and middle.after is not None
        assert [r.id for r in store.page_episodes(flt, column, descending, PAGE, after=middle.after).rows] \
            == by_offset[3]
        assert [r.id for r in store.page_episodes(flt, column, descending, PAGE, before=middle.before).rows] \
            == by_offset[1]


def test_a_token_belongs_to_its_sort(store: Store) -> None:
    page = store.page_episodes(order_by="reward", descending=True, limit=10)
    assert isinstance(page, EpisodePage) and page.after
    with pytest.raises(ConfigError, match="sort by reward descending"):
        store.page_episodes(order_by="reward", descending=False, after=page.after)
    with pytest.raises(ConfigError, match="not a page token"):
        store.page_episodes(order_by="reward", after="garbage!")
    with pytest.raises(ConfigError, match="not both"):
        store.page_episodes(order_by="reward", after=page.after, before=page.after)
    with pytest.raises(ConfigError, match="or an offset, not both"):
        store.page_episodes(order_by="reward", after=page.after, offset=20)
    # A token belongs to its filter too: another would silently page from a place in a different selection.
    with pytest.raises(ConfigError, match="another filter"):
        store.page_episodes(EpisodeFilter(env="price"), order_by="reward", after=page.after)
    narrow = store.page_episodes(EpisodeFilter(env="price"), order_by="reward", limit=10)
    with pytest.raises(ConfigError, match="another filter"):
        store.page_episodes(EpisodeFilter(env="math"), order_by="reward", before=narrow.after)
    assert store.page_episodes(EpisodeFilter(env="price"), order_by="reward", limit=10, after=narrow.after).rows


def _steps(store: Store, fn) -> int:
    """SQLite virtual machine steps the Browse connection runs for ``fn`` (its work, whatever the clock says)."""
    conn, _ = store._reader()
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    conn.set_progress_handler(tick, 10)
    try:
        fn()
    finally:
        conn.set_progress_handler(None, 0)
    return count[0]


def test_a_deep_page_costs_what_the_first_costs(store: Store) -> None:
    size = 5
    deep = store.page_episodes(order_by="n_tokens", limit=size, offset=N - 3 * size)
    assert deep.after is not None
    first = _steps(store, lambda: store.page_episodes(order_by="n_tokens", limit=size))
    by_token = _steps(store, lambda: store.page_episodes(order_by="n_tokens", limit=size, after=deep.after))
    by_offset = _steps(store, lambda: store.page_episodes(order_by="n_tokens", limit=size, offset=N - 2 * size))
    assert by_token < 1.5 * first and by_offset > 3 * by_token, (first, by_token, by_offset)


@pytest.mark.parametrize("column", SORTABLE)
def test_an_offset_past_the_middle_read_from_the_end_is_the_same_page(store: Store, column: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Every episode (its count is one row); filters the aggregates answer, one of them held by an index of its own
    # (a status); one they do not (read from the end only when the caller's count is exact). Sorts with ties and
    # NULLs, both ways; the offsets about the middle and past the end; counts exact, bounded (the walk) or none.
    for flt in (EpisodeFilter(), EpisodeFilter(env="price", min_turns=2), EpisodeFilter(status=("completed",)),
                EpisodeFilter(starred=False)):
        total = store.count(flt)
        for descending in (True, False):
            monkeypatch.setattr(reads, "FROM_END_AFTER", 10**9)
            offsets = sorted({*range(0, total, PAGE), total // 2 - 1, total // 2, total // 2 + 1, total - PAGE - 1,
                              total - 1, total, total + PAGE})
            forward = [store.page_episodes(flt, column, descending, PAGE, offset=k) for k in offsets]
            assert sorted(r.id for p, k in zip(forward, offsets) if k % PAGE == 0 and k < total for r in p.rows) \
                == sorted(store.episode_ids(flt))
            monkeypatch.setattr(reads, "FROM_END_AFTER", 0)
            for k, want in zip(offsets, forward, strict=True):
                for matches in (None, MatchCount(total, True), MatchCount(10, False)):
                    got = store.page_episodes(flt, column, descending, PAGE, offset=k, matches=matches)
                    assert [r.id for r in got.rows] == [r.id for r in want.rows], (flt, descending, k, matches)
                    assert (got.after, got.before) == (want.after, want.before), (flt, descending, k, matches)


def test_the_last_page_costs_what_the_first_costs(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    size, last = 5, N - 5
    first = _steps(store, lambda: store.page_episodes(order_by="n_tokens", limit=size))
    walked = _steps(store, lambda: store.page_episodes(order_by="n_tokens", limit=size, offset=last))
    monkeypatch.setattr(reads, "FROM_END_AFTER", 0)
    from_end = _steps(store, lambda: store.page_episodes(order_by="n_tokens", limit=size, offset=last))
    assert from_end < 1.5 * first and walked > 3 * from_end, (first, walked, from_end)


def test_a_filtered_page_is_read_from_the_end_when_its_count_is_cheap(store: Store,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = store.browse_query

    def query(sql: str, args: Any = (), background: bool = False) -> list[tuple[Any, ...]]:
        seen.append(sql)
        return real(sql, args, background)

    def reversed_read(flt: EpisodeFilter, matches: MatchCount | None = None) -> bool:
        seen.clear()
        store.page_episodes(flt, "n_tokens", True, 5, offset=store.count(flt) - 5, matches=matches)
        return any("ORDER BY n_tokens ASC, rid ASC" in q for q in seen)

    monkeypatch.setattr(store, "browse_query", query)
    monkeypatch.setattr(reads, "FROM_END_AFTER", 0)
    stats, other = EpisodeFilter(min_turns=2), EpisodeFilter(starred=False)
    assert reversed_read(EpisodeFilter()) and reversed_read(stats)
    assert reversed_read(other, MatchCount(store.count(other), True))  # the caller's exact count, counted again
    assert any("SELECT 1 FROM episode_index" in q for q in seen)
    # The aggregates come first: a caller's exact count of a large selection is not counted again row by row.
    assert reversed_read(stats, MatchCount(store.count(stats), True))
    assert not any("SELECT 1 FROM episode_index" in q for q in seen)
    assert not reversed_read(other) and not reversed_read(other, MatchCount(10, False))
    monkeypatch.setattr(reads, "SMALL_STATS", 0)  # aggregates too large to sum for a page
    assert not reversed_read(stats) and reversed_read(EpisodeFilter())


def test_a_page_read_from_the_end_while_episodes_arrive_is_the_page_of_one_state(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    s = Store(tmp_path / "live.db")
    s.save_episodes(varied(i) for i in range(120))
    flt = EpisodeFilter(env="price")
    counted = s.count_upto(flt)  # as Browse counts, before it reads the page
    assert counted.exact
    s.save_episodes(varied(i) for i in range(120, 150))  # a watch commits meanwhile: ten more of the filter's
    assert s.count(flt) == counted.n + 10
    monkeypatch.setattr(reads, "FROM_END_AFTER", 10**9)
    forward = s.page_episodes(flt, "created_at", True, 7, offset=counted.n - 7)
    monkeypatch.setattr(reads, "FROM_END_AFTER", 0)
    got = s.page_episodes(flt, "created_at", True, 7, offset=counted.n - 7, matches=counted)
    assert [r.id for r in got.rows] == [r.id for r in forward.rows] and forward.after is not None
    assert (got.after, got.before) == (forward.after, forward.before)
    # Episodes committed while a page is read from the end do not shift it: the count and the rows are read in
    # one transaction, and the writer does not wait for it.
    n = s.count(flt)
    monkeypatch.setattr(reads, "FROM_END_AFTER", 10**9)
    before = s.page_episodes(flt, "created_at", False, 7, offset=n - 9)  # oldest first: the new ones come last
    monkeypatch.setattr(reads, "FROM_END_AFTER", 0)
    real = s.browse_query

    def query(sql: str, args: Any = (), background: bool = False) -> list[tuple[Any, ...]]:
        rows = real(sql, args, background)
        if "episode_stats" in sql and "SUM(n)" in sql:  # the count read; the page is read next
            s.save_episodes([varied(i) for i in range(150, 160)])
        return rows

    monkeypatch.setattr(s, "browse_query", query)
    got = s.page_episodes(flt, "created_at", False, 7, offset=n - 9)
    monkeypatch.undo()
    assert s.count(flt) > n
    assert [r.id for r in got.rows] == [r.id for r in before.rows] and got.after == before.after
    s.close()


def test_a_bounded_count_is_exact_under_its_bound_and_says_at_least_over_it(store: Store) -> None:
    for flt in (EpisodeFilter(), EpisodeFilter(env="price"), EpisodeFilter(status=("completed",), reward_min=0.5),
                EpisodeFilter(run_id="run1", tags=("bug",)), EpisodeFilter(env="none-such")):
        n = store.count(flt)
        assert store.count_upto(flt, bound=n) == MatchCount(n, True)
        assert store.count_upto(flt, bound=n + 5) == MatchCount(n, True)
        if n:
            short = store.count_upto(flt, bound=n - 1)
            assert short == MatchCount(n - 1, False)
            assert short.label == f"{n - 1:,}+" and short.words == f"at least {n - 1:,}"
    assert store.count_upto(bound=N).label == f"{N:,}"


def test_browse_shows_a_bounded_count_then_the_exact_one_and_pages_by_token(store: Store, monkeypatch) -> None:
    from dashboard.tabs import browse

    monkeypatch.setattr(browse, "COUNT_BOUND", 100)
    values = {**browse.cleared_filters(), "turns_min": "2"}
    total = store.count(EpisodeFilter(min_turns=2))
    sort = {"by": "reward", "desc": True}
    drawn = browse._drawn(store, values, sort, 1, 25, None)
    shown = drawn["shown"]
    assert "Episodes 1–25 of 100+ matching (counting…) · page 1 ·" in drawn["info"]
    assert shown["count"]["exact"] is False and shown["before"] is None and shown["after"]
    done = browse.exact_count(store, shown)
    assert done is not None and done["count"]["exact"] and done["count"]["n"] == total
    assert f"of {total:,} matching (of {N:,}) · page 1 of {-(-total // 25):,}" in browse.count_info(done["count"])
    assert browse.exact_count(store, done) is None  # counted once
    second = browse._drawn(store, values, sort, 2, 25, None, cursor={"after": shown["after"]})
    assert second["table"] == browse._drawn(store, values, sort, 2, 25, None)["table"]
    assert "Episodes 26–50 of 100+" in second["info"]
    back = browse._drawn(store, values, sort, 1, 25, None, cursor={"before": second["shown"]["before"]})
    assert back["table"] == drawn["table"] and back["shown"]["before"] is None
    # A page past the end of a selection counted no further than the bound: the last page, counted exactly.
    far = browse._drawn(store, values, sort, 99, 25, None)
    assert far["page_box"] == -(-total // 25) and f"of {total:,} matching" in far["info"]


RUNS, PER_RUN = 4, 150


@pytest.fixture(scope="module")
def in_time(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """Runs one after the other, as in a database a trainer fills: run0 the oldest, run3 the newest."""
    s = Store(tmp_path_factory.mktemp("runs") / "runs.db")
    s.save_episodes(synthetic_episode(i).evolve(run_id=f"run{i // PER_RUN}", created_at=1.7e9 + i)
                    for i in range(RUNS * PER_RUN))
    return s


def test_an_older_run_newest_first_reads_its_own_rows_not_every_newer_one(in_time: Store) -> None:
    many = MatchCount(10, False)  # more than the bound: the sorted column's index would be walked
    old, new = EpisodeFilter(run_id="run0"), EpisodeFilter(run_id=f"run{RUNS - 1}")
    cost = {name: _steps(in_time, lambda f=f: in_time.page_episodes(f, "created_at", True, 20, matches=many))
            for name, f in (("old", old), ("new", new))}
    assert cost["old"] < 2 * cost["new"], cost
    # Sorted by a column no index holds by run: the walk gives up after four times the rows a page should take
    # (fewer the more the count says match) and the run's matches are sorted instead. The same pages either way.
    conn, _ = in_time._reader()
    sql: list[str] = []
    conn.set_trace_callback(sql.append)
    try:
        for flt in (old, new):
            for column in ("created_at", "env", "sample_index", "reward"):
                for descending in (True, False):
                    by_offset = [r.id for r in in_time.list_episodes(flt, column, descending, PER_RUN)]
                    assert len(by_offset) == PER_RUN
                    for counted in (MatchCount(PER_RUN // 2, False), MatchCount(RUNS * PER_RUN, False)):
                        walked: list[str] = []
                        page = in_time.page_episodes(flt, column, descending, 20, matches=counted)
                        while True:
                            walked += [r.id for r in page.rows]
                            if page.after is None:
                                break
                            page = in_time.page_episodes(flt, column, descending, 20, after=page.after, matches=counted)
                        assert walked == by_offset, (flt.run_id, column, descending, counted)
    finally:
        conn.set_trace_callback(None)
    assert any("WHERE rid IN (SELECT rid" in q for q in sql) and any("INDEXED BY" in q for q in sql)


def test_a_page_is_read_while_the_charts_are_still_counting(store: Store) -> None:
    """The charts of a filter the aggregates cannot answer (a text search) count on a connection of their own:
    held mid-query there (SQLite's progress handler waits), a page, its bounded count, the next page and the exact
    count read at once."""
    import threading

    conn, _ = store._reader(charts=True)
    counting, release = threading.Event(), threading.Event()

    def hold() -> int:
        counting.set()
        release.wait(30)
        return 0

    conn.set_progress_handler(hold, 1000)
    flt = EpisodeFilter(text="order")
    charts: dict[str, object] = {}
    worker = threading.Thread(target=lambda: charts.update(stats=store.stats(flt)))
    worker.start()
    try:
        assert counting.wait(30)
        done = threading.Event()
        pages: list[EpisodePage] = []
        exact: list[int] = []

        def browse() -> None:
            first = store.page_episodes(flt, "reward", True, PAGE)
            pages.extend([first, store.page_episodes(flt, "reward", True, PAGE, after=first.after)])
            store.count_upto(flt)
            exact.append(store.count(flt))
            done.set()

        threading.Thread(target=browse, daemon=True).start()
        assert done.wait(20), "the page waited for the charts"
        assert "stats" not in charts and len(pages) == 2 and pages[0].rows and pages[1].rows
    finally:
        release.set()
        worker.join(30)
        conn.set_progress_handler(None, 0)
    assert charts["stats"].total == exact[0] == store.count_upto(flt, bound=N).n


@contextlib.contextmanager
def _write_held_open(s: Store, change: Callable[[], None]) -> Iterator[None]:
    """Another thread holds a write transaction open, ``change`` run in it, until the block ends."""
    writing, release = threading.Event(), threading.Event()

    def write() -> None:
        with s._writing("hold a write open"):
            change()
            assert s.db.conn.in_transaction
            writing.set()
            release.wait(60)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert writing.wait(30)
        yield
    finally:
        release.set()
        writer.join(60)


def _read_within(seconds: float, reads: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Each of ``reads`` run in turn on a thread of its own, by name; fails when they take more than ``seconds``."""
    seen: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        for name, read in reads.items():
            seen[name] = read()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(seconds), f"a read waited for the write (done: {sorted(seen)})"
    return seen


def test_browse_reads_do_not_wait_for_a_write_in_progress(tmp_path: Path) -> None:
    """A write holds the store's lock and SQLite's for its whole transaction (an import batch: seconds): Browse's
    reads, on connections of their own, read the last committed state meanwhile, and none waits for the write to
    end: not a deep page, nor the charts, whose new planner statistics (the file grew past 1,000 episodes) wait for
    a read after the write."""
    n = 1100
    s = Store(tmp_path / "held.db")
    s.save_episodes(synthetic_episode(i) for i in range(n))
    analyzed = s._analyzed_rows
    flt = EpisodeFilter(status=("completed",))
    with _write_held_open(s, lambda: s.db.conn.execute("UPDATE episodes SET reason = 'held'")):
        seen = _read_within(20, {
            "page": lambda: s.page_episodes(None, "created_at", False, 10).rows,
            "deep": lambda: s.page_episodes(None, "created_at", False, 10, offset=1050).rows,
            "upto": lambda: s.count_upto(flt).n,
            "count": s.count,
            "stamp": s.episodes_stamp,
            "stats": lambda: s.stats().total,
            "runs": s.run_overview,
            "envs": lambda: s.distinct("env"),
        })
        assert seen["count"] == seen["stats"] == seen["stamp"][0] == n and seen["envs"]
        assert len(seen["page"]) == len(seen["deep"]) == 10
        assert {r.reason for r in seen["page"] + seen["deep"]} != {"held"}, "a read saw the write before its commit"
        assert s._analyzed_rows == analyzed, "the charts' statistics were taken during the write"
    s.stats()
    assert s._analyzed_rows == n  # taken at the first charts read after the write
    s.close()


def test_an_episode_opens_while_another_thread_writes_and_the_writer_reads_its_own_rows(tmp_path: Path) -> None:
    """Opening an episode (its record, its replays, an id prefix, a run's name, the watched files) reads the last
    committed state on a Browse connection and does not wait for another thread's write, which holds the store's
    lock for its whole transaction (a dashboard's watch writing a batch). The writing thread reads its own rows,
    not yet committed; a closed store opens no connection again."""
    s = Store(tmp_path / "open.db")
    eps = [synthetic_episode(i) for i in range(30)]
    s.save_episodes(eps)
    ep = eps[4]
    with s._writing("a replay"):
        s.db.conn.execute("INSERT INTO replays (id, episode_id, created_at, kind, reproduced, data) "
                          "VALUES ('r1', ?, 1.0, 'reproduced', 1, '{\"kind\": \"reproduced\"}')", [ep.id])
    own: dict[str, Any] = {}

    def change() -> None:
        s.db.conn.execute("UPDATE episodes SET reason = 'held' WHERE id = ?", [ep.id])
        s.db.conn.execute("DELETE FROM replays")
        own["reason"] = s.get_episode(ep.id).reason
        own["replays"] = s.replays(ep.id)

    with _write_held_open(s, change):
        assert own == {"reason": "held", "replays": []}  # the writer's own, uncommitted
        seen = _read_within(20, {
            "episode": lambda: s.get_episode(ep.id),
            "replays": lambda: s.replays(ep.id),
            "resolved": lambda: s.resolve_id(ep.id),
            "has": lambda: (s.has_episode(ep.id), s.has_episode("nope")),
            "run": lambda: (s.has_run(ep.run_id or ""), s.has_run("no-such-run")),
            "watched": s.watched_files,
        })
        assert seen["episode"] == ep and seen["episode"].reason != "held"  # the committed state
        assert [r["id"] for r in seen["replays"]] == ["r1"]
        assert seen["resolved"] == ep.id and seen["has"] == (True, False) and seen["run"] == (True, False)
        assert seen["watched"] == []
    assert s.get_episode(ep.id).reason == "held" and s.replays(ep.id) == []  # committed now
    s.close()
    with pytest.raises(sqlite3.ProgrammingError):
        s.get_episode(ep.id)
    assert s._read_conn is None


def test_one_status_sorted_by_turns_or_tokens_is_read_from_an_index_where_the_long_ones_are_truncated(
        tmp_path: Path) -> None:
    """The truncated episodes are the long ones: a walk of the turns (or tokens) index from the top meets them all
    before the first completed one, and without an index by status then turns the page sorted every match."""
    path = tmp_path / "long.db"
    s = Store(path)
    eps = [synthetic_episode(i) for i in range(600)]
    longest = sorted(e.n_turns for e in eps)[len(eps) // 2]
    s.save_episodes(e.evolve(status=Status.TRUNCATED if e.n_turns >= longest else Status.COMPLETED) for e in eps)
    completed = EpisodeFilter(status=("completed",))
    many = MatchCount(10, False)
    costs: dict[tuple[str, bool], int] = {}
    for indexed in (True, False):
        if not indexed:
            with s.db.conn:
                s.db.execute("DROP INDEX episode_index_status_turns")
                s.db.execute("DROP INDEX episode_index_status_tokens")
        for column in ("n_turns", "n_tokens"):
            by_offset = [r.id for r in s.list_episodes(completed, column, True, 1000)]
            walked: list[str] = []
            page = s.page_episodes(completed, column, True, 20, matches=many)
            costs[column, indexed] = _steps(s, lambda c=column: s.page_episodes(completed, c, True, 20, matches=many))
            while True:
                walked += [r.id for r in page.rows]
                if page.after is None:
                    break
                page = s.page_episodes(completed, column, True, 20, after=page.after, matches=many)
            assert walked == by_offset and len(walked) == sum(e.n_turns < longest for e in eps)
    for column in ("n_turns", "n_tokens"):
        assert 4 * costs[column, True] < costs[column, False], costs
    s.close()
