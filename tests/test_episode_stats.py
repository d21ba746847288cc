"""The charts' maintained aggregates (``episode_stats``) on a real SQLite file: after every kind of write (new
episodes, a live episode's turns and its end, statuses, stars, deletes, re-imports, re-checks) they equal a count
of the episodes made from scratch (their entropy figures counted again from the stored token arrays), and the charts
read from them say what the same charts counted from the episodes say."""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from engine.records.episode import Episode, Finding, Severity, Status
from engine.store import BrowseStats, EpisodeFilter, Store, codec
from engine.store.counts import Counted, counted_table
from engine.store.schema import (
    CHART_KEY,
    CHART_TABLES,
    LISTING_TABLES,
    STATS_KEY,
    TASK_STATS,
    TOTAL_TABLES,
    length_bucket,
)
from tests.synthetic import synthetic_episodes
from tests.test_store_paging import varied

GOLDEN = Path(__file__).parent / "golden"
KEY = ", ".join(STATS_KEY)
# Entropies planted on generated tokens: two under the near-zero line (0.01 nats), three over it.
PLANTED = (0.0005, 0.004, 0.3, 1.2, 2.5)


def entropic(i: int, values: tuple[float, ...] = PLANTED) -> Episode:
    """``varied(i)`` with an entropy on each trainable token, drawn from ``values`` (every fourth episode has none,
    as an episode generated without ``--top-logprobs``)."""
    ep = varied(i)
    if i % 4 == 0:
        return ep
    t = ep.tokens
    rng = np.random.default_rng(i)
    return ep.evolve(tokens=t.evolve(entropy=np.where(t.loss_mask == 1, rng.choice(values, size=len(t)), np.nan)))


def _entropy_of(packed: bytes | None) -> tuple[int, float, int]:
    """(tokens with an entropy, their sum in nats, how many under 0.01 nats), from a stored token blob."""
    if packed is None:
        return 0, 0.0, 0
    e = codec.unpack_tokens(packed).entropy.astype(np.float64)
    known = e[~np.isnan(e)]
    return len(known), float(known.sum()), int(np.count_nonzero(known < 0.01))


def recount(path: Path) -> list[tuple[object, ...]]:
    """The aggregates counted from the episodes themselves (the ``episodes`` table, not the index), their entropy
    figures from the stored token arrays (micro-nats summed per episode, as the store keeps them), and the finished
    ones no check ran on."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(f"SELECT {KEY}, n_trainable, n_errors, t.packed, e.checked FROM episodes e LEFT JOIN "
                            "tokens t ON t.episode_id = e.id").fetchall()
    finally:
        conn.close()
    out: dict[tuple[object, ...], list[int]] = {}
    status = STATS_KEY.index("status")
    for *key, trainable, errors, packed, checked in rows:
        n_ent, total, low = _entropy_of(packed)
        sums = out.setdefault(tuple(key), [0] * 7)
        unchecked = int(checked is None and key[status] != "running" and not errors)
        for j, v in enumerate((1, trainable or 0, int((errors or 0) > 0), n_ent, round(total * 1e6), low, unchecked)):
            sums[j] += v
    return sorted((tuple([*k, *v]) for k, v in out.items()), key=repr)


CHART = [c for c, _ in CHART_KEY]
MAINTAINED = (*CHART_TABLES, *LISTING_TABLES, *TOTAL_TABLES)


def chart_recount(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Browse's other aggregates counted from the episodes themselves: per length bin, task and group."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(f"SELECT {', '.join(CHART)}, n_tokens, n_trainable, task_id, group_id FROM episodes"
                            ).fetchall()
    finally:
        conn.close()
    out: dict[str, Counter[tuple[object, ...]]] = {t: Counter() for t in MAINTAINED}
    for *key, tokens, trainable, task, group in rows:
        out["length_stats"][(*key, "tokens", length_bucket(tokens or 0))] += 1
        out["length_stats"][(*key, "trainable", length_bucket(trainable or 0))] += 1
        out["task_stats"][(task, *key)] += 1
        out["group_stats"][(group, task, *key)] += 1
    # The lists' counts: each run's episodes per model, and each tag's episodes.
    conn = sqlite3.connect(path)
    try:
        out["run_models"].update(conn.execute("SELECT run_id, model FROM episodes").fetchall())
        out["tag_stats"].update((t,) for (t,) in conn.execute("SELECT tag FROM tags"))
        out["episode_total"].update((1,) for _ in rows)
        # The totals: per task, env, preset and reward; per group and reward; per group, its episodes and distinct rewards (nulls left out).
        out["task_rewards"].update(conn.execute("SELECT task_id, env, preset, reward FROM episodes").fetchall())
        rewards = conn.execute("SELECT group_id, reward FROM episodes").fetchall()
        out["group_rewards"].update(rewards)
        for g in {g for g, _ in rewards}:
            mine = [r for h, r in rewards if h == g]
            out["group_summary"][(g, len(mine), len({r for r in mine if r is not None}))] = 0
    finally:
        conn.close()
    return {t: sorted(((*k, n) if t != "group_summary" else k for k, n in c.items()), key=repr) for t, c in out.items()}


def chart_maintained(store: Store) -> dict[str, list[tuple[object, ...]]]:
    return {t: sorted(store.browse_query(f"SELECT * FROM {t}"), key=repr) for t in MAINTAINED}


def maintained(store: Store) -> list[tuple[object, ...]]:
    return sorted(store.browse_query(f"SELECT {KEY}, n, trainable, with_errors, n_entropy, entropy_micronats, "
                                     "n_low_entropy, unchecked FROM episode_stats"), key=repr)


def assert_same_stats(a: BrowseStats, b: BrowseStats) -> None:
    """The same charts: every count equal, and the tasks' and groups' means and spreads equal but for the last bits
    (a sum of n rewards of a value, or of each reward once, is added in another order)."""
    assert dataclasses.replace(a, tasks=(), groups=()) == dataclasses.replace(b, tasks=(), groups=())
    for mine, theirs in ((a.tasks, b.tasks), (a.groups, b.groups)):
        assert [dataclasses.replace(r, mean=0.0, std=0.0) for r in mine] == \
            [dataclasses.replace(r, mean=0.0, std=0.0) for r in theirs]
        assert [x for r in mine for x in (r.mean, r.std)] == pytest.approx([x for r in theirs for x in (r.mean, r.std)],
                                                                           abs=1e-12)


def test_the_aggregates_equal_a_recount_after_every_kind_of_write(tmp_path: Path) -> None:
    path = tmp_path / "stats.db"
    store = Store(path)
    eps = [entropic(i) for i in range(240)]
    store.save_episodes(eps)
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path) and len(maintained(store)) < len(eps)
    totals = [sum(r[-k] for r in maintained(store)) for k in (4, 2)]
    assert totals[0] > 1000 and 0.3 < totals[1] / totals[0] < 0.5  # two of five planted values are near zero

    # A live episode: turn by turn (running), then finished with its reward.
    live = entropic(500)
    running = live.evolve(status=Status.RUNNING, turns=live.turns[:1], reward=0.0, outcome=None)
    store.save_turn(running, running.turns[0])
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path)
    store.finish_episode(live)
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path)

    store.set_status([eps[0].id, eps[1].id], Status.INTERRUPTED, "gone")
    store.set_starred(eps[2].id, True)
    store.curate([eps[3].id, eps[4].id], add_tags=["look"], note="seen")
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path)

    # Deleted by hand (the sqlite3 shell): the triggers follow whatever writes to the episodes.
    store.db.execute("DELETE FROM episodes WHERE id IN (?, ?, ?)", [eps[5].id, eps[6].id, eps[7].id])
    store.db.conn.commit()
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path)

    # Re-imported: some changed (reward, run, step, entropy), some the same, one new.
    sharp = entropic(14, (0.001,))
    again = [eps[10].evolve(reward=0.123), eps[11].evolve(run_id="other"), eps[12], entropic(900),
             eps[13].evolve(source=dataclasses.replace(eps[13].source, details={"rollout_step": 77})), sharp]
    states = [state for _, state, error in store.save_batches(again) if error is None]
    assert states == ["replaced", "replaced", "unchanged", "new", "replaced", "replaced"]
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path)
    row = store.browse_query("SELECT n_entropy, entropy_micronats, n_low_entropy FROM episode_index WHERE id = ?",
                             [sharp.id])[0]
    assert row == (sharp.tokens.n_trainable, round(0.001 * 1e6 * sharp.tokens.n_trainable), sharp.tokens.n_trainable)

    # Re-checked: the check's findings written over the stored episode, which the checks have now run on.
    unchecked = sum(r[-1] for r in maintained(store))
    bad = Finding("mask_misaligned", Severity.ERROR, "planted", 0, 0, 1, {})
    for ep in (eps[20], eps[21]):
        store.finish_episode(ep.evolve(findings=(*ep.findings, bad), checked="4"))
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path)
    assert sum(r[-2] for r in maintained(store)) == sum(r[-2] for r in recount(path)) > 0
    assert 0 < sum(r[-1] for r in maintained(store)) < unchecked
    store.close()


def _same(store: Store, path: Path) -> bool:
    return maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path)


def test_a_batch_counts_its_own_episodes_at_its_commit_whatever_it_holds(tmp_path: Path) -> None:
    """The triggers leave the episodes a batch writes to the batch, which counts them at its commit: new ones, one
    met twice in the batch (the second, with other content, not written), one refused on its own; the stored ones it
    writes again are older than the batch and counted by the triggers as they are written."""
    path = tmp_path / "batch.db"
    store = Store(path)
    eps = [entropic(i) for i in range(80)]
    for ep in eps[:20]:
        store.save_episode(ep)  # one at a time: counted by the triggers
    assert _same(store, path)
    folded: list[int] = []
    import engine.store.writes as writes_module

    real = writes_module.fold_counts

    def fold(conn: sqlite3.Connection, mark: int, specs: tuple[Counted, ...]) -> None:
        folded.append(mark)
        # Inside the batch, before its count: the aggregates hold the episodes from before it, and the stored
        # episodes it wrote again as they are now.
        assert conn.execute("SELECT SUM(n) FROM episode_total").fetchone()[0] == 20
        assert conn.execute("SELECT n FROM run_models WHERE run_id = 'moved'").fetchall() == [(1,)]
        real(conn, mark, specs)

    mark = store.browse_query("SELECT MAX(rid) FROM episode_index")[0][0]
    batch: list[Episode] = [*eps[20:40], eps[3].evolve(reward=0.77, run_id="moved"), eps[4],
                            eps[30].evolve(reward=0.11, source=dataclasses.replace(eps[30].source,
                                                                                   details={"rollout_step": 9})),
                            eps[41].evolve(reward=float("nan")), *eps[42:60]]
    writes_module.fold_counts, saved = fold, writes_module.fold_counts
    try:
        done = list(store.save_batches(batch, batch=64))
    finally:
        writes_module.fold_counts = saved
    states = [(state, error is not None) for _, state, error in done]
    assert states == [("new", False)] * 20 + [("replaced", False), ("unchanged", False), ("clashed", False),
                                               ("new", True)] + [("new", False)] * 18
    assert folded == [mark]
    assert _same(store, path) and store.count() == 20 + 20 + 18
    assert store.browse_query("SELECT COUNT(*) FROM count_mark") == [(0,)]
    store.close()


def test_a_mark_left_without_its_count_is_counted_when_the_file_opens(tmp_path: Path) -> None:
    """A mark committed without its count leaves the episodes written after it uncounted; the next open counts them
    (and a batch before that would, keeping the older mark)."""
    path = tmp_path / "left.db"
    store = Store(path)
    store.save_episodes([entropic(i) for i in range(30)])
    with store.db.conn:
        store.db.execute("INSERT INTO count_mark (one, rid) SELECT 0, MAX(rid) FROM episode_index")
    for i in range(30, 36):
        store.save_episode(entropic(i))  # one at a time, above the mark: not counted by the triggers
    assert store.browse_query("SELECT n FROM episode_total") == [(30,)]  # what the page's count reads
    assert store.browse_query("SELECT COUNT(*) FROM episodes") == [(36,)]
    with store.db.conn:  # a step that fills an aggregate again leaves the rows above the mark to the count too
        counted_table(store.db, TASK_STATS)
    store.close()
    store = Store(path)
    assert _same(store, path) and store.browse_query("SELECT n FROM episode_total") == [(36,)]
    assert store.browse_query("SELECT COUNT(*) FROM count_mark") == [(0,)]
    # And a batch after a left mark counts from that mark.
    with store.db.conn:
        store.db.execute("INSERT INTO count_mark (one, rid) SELECT 0, MAX(rid) FROM episode_index")
    store.save_episode(entropic(40))
    list(store.save_batches([entropic(i) for i in range(41, 50)]))
    assert _same(store, path) and store.browse_query("SELECT n FROM episode_total") == [(46,)]
    store.close()


def test_charts_read_from_the_aggregates_say_what_the_episodes_say(tmp_path: Path) -> None:
    store = Store(tmp_path / "charts.db")
    store.save_episodes(entropic(i) for i in range(300))
    filters = [EpisodeFilter(), EpisodeFilter(env="price"), EpisodeFilter(status=("completed",), reward_min=0.5),
               EpisodeFilter(run_id="run1", rollout_step=2), EpisodeFilter(outcome=("success",), min_turns=2)]
    for flt in filters:
        assert flt.on_stats
        # search_context without a text changes no row, but the aggregates cannot tell: counted from the episodes.
        counted = dataclasses.replace(flt, search_context=True)
        assert not counted.on_stats
        assert_same_stats(store.stats(flt), store.stats(counted))
        for by in (None, "rollout_step", "run_id", "env", "preset"):
            assert store.outcome_counts(flt, by) == store.outcome_counts(counted, by)
    every = store.stats(EpisodeFilter())  # tasks and flat groups from the totals, equal to the count above
    assert 0 < every.n_flat_groups < every.n_groups and every.n_tasks > 40 and len(every.tasks) == 40
    assert not EpisodeFilter(tags=("x",)).on_stats and not EpisodeFilter(task_id="t").on_stats
    for run in ("run0", "run1", "run2"):
        steps = store.step_stats(run)
        assert [s.step for s in steps] == [0, 1, 2, 3, 4]
        for s in steps:
            rows = [r for r in store.list_episodes(EpisodeFilter(run_id=run, rollout_step=s.step), limit=1000)]
            rewards = [r.reward for r in rows]
            assert s.n == len(rows) and s.reward_min == min(rewards) and s.reward_max == max(rewards)
            assert s.reward_mean == pytest.approx(sum(rewards) / len(rewards), abs=1e-12)
            assert s.truncated == sum(r.status == "truncated" for r in rows)
            assert s.unchecked == sum(r.checked is None and r.status != "running" and not r.n_errors
                                      for r in rows) > 0
            assert s.aborted == sum(r.status in ("aborted", "failed") for r in rows)
            assert s.response_tokens == pytest.approx(sum(r.n_trainable for r in rows) / len(rows))
            kinds = [r.outcome for r in rows if r.outcome]
            assert s.outcomes == {k: kinds.count(k) for k in set(kinds)}
            # The entropy figures, from every episode's arrays: what the aggregates say.
            known = np.concatenate([e[~np.isnan(e)] for e in (store.get_episode(r.id).tokens.entropy.astype(
                np.float64) for r in rows)])
            assert s.entropy_tokens == len(known) > 0 and s.near_zero_entropy == int((known < 0.01).sum())
            assert s.entropy_mean == pytest.approx(known.mean(), abs=1e-6)
            assert s.near_zero_rate == s.near_zero_entropy / s.entropy_tokens
    store.close()


@pytest.mark.parametrize("golden", ["dbschema6.sqlite", "dbschema7.sqlite", "dbschema12.sqlite"])
def test_an_older_database_gets_its_aggregates_filled(tmp_path: Path, golden: str) -> None:
    path = tmp_path / golden
    shutil.copy(GOLDEN / golden, path)
    store = Store(path)
    assert "0017_chart_stats" in store.applied and ("0012_episode_stats" in store.applied) == (golden != "dbschema12.sqlite")
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path) and sum(r[len(STATS_KEY)] for r in maintained(store)) == store.count() == 10
    store.close()



def test_counts_of_filters_on_the_aggregates_columns_are_exact_and_cost_the_same_at_any_size(tmp_path: Path) -> None:
    from tests.synthetic import synthetic_episode
    from tests.test_store_paging import _steps

    store = Store(tmp_path / "count.db")
    filters = [EpisodeFilter(), EpisodeFilter(env="price"), EpisodeFilter(status=("completed",), reward_min=0.5),
               EpisodeFilter(run_id="run1"), EpisodeFilter(env="none-such")]
    cost: list[list[int]] = []
    for start in (0, 300):  # the same rows of the aggregates, twice the episodes
        store.save_episodes(synthetic_episode(i).evolve(run_id=f"run{i % 2}", reward=float(i % 2))
                            for i in range(start, start + 300))
        for flt in filters:
            by_index = dataclasses.replace(flt, search_context=True)  # the same rows, counted from the browse index
            assert flt.on_stats and not by_index.on_stats
            assert store.count(flt) == store.count(by_index) == len(store.episode_ids(flt))
        cost.append([_steps(store, lambda f=f: store.count(f)) for f in filters])
    assert store.count() == 600 and store.count(EpisodeFilter(run_id="run1")) == 300
    assert all(after <= before + 1 for before, after in zip(*cost, strict=True)), cost
    store.close()


def test_a_read_only_file_from_before_the_aggregates_opens_and_charts_from_its_episodes(tmp_path: Path) -> None:
    old = tmp_path / "seven.sqlite"
    shutil.copy(GOLDEN / "dbschema7.sqlite", old)
    conn = sqlite3.connect(old)
    with conn:  # rollout steps, so a run has per-step charts (the schema-7 triggers copy them to the browse index)
        conn.execute("UPDATE episodes SET rollout_step = rowid % 3")
    conn.close()
    upgraded = tmp_path / "upgraded.sqlite"
    shutil.copy(old, upgraded)
    now = Store(upgraded)
    assert "0012_episode_stats" in now.applied
    store = Store(old, read_only=True)  # 0012 adds derived data only: it opens without it
    assert not store._has_stats()
    runs = store.distinct("run_id")
    assert runs and [s.run_id for s in store.runs_with_steps()]
    for flt in (EpisodeFilter(), EpisodeFilter(status=("completed",)), EpisodeFilter(run_id=runs[0])):
        assert store.count(flt) == now.count(flt)
        assert_same_stats(store.stats(flt), now.stats(flt))
        # The kinds as stored: the read-only file lacks 0015, which explains summed math rewards again.
        ro, rw = store.outcome_counts(flt, "run_id"), now.outcome_counts(flt, "run_id")
        assert {r: sum(c.values()) for r, c in ro.items()} == {r: sum(c.values()) for r, c in rw.items()}
        assert {r: c for r, c in ro.items() if "correct" not in c and "right_answer_not_scored" not in c} == \
            {r: c for r, c in rw.items() if "correct" not in c and "some_turns_wrong" not in c}
    for run in runs:
        ro_steps, rw_steps = store.step_stats(run), now.step_stats(run)
        # Read-only without 0025, every episode reads as checked; upgraded, those no check ran on are said.
        assert [dataclasses.replace(s, outcomes={}) for s in ro_steps] == \
            [dataclasses.replace(s, outcomes={}, unchecked=0) for s in rw_steps] and rw_steps
        assert all(s.unchecked == 0 for s in ro_steps)
        assert [sum(s.outcomes.values()) for s in ro_steps] == [sum(s.outcomes.values()) for s in rw_steps]
    store.close()
    now.close()


def test_a_steps_mean_reward_leaves_out_the_episodes_without_one(tmp_path: Path) -> None:
    path = tmp_path / "nulls.db"
    store = Store(path)
    store.save_episodes(varied(i) for i in range(120))
    # A reward SQLite keeps as NULL (the sqlite3 shell, an earlier version's NaN): the aggregates follow the row.
    gone = store.list_episodes(EpisodeFilter(run_id="run1", rollout_step=2), limit=3)
    store.db.execute(f"UPDATE episodes SET reward = NULL WHERE id IN ({','.join('?' * len(gone))})",
                     [r.id for r in gone])
    store.db.conn.commit()
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path)
    conn = sqlite3.connect(path)
    want = dict(conn.execute("SELECT rollout_step, AVG(reward) FROM episodes WHERE run_id = 'run1' AND rollout_step "
                             "IS NOT NULL GROUP BY rollout_step").fetchall())
    conn.close()
    got = {s.step: s.reward_mean for s in store.step_stats("run1")}
    assert got.keys() == want.keys() and all(got[k] == pytest.approx(want[k], abs=1e-12) for k in want), (got, want)
    store.close()


def test_a_database_from_before_the_entropy_figures_gets_them_from_its_token_arrays(tmp_path: Path) -> None:
    path = tmp_path / "eleven.sqlite"
    shutil.copy(GOLDEN / "dbschema11-entropy.sqlite", path)
    store = Store(path)
    assert "0016_entropy_stats" in store.applied
    assert maintained(store) == recount(path) and chart_maintained(store) == chart_recount(path)
    # Nine of its twelve episodes carry an entropy on every trainable token; each one's figures are its arrays'.
    for eid, n_entropy, micronats, low in store.browse_query(
            "SELECT id, n_entropy, entropy_micronats, n_low_entropy FROM episode_index"):
        e = store.get_episode(eid).tokens.entropy.astype(np.float64)
        known = e[~np.isnan(e)]
        assert (n_entropy, micronats, low) == (len(known), round(known.sum() * 1e6), int((known < 0.01).sum()))
    assert store.browse_query("SELECT COUNT(*) FROM episode_index WHERE n_entropy > 0") == [(9,)]
    steps = {s.step: s for run in ("run0", "run1", "run2") for s in store.step_stats(run)}
    assert steps and any(s.entropy_mean is not None for s in steps.values())
    store.close()


def read_only_and_upgraded(tmp_path: Path, golden: str) -> tuple[Store, Store]:
    """A golden file opened read-only (it opens without the derived steps it lacks), and a copy of it upgraded."""
    path, upgraded = tmp_path / golden, tmp_path / f"upgraded-{golden}"
    shutil.copy(GOLDEN / golden, path)
    shutil.copy(path, upgraded)
    now = Store(upgraded)
    return Store(path, read_only=True), now


def test_a_read_only_file_from_before_the_entropy_figures_reads_its_steps_without_them(tmp_path: Path) -> None:
    store, now = read_only_and_upgraded(tmp_path, "dbschema11-entropy.sqlite")  # 0016 adds derived data only
    for run in ("run0", "run1", "run2"):
        old, new = store.step_stats(run), now.step_stats(run)
        assert old and all(s.entropy_tokens == 0 and s.entropy_mean is None for s in old)
        assert [dataclasses.replace(s, entropy_tokens=0, entropy_mean=None, near_zero_entropy=0, unchecked=0)
                for s in new] == old
    assert any(s.entropy_tokens for run in ("run0", "run1", "run2") for s in now.step_stats(run))
    store.close()
    now.close()


def test_a_read_only_file_from_before_the_chart_aggregates_charts_from_its_episodes(tmp_path: Path) -> None:
    store, now = read_only_and_upgraded(tmp_path, "dbschema12.sqlite")  # 0017 adds derived data only
    assert now._has_chart_stats() and "0017_chart_stats" in now.applied and not store._has_chart_stats()
    for flt in (EpisodeFilter(), EpisodeFilter(env="math"), EpisodeFilter(status=("completed",), reward_min=0.5)):
        assert flt.on_chart_stats
        old, new = store.stats(flt), now.stats(flt)
        assert_same_stats(old, new)
        assert sum(new.tokens.counts) == new.total > 0 and new.tasks
    store.close()
    now.close()


def test_lengths_are_binned_by_their_leading_bits_in_sql_as_in_python(tmp_path: Path) -> None:
    from engine.store.schema import bucket_width, length_bucket_sql

    conn = sqlite3.connect(":memory:")
    lengths = [0, 1, 15, 16, 17, 31, 32, 33, 100, 1000, 1023, 1024, 32_767, 32_768, 131_072, 10**9, 2**40 + 12345]
    for n in lengths:
        edge = conn.execute(f"SELECT {length_bucket_sql('v')} FROM (SELECT ? AS v)", [n]).fetchone()[0]
        assert edge == length_bucket(n) <= n < edge + bucket_width(edge)
        assert bucket_width(edge) == 1 if n < 16 else bucket_width(edge) <= edge / 8
    # Consecutive bins tile the lengths: each starts where the one before ends.
    edge = 0
    for _ in range(200):
        nxt = edge + bucket_width(edge)
        assert length_bucket(nxt) == nxt and length_bucket(nxt - 1) == edge
        edge = nxt
    conn.close()


@pytest.mark.parametrize("golden", ["dbschema7.sqlite", "dbschema12.sqlite"])
def test_the_lists_of_runs_and_tags_read_from_the_aggregates_say_what_the_episodes_say(tmp_path: Path,
                                                                                      golden: str) -> None:
    """The runs list, the runs with steps, the tag counts and the page's stamp, from the maintained aggregates (an
    upgraded copy) and from the browse index (the file read-only, without them): the same, and what the episodes
    say, counted here."""
    store, now = read_only_and_upgraded(tmp_path, golden)
    assert now._has_table("run_models") and now._has_table("tag_stats") and not store._has_table("run_models")
    for a, b in zip(now.run_overview(), store.run_overview(), strict=True):  # unchecked: as in the steps' test
        assert dataclasses.replace(a, mean_reward=0.0, unchecked=0) == dataclasses.replace(b, mean_reward=0.0)
        assert a.mean_reward == pytest.approx(b.mean_reward, abs=1e-12)
    assert now.runs_with_steps() == store.runs_with_steps()
    assert now.tag_counts() == store.tag_counts() and now.episodes_stamp() == store.episodes_stamp()
    rows = now.list_episodes(limit=100_000)
    by_run: dict[object, list] = {}
    for r in rows:
        by_run.setdefault(r.run_id, []).append(r)
    listed = now.run_overview()
    assert len(listed) == len(by_run) > 1 and [r.started for r in listed] == sorted((r.started for r in listed),
                                                                                    reverse=True)
    for run in listed:
        mine = by_run[run.run_id]
        rewards = [r.reward for r in mine if r.reward is not None]
        assert run.n_episodes == len(mine) and run.started == min(r.created_at for r in mine)
        assert run.envs == ",".join(sorted({r.env for r in mine}))
        assert run.presets == ",".join(sorted({r.preset for r in mine} - {""}))
        assert run.policies == ",".join(sorted({r.model for r in mine} - {""}))
        assert run.mean_reward == pytest.approx(sum(rewards) / len(rewards), abs=1e-12)
        assert run.with_errors == sum(r.n_errors > 0 for r in mine)
    assert dict(now.tag_counts()) == Counter(t for r in rows for t in r.tags) != {}
    assert now.episodes_stamp()[0] == now.count() == len(rows)
    store.close()
    now.close()


def test_a_name_with_a_comma_is_listed_whole_and_an_empty_store_lists_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "names.db")
    assert store.run_overview() == [] and store.runs_with_steps() == [] and store.tag_counts() == []
    assert store.episodes_stamp() == (0, 0, 0.0, 0) and store.count() == 0
    store.save_episodes([entropic(1).evolve(id="a", run_id="r", env="env,with,commas", preset="p,q"),
                         entropic(2).evolve(id="b", run_id="r", env="plain", preset="p,q")])
    [run] = store.run_overview()
    assert run.envs == "env,with,commas,plain" and run.presets == "p,q" and run.n_episodes == 2
    assert store.episodes_stamp()[0] == store.count() == 2
    store.db.execute("DELETE FROM episodes WHERE id = 'a'")
    store.db.conn.commit()
    assert store.episodes_stamp()[0] == store.count() == 1 and store.run_overview()[0].envs == "plain"
    store.close()


def test_the_group_list_from_the_aggregates_says_what_the_episodes_say(tmp_path: Path) -> None:
    """The Group tab's list: every group of two or more samples counted, the first ``limit`` by id read out, from
    ``group_stats`` where it answers the filter and from the browse index where it does not; each group's count,
    mean, spread and range what its samples say."""
    store = Store(tmp_path / "groups.db")
    eps = [entropic(i) for i in range(300)]
    store.save_episodes(eps)
    samples: dict[str, list] = {}
    for e in eps:
        if e.group_id is not None:
            samples.setdefault(e.group_id, []).append(e)
    groups = sorted(g for g, members in samples.items() if len(members) > 1)
    assert len(groups) > 12
    for limit in (5, 1000):
        total, shown = store.group_stats(limit=limit)
        counted, by_index = store.group_stats(EpisodeFilter(search_context=True), limit=limit)
        assert total == counted == len(groups) and [g.key for g in shown] == groups[:limit]
        assert [dataclasses.replace(g, mean=0.0, std=0.0) for g in shown] == \
            [dataclasses.replace(g, mean=0.0, std=0.0) for g in by_index]
        for g in shown:
            rewards = np.array([e.reward for e in samples[g.key]])
            assert g.n == len(rewards) and (g.min, g.max) == (rewards.min(), rewards.max())
            assert (g.mean, g.std) == pytest.approx((rewards.mean(), rewards.std()), abs=1e-9)
    # A filter the aggregates answer, and one they do not, select the same groups.
    flt = EpisodeFilter(status=("completed",))
    assert flt.on_chart_stats
    assert store.group_stats(flt)[0] == store.group_stats(dataclasses.replace(flt, search_context=True))[0]
    empty = Store(tmp_path / "empty.db")
    assert empty.group_stats() == (0, [])
    store.close()
    empty.close()


def test_a_read_only_store_of_more_than_a_thousand_episodes_draws_its_charts(tmp_path: Path) -> None:
    """The planner's statistics are refreshed when a database has grown: never on a file this process may not write
    (SQLite refuses the ANALYZE), whose charts read with the statistics the file has."""
    path = tmp_path / "many.db"
    writer = Store(path)
    writer.save_episodes(synthetic_episodes(1_100))
    with writer.db.conn:
        writer.db.execute("DROP TABLE IF EXISTS sqlite_stat1")  # a file no writer has analysed since it grew
    expected = writer.stats(EpisodeFilter())
    writer.close()
    reader = Store(path, read_only=True)
    for flt in (EpisodeFilter(), EpisodeFilter(status=("completed",), reward_min=0.5), EpisodeFilter(text="needle")):
        assert reader.stats(flt).total == reader.count(flt)
    assert_same_stats(reader.stats(EpisodeFilter()), expected)
    reader.close()
