"""Browse's store queries on a real SQLite file with thousands of synthetic episodes.

Every answer is checked against the records themselves: the test computes
what a filter, a sort or an aggregate must return from the Episode objects it
saved, and compares.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

from dashboard.tabs import browse as browse_tab
from engine.errors import ConfigError
from engine.records.episode import Episode, Finding, Severity, Status
from engine.store import SORTABLE, EpisodeFilter, Store
from engine.store import index as browse
from tests.synthetic import ENVS, needle, synthetic_episode, synthetic_episodes

N = 2000


@pytest.fixture(scope="module")
def records() -> list[Episode]:
    # Two of three checked (the checks' version recorded), the third as an import without --check leaves it; of the
    # checked, one in five was checked without a tokenizer: the checks that need one could not run (a note each).
    # A check with nothing to look at (no generated ids) leaves a note too, which is no check lacking what a person
    # can give: on its own (one in seven of the checked), such an episode is checked whole.
    out = [e if i % 3 == 0 else e.evolve(checked="4") for i, e in enumerate(synthetic_episodes(N))]
    return [e.evolve(findings=(*e.findings, *NOT_RUN)) if i % 3 and i % 5 == 1
            else e.evolve(findings=(*e.findings, NOT_RUN[1])) if i % 3 and i % 7 == 2 else e for i, e in enumerate(out)]


NOT_RUN = (Finding("not_checked", Severity.INFO, "tokens_not_rendering: not checked: no tokenizer with a chat template",
                   evidence={"check": "tokens_not_rendering", "needs": "tokenizer"}),
           Finding("not_checked", Severity.INFO, "retokenization_drift: not checked: no generated token ids in the trace",
                   evidence={"check": "retokenization_drift"}))


def _found(e: Episode) -> list[Finding]:
    """Its errors and warnings: what the findings count counts (a note is not one)."""
    return [f for f in e.all_findings() if f.severity is not Severity.INFO]


def _in_part(e: Episode) -> bool:
    return any(f.kind == "not_checked" and f.evidence.get("needs") for f in e.all_findings())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, records: list[Episode]) -> Store:
    s = Store(tmp_path_factory.mktemp("browse") / "browse.db")
    assert s.save_episodes(records) == N
    return s


def ids_where(records: list[Episode], pred) -> set[str]:
    return {e.id for e in records if pred(e)}


def all_ids(store: Store, flt: EpisodeFilter, order_by: str = "created_at", descending: bool = True,
            page: int = 173) -> list[str]:
    """Every id the filter selects, fetched a page at a time (an odd page size, to cross boundaries)."""
    out: list[str] = []
    offset = 0
    while True:
        rows = store.list_episodes(flt, order_by=order_by, descending=descending, limit=page, offset=offset)
        out += [r.id for r in rows]
        if len(rows) < page:
            return out
        offset += page


def _texts(e: Episode, context: bool = False) -> str:
    """What a search looks in: the messages (system prompts and tool schemas with ``context`` only), tool
    calls, errors, the verdict and the findings."""
    parts = [m.content for m in e.messages if context or m.role != "system"] + [e.reason]
    parts += [f.message for f in e.all_findings()] + ([json.dumps(t) for t in e.tools] if context else [])
    for t in e.turns:
        parts += [t.generation.text if t.generation else "", t.parse_error or ""]
        parts += [c.name for c in t.tool_calls]
    return "\n".join(parts).lower()


FILTERS = [
    ("env", EpisodeFilter(env="math"), lambda e: e.env == "math"),
    ("task", EpisodeFilter(task_id="retail-7"), lambda e: e.task_id == "retail-7"),
    ("status", EpisodeFilter(status=("aborted", "failed")), lambda e: e.status in (Status.ABORTED, Status.FAILED)),
    ("reward range", EpisodeFilter(reward_min=0.3, reward_max=0.7), lambda e: 0.3 <= e.reward <= 0.7),
    ("turns", EpisodeFilter(min_turns=2, max_turns=4), lambda e: 2 <= e.n_turns <= 4),
    ("tags, all of", EpisodeFilter(tags=("bug", "keep")), lambda e: {"bug", "keep"} <= set(e.tags)),
    ("starred", EpisodeFilter(starred=True), lambda e: e.starred),
    ("not starred", EpisodeFilter(starred=False), lambda e: not e.starred),
    ("run", EpisodeFilter(run_id="run1"), lambda e: e.run_id == "run1"),
    ("source", EpisodeFilter(source="messages"), lambda e: e.source.kind == "messages"),
    ("has findings", EpisodeFilter(has_findings=True), lambda e: bool(_found(e))),
    ("no findings", EpisodeFilter(has_findings=False), lambda e: not _found(e)),
    ("not checked", EpisodeFilter(checked=False), lambda e: e.checked is None),
    ("no findings (checked)", browse_tab.episode_filter(findings=browse_tab.NO_FINDING),
     lambda e: e.checked is not None and not _found(e)),
    ("Browse's checked in part", browse_tab.episode_filter(findings=browse_tab.IN_PART), _in_part),
    ("checked=part", EpisodeFilter.from_where(["checked=part"]), _in_part),
    ("checked=whole", EpisodeFilter.from_where(["checked=whole"]), lambda e: e.checked is not None and not _in_part(e)),
    ("Browse's not checked", browse_tab.episode_filter(findings=browse_tab.NOT_CHECKED), lambda e: e.checked is None),
    ("finding kind", EpisodeFilter(finding_kind="mask_misaligned"),
     lambda e: any(f.kind == "mask_misaligned" for f in e.all_findings())),
    ("loop finding kind", EpisodeFilter(finding_kind="template_not_prefix_stable"),
     lambda e: any(f.kind == "template_not_prefix_stable" for f in e.all_findings())),
    ("group", EpisodeFilter(group_id="g17"), lambda e: e.group_id == "g17"),
    ("combined", EpisodeFilter(env="retail", status=("completed",), reward_min=0.5, has_findings=False),
     lambda e: e.env == "retail" and e.status is Status.COMPLETED and e.reward >= 0.5 and not _found(e)),
]


@pytest.mark.parametrize(("name", "flt", "pred"), FILTERS, ids=[f[0] for f in FILTERS])
def test_filters_match_the_records(store: Store, records: list[Episode], name: str, flt: EpisodeFilter, pred) -> None:
    want = ids_where(records, pred)
    assert want, f"the synthetic family should exercise {name}"
    assert store.count(flt) == len(want)
    got = all_ids(store, flt)
    assert len(got) == len(set(got)) and set(got) == want


@pytest.mark.parametrize("text", [needle(7), "ZEBRA crossing #10", "database", "boom", "lookup", "refund order",
                                  '"k": "<b>', "#1", "50%", "a_b"])
def test_full_text_search_is_a_case_insensitive_substring_of_what_people_read(
    store: Store, records: list[Episode], text: str
) -> None:
    want = ids_where(records, lambda e: text.lower() in _texts(e))
    assert store.count(EpisodeFilter(text=text)) == len(want)
    assert set(all_ids(store, EpisodeFilter(text=text))) == want


@pytest.mark.parametrize("text", ["You are the retail agent", "You are the math agent", "agent"])
def test_system_prompts_are_searched_only_when_asked(store: Store, records: list[Episode], text: str) -> None:
    # The same policy text is in every episode of an env: by default a search does not match on it.
    mentions = ids_where(records, lambda e: text.lower() in _texts(e))
    everywhere = ids_where(records, lambda e: text.lower() in _texts(e, context=True))
    assert len(everywhere) > len(mentions)
    assert set(all_ids(store, EpisodeFilter(text=text))) == mentions
    assert set(all_ids(store, EpisodeFilter(text=text, search_context=True))) == everywhere
    assert EpisodeFilter.from_where([f"text_all={text}"]) == EpisodeFilter(text=text, search_context=True)


def test_search_finds_the_needle_and_not_the_json(store: Store, records: list[Episode]) -> None:
    assert [r.id for r in store.list_episodes(EpisodeFilter(text=needle(1007)))] == ["ep0001007"]
    # JSON keys and record metadata are not message contents.
    assert store.count(EpisodeFilter(text='"role"')) == 0
    assert store.count(EpisodeFilter(text="synthetic-1")) == 0
    assert store.count(EpisodeFilter(text="   ")) == N  # blank: no filter


@pytest.mark.parametrize("column", SORTABLE)
def test_every_column_sorts_the_whole_selection_and_pages_cover_it_once(
    store: Store, records: list[Episode], column: str
) -> None:
    flt = EpisodeFilter(env="price")
    want = ids_where(records, lambda e: e.env == "price")
    for descending in (True, False):
        got = all_ids(store, flt, column, descending)
        assert len(got) == len(want) and set(got) == want
        rows = {r.id: r for r in store.list_episodes(flt, order_by=column, descending=descending, limit=len(want))}
        values = [getattr(rows[i], column) for i in got]
        values = [(v is None, v) for v in values]  # NULLs sort first ascending in SQLite
        assert values == sorted(values, reverse=descending)


def test_sorting_rejects_unknown_columns(store: Store) -> None:
    with pytest.raises(ConfigError):
        store.list_episodes(order_by="reward; DROP TABLE episodes")


def test_summaries_carry_tags_group_errors_and_reason(store: Store, records: list[Episode]) -> None:
    by_id = {e.id: e for e in records}
    for row in store.list_episodes(EpisodeFilter(tags=("bug",)), limit=30):
        e = by_id[row.id]
        assert row.tags == tuple(sorted(e.tags)) and row.group_id == e.group_id
        assert row.n_errors == sum(1 for f in e.all_findings() if f.severity.value == "error")
        assert row.starred == e.starred and row.n_trainable == e.tokens.n_trainable
        assert row.reason == e.reason
    ended = store.list_episodes(EpisodeFilter(status=("aborted", "failed")), limit=10)
    assert ended and {r.reason for r in ended} <= {"tool call parse error", "env error: boom"}


def test_stats_agree_with_the_records(store: Store, records: list[Episode]) -> None:
    flt = EpisodeFilter(env="math")
    sel = [e for e in records if e.env == "math"]
    st = store.stats(flt)
    assert st.total == len(sel)
    assert dict(st.status) == Counter(e.status.value for e in sel)
    assert dict(st.turns) == Counter(e.n_turns for e in sel)
    # Rewards per (env, preset), most frequent first; math rewards take 11 values: one bar per value.
    sets = Counter((e.env, e.preset) for e in sel)
    assert [(r.env, r.preset, r.n) for r in st.rewards] == sorted(
        ((env, preset, n) for (env, preset), n in sets.items()), key=lambda x: (-x[2], x[0], x[1]))
    assert st.n_reward_sets == len(sets)
    for r in st.rewards:
        want = Counter(e.reward for e in sel if e.preset == r.preset)
        assert dict(zip(r.bins.centers, r.bins.counts, strict=True)) == want
    everything = store.stats()
    assert {(r.env, r.preset): r.n for r in everything.rewards} == Counter((e.env, e.preset) for e in records)
    assert everything.n_reward_sets == len(everything.rewards) > 1
    assert sum(st.tokens.counts) == sum(st.trainable.counts) == len(sel)
    # The most frequent tasks, per (env, preset): a task under two presets is two rows.
    triples = Counter((e.env, e.preset, e.task_id) for e in sel)
    assert st.n_tasks == len({e.task_id for e in sel})
    task = st.tasks[0]
    assert (task.env, task.preset) != ("", "")
    rewards = [e.reward for e in sel if (e.env, e.preset, e.task_id) == (task.env, task.preset, task.key)]
    assert task.n == len(rewards) == max(triples.values())
    assert task.mean == pytest.approx(sum(rewards) / len(rewards))
    mean = sum(rewards) / len(rewards)
    assert task.std == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)), abs=1e-9)
    groups: dict[str, list[float]] = {}
    for e in sel:
        groups.setdefault(e.group_id or "", []).append(e.reward)
    multi = {g: r for g, r in groups.items() if len(r) > 1}
    assert st.n_groups == len(multi)
    assert st.n_flat_groups == sum(1 for r in multi.values() if min(r) == max(r))
    g = st.groups[0]
    assert (g.n, g.min, g.max) == (len(multi[g.key]), min(multi[g.key]), max(multi[g.key]))
    # The first groups by id are kept; all of them are counted.
    few = store.stats(flt, group_limit=3)
    assert [x.key for x in few.groups] == sorted(multi)[:3] and (few.n_groups, few.n_flat_groups) == \
        (st.n_groups, st.n_flat_groups)


def test_rewards_are_binned_per_env_and_preset_on_their_own_range(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A preset's shaped returns (-5..5, continuous) and another's 0/1 rewards are binned apart, each over
    its own range; the most frequent pairs come first and the rest are counted."""
    s = Store(tmp_path / "scales.db")
    eps = [synthetic_episode(i).evolve(env="math", preset="areal-math", reward=-5 + i / 10) for i in range(100)]
    eps += [synthetic_episode(100 + i).evolve(env="retail", preset="tito", reward=float(i % 2)) for i in range(30)]
    eps += [synthetic_episode(200 + i).evolve(env="retail", preset="slime-tau", reward=0.0) for i in range(3)]
    s.save_episodes(eps)
    st = s.stats()
    assert [(r.label, r.n) for r in st.rewards] == [
        ("math · areal-math", 100), ("retail · tito", 30), ("retail · slime-tau", 3)]
    areal, tito, slime = st.rewards
    assert len(areal.bins.counts) == 30 and sum(areal.bins.counts) == 100
    assert areal.bins.centers[0] == pytest.approx(-5 + areal.bins.width / 2)
    assert areal.bins.centers[-1] == pytest.approx(4.9 - areal.bins.width / 2)
    assert dict(zip(tito.bins.centers, tito.bins.counts, strict=True)) == {0.0: 15, 1.0: 15}
    assert slime.bins.counts == (3,)
    few = s.stats(reward_sets=2)
    assert len(few.rewards) == 2 and few.n_reward_sets == 3
    assert [r.label for r in s.stats(EpisodeFilter(env="retail")).rewards] == ["retail · tito", "retail · slime-tau"]
    # A task run under two presets: a row for each, the task counted once.
    s.save_episodes([synthetic_episode(300 + i).evolve(env="retail", task_id="t-both", preset=("tito", "slime-tau")[i % 2],
                                                       reward=1.0) for i in range(4)])
    both = [t for t in s.stats(EpisodeFilter(task_id="t-both")).tasks]
    assert sorted((t.preset, t.n) for t in both) == [("slime-tau", 2), ("tito", 2)]
    assert s.stats(EpisodeFilter(task_id="t-both")).n_tasks == 1
    # Selections with more distinct rewards than one pass reads are binned per pair in SQL, the same way.
    fast = s.stats()
    monkeypatch.setattr(browse, "_REWARD_ROWS", 10)
    slow = s.stats()
    assert slow.rewards == fast.rewards and slow.n_reward_sets == fast.n_reward_sets
    s.close()


def test_stats_bin_continuous_values_and_handle_subquery_filters(store: Store, records: list[Episode]) -> None:
    st = store.stats(EpisodeFilter(text="lookup"))
    want = [e for e in records if "lookup" in _texts(e)]
    assert st.total == len(want)
    assert 1 < len(st.tokens.counts) <= 30 and sum(st.tokens.counts) == len(want)
    # Each bar counts the episodes whose length it spans, all tokens and trainable ones on the same bars.
    for bins, length in ((st.tokens, lambda e: e.n_tokens), (st.trainable, lambda e: e.tokens.n_trainable)):
        spans = [(c - w / 2, c + w / 2) for c, w in zip(bins.centers, bins.bar_widths(), strict=True)]
        assert bins.centers == st.tokens.centers
        assert list(bins.counts) == [sum(lo < length(e) < hi for e in want) for lo, hi in spans]
    assert store.stats(EpisodeFilter(env="nosuch")).total == 0
    assert not store.stats(EpisodeFilter(env="nosuch")).status


def test_finding_kinds_and_tag_counts(store: Store, records: list[Episode]) -> None:
    kinds = dict(store.finding_kinds())
    assert kinds["mask_misaligned"] == len(ids_where(records, lambda e: any(
        f.kind == "mask_misaligned" for f in e.all_findings())))
    assert dict(store.tag_counts()) == Counter(t for e in records for t in e.tags)


def test_index_follows_every_write(tmp_path: Path) -> None:
    """episode_index (what Browse reads) stays equal to episodes after each kind of write."""
    s = Store(tmp_path / "w.db")
    eps = [synthetic_episode(i) for i in range(6)]
    s.save_episodes(eps)
    s.set_starred(eps[0].id, not eps[0].starred)
    s.set_status([eps[1].id], Status.INTERRUPTED, "gone")
    running = synthetic_episode(10).evolve(status=Status.RUNNING)
    s.save_turn(running, running.turns[0])
    s.finish_episode(running.evolve(status=Status.COMPLETED, reward=0.25))
    conn = sqlite3.connect(tmp_path / "w.db")
    cols = "id, env, task_id, status, reward, n_turns, n_tokens, starred, n_findings, source"
    assert sorted(conn.execute(f"SELECT {cols} FROM episodes")) == sorted(conn.execute(f"SELECT {cols} FROM episode_index"))
    assert s.count(EpisodeFilter(status=("interrupted",))) == 1
    assert s.count(EpisodeFilter(starred=not eps[0].starred, ids=(eps[0].id,))) == 1
    assert [r.reward for r in s.list_episodes(EpisodeFilter(ids=(running.id,)))] == [0.25]


def test_search_follows_turn_commits_and_replacement(tmp_path: Path) -> None:
    s = Store(tmp_path / "s.db")
    ep = synthetic_episode(7)
    partial = ep.evolve(turns=ep.turns[:1], status=Status.RUNNING)
    s.save_turn(partial, partial.turns[0])
    assert s.count(EpisodeFilter(text=needle(7))) == 1  # the opening is searchable while it runs
    first_gen = ep.turns[0].generation.text
    assert s.count(EpisodeFilter(text=first_gen)) == 1
    s.finish_episode(ep.evolve(reason="planted verdict xyzzy"))
    assert s.count(EpisodeFilter(text="XYZZY")) == 1
    s.save_episode(ep.evolve(messages=(ep.messages[0],), turns=(), reason=""))
    assert s.count(EpisodeFilter(text=needle(7))) == 0 and s.count(EpisodeFilter(text="xyzzy")) == 0


def test_a_database_from_before_the_index_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    s = Store(path)
    s.save_episodes(synthetic_episodes(60))
    s.close()
    conn = sqlite3.connect(path)
    for sql in ("DROP TABLE search_fts", "DROP TABLE search_texts", "DROP TABLE search_refs",
                "DROP TABLE episode_index", "DROP TABLE migrations",  # a file from before the migrations
                "UPDATE meta SET value = '1' WHERE key = 'db_schema'"):
        conn.execute(sql)
    conn.commit()
    conn.close()
    again = Store(path)
    assert again.applied[:3] == ["0002_search_index", "0003_diagnosis", "0004_browse_index"]
    assert again.count() == 60
    assert again.count(EpisodeFilter(text=needle(57))) == 1
    assert again.list_episodes(order_by="reward", limit=1)[0].reward == max(e.reward for e in synthetic_episodes(60))


@pytest.mark.solo
def test_paging_stays_fast(store: Store) -> None:
    """Not a benchmark (bench/dashboard_speed.py is): a guard against a query that scans the episodes' JSON."""
    flt = EpisodeFilter(status=("completed",), reward_min=0.5)
    start = time.perf_counter()
    for page in (0, 5, 10):
        store.count(flt)
        store.list_episodes(flt, limit=50, offset=page * 50)
    assert time.perf_counter() - start < 1.0


def test_every_env_is_in_the_family() -> None:
    assert {synthetic_episode(i).env for i in range(len(ENVS))} == set(ENVS)


def test_distinct_values_are_every_stored_value_in_order(store: Store) -> None:
    """Read a value at a time from the browse index: the same as SELECT DISTINCT over the episodes, NULLs left out."""
    for column in ("env", "status", "preset", "run_id", "source", "task_id", "outcome"):
        want = [r[0] for r in store.db.execute(
            f"SELECT DISTINCT {column} FROM episodes WHERE {column} IS NOT NULL ORDER BY 1")]
        assert store.distinct(column) == want and (want or column == "outcome"), column  # synthetic: no outcomes
    with pytest.raises(ConfigError):
        store.distinct("reward")
