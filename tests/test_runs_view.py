"""The Runs tab without a browser: per-step figures, alerts and table from imported dumps, the watches, and
Browse's step filter and refresh stamp, on a real SQLite store."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dashboard.background.watching import FAILED, STOPPED, WATCHING, WatchManager
from dashboard.tabs import browse as browse_tab
from dashboard.tabs import runs as runs_tab
from dashboard.views import run_charts
from dashboard.views.runs import alerts_note, event_line, run_label, step_table, watch_status
from engine import step_changes
from engine.errors import ConfigError, StoreError
from engine.formats.watch import Watcher, WatchEvent
from engine.store import StepStats, Store
from tests.fixtures_formats import slime_sample, synthetic_slime_samples, write_slime_dump

N = 8


def _first_dump() -> list[dict[str, Any]]:
    return synthetic_slime_samples(N, 600, seed=0)  # rewards 0, 1, 0, 1, ...: mean 0.5


def _second_dump() -> list[dict[str, Any]]:
    """Rollout 1 went wrong: 6 of 8 loss masks longer than the response, one truncated, one aborted, reward 1."""
    samples = synthetic_slime_samples(N, 600, seed=1)
    for s in samples:
        s["reward"] = 1.0
    for s in samples[:6]:
        s["loss_mask"] = s["loss_mask"] + [1] * 10
    samples[6]["status"] = "truncated"
    samples[7]["status"] = "aborted"
    return samples


@pytest.fixture
def run(tmp_path: Path) -> tuple[Store, str]:
    """A store holding a run imported (and checked) from two slime dumps, rollout ids 0 and 1."""
    folder = tmp_path / "dumps"
    write_slime_dump(folder / "0.pt", _first_dump(), 0)
    write_slime_dump(folder / "1.pt", _second_dump(), 1)
    store = Store(tmp_path / "r.db")
    watcher = Watcher(store, folder, "slime", settle=0.0)
    assert [e.new for e in watcher.poll()] == [N, N]
    return store, watcher.run_id


def _trace(fig: Any, name: str) -> Any:
    [trace] = [t for t in fig.data if t.name == name]
    return trace


def test_two_rollout_ids_make_two_points_with_their_means_and_rates(run: tuple[Store, str]) -> None:
    store, run_id = run
    stats = store.step_stats(run_id)
    assert [s.step for s in stats] == [0, 1] and [s.n for s in stats] == [N, N]
    marked = step_changes(stats)
    fig = run_charts.run_figure(stats, run_id, marked)
    mean = _trace(fig, "mean reward")
    assert list(mean.x) == [0, 1] and list(mean.y) == pytest.approx([0.5, 1.0])
    assert list(_trace(fig, "reward max").y) == [1.0, 1.0] and list(_trace(fig, "reward min–max").y) == [0.0, 1.0]
    assert list(_trace(fig, "truncated").y) == pytest.approx([0.0, 12.5])
    assert list(_trace(fig, "aborted").y) == pytest.approx([0.0, 12.5])
    assert list(_trace(fig, "response tokens").y) == pytest.approx([s.response_tokens for s in stats])
    assert list(_trace(fig, "mask_misaligned").y) == [0, 6] and list(_trace(fig, "any root error").y) == [0, 6]
    assert fig.layout.barmode == "stack" and fig.layout.uirevision == run_id

    # The jump in root errors at step 1 is the alert, drawn as a line on the panels and said in words.
    [alert] = marked
    assert (alert.step, alert.what, alert.before, alert.after, alert.kinds) == (
        1, "root errors", 0.0, 0.75, ("mask_misaligned",))
    assert [s.x0 for s in fig.layout.shapes] == [1] * 4
    note = alerts_note(stats, marked)
    assert "The data changed at step 1" in note and "root errors 0% → 75% (mask_misaligned)" in note

    table = step_table(stats, marked)
    assert table.index('data-step="1"') < table.index('data-step="0"')  # newest first
    assert table.count("rs-step-alert") == 1 and "⚠ 1" in table and "6</span> <span class=\"rs-dim\">(75%)" in table
    assert "12% <span" in table  # 1 of 8 truncated

    [summary] = store.runs_with_steps()
    assert run_label(summary) == f"{run_id} · steps 0–1 · 16 episodes"


def test_alerts_mark_jumps_not_levels() -> None:
    def step(k: int, errors: int, aborted: int = 0, n: int = 10) -> StepStats:
        return StepStats(k, n, 0.5, 0.0, 1.0, 0, aborted, 100.0, errors, {"env_error": errors} if errors else {})

    calm = [step(0, 0), step(1, 1), step(2, 2), step(3, 3)]  # creeping up by 10 points a step
    assert step_changes(calm) == []
    assert "No jumps" in alerts_note(calm, [])
    jumps = [step(0, 0), step(1, 1), step(2, 6, aborted=5), step(3, 6)]
    assert [(a.step, a.what) for a in step_changes(jumps)] == [(2, "root errors"), (2, "aborted")]
    assert [c.text() for c in step_changes(jumps)] == ["step 2: root errors 10% → 60% (env_error)",
                                                         "step 2: aborted 0% → 50%"]
    # A change is between two steps: a share that is high from the first step on is a level, not a change.
    broken = [step(5, 10), step(6, 10)]
    assert step_changes(broken) == [] and step_changes(broken[:1]) == []
    assert "One rollout step so far (step 5)" in alerts_note(broken[:1], [])
    assert "The data changed" not in alerts_note(broken[:1], step_changes(broken[:1]))


def test_a_step_no_check_ran_on_is_no_step_without_errors(tmp_path: Path) -> None:
    """A run imported without checks, then checked from its second step on: its first step's root errors are
    unknown, not 0, so the checked step's errors are no jump over it; the table, the plot and the note say which
    episodes were not checked, and the runs list does not call the run clean."""
    from dashboard.views.runs import runs_table

    folder = tmp_path / "dumps"
    write_slime_dump(folder / "0.pt", _first_dump(), 0)
    write_slime_dump(folder / "1.pt", _second_dump(), 1)
    store = Store(tmp_path / "r.db")
    watcher = Watcher(store, folder, "slime", settle=0.0, check=False)
    assert [e.new for e in watcher.poll()] == [N, N]
    run_id = watcher.run_id
    unchecked = store.step_stats(run_id)
    assert [(s.n, s.unchecked, s.with_errors, s.error_rate) for s in unchecked] == [(N, N, 0, None)] * 2
    assert step_changes(unchecked) == []
    [row] = store.run_overview()
    assert (row.n_episodes, row.unchecked, row.with_errors) == (2 * N, 2 * N, 0)
    listed = runs_table([row])
    assert ">not checked</span></td></tr>" in listed and '<td class="rs-num">0</td>' not in listed
    note = alerts_note(unchecked, [])
    assert "16 of the 16 episodes were not checked: their root errors are unknown" in note and "rs-warn" in note

    # The checks run on step 1 alone (as `rollscope check --where step=1` does): 6 of its 8 have a root error.
    from engine.checks import with_checks
    from engine.store import EpisodeFilter

    for ep in store.iter_episodes(EpisodeFilter(run_id=run_id, rollout_step=1)):
        store.finish_episode(with_checks(ep))
    stats = store.step_stats(run_id)
    assert [(s.unchecked, s.with_errors, s.error_rate) for s in stats] == [(N, 0, None), (0, 6, 0.75)]
    assert step_changes(stats) == []  # 0 root errors of no checked episode is no level to jump from
    fig = run_charts.run_figure(stats, run_id, [])
    assert list(_trace(fig, "any root error").y) == [None, 6]
    titles = [a.text for a in fig.layout.annotations]
    assert "episodes with root errors, by kind (8 of 16 not checked: their root errors are unknown)" in titles
    table = step_table(stats, [])
    cells = {k: table.split(f'data-step="{k}"', 1)[1].split("</tr>", 1)[0] for k in (0, 1)}
    assert ">not checked</span>" in cells[0] and "not checked" not in cells[1] and "(75%)" in cells[1]
    [row] = store.run_overview()
    assert (row.unchecked, row.with_errors) == (N, 6)
    assert "(75%)</span> · <span class=\"rs-unchecked\"" in runs_table([row]) and "8 not checked" in runs_table([row])
    store.close()


def test_root_kinds_past_the_most_frequent_are_summed_as_other() -> None:
    kinds = {f"k{i}": i + 1 for i in range(8)}
    stats = [StepStats(0, 40, 0.0, 0.0, 0.0, 0, 0, 1.0, 20, kinds)]
    series = run_charts.kind_series(stats, max_kinds=3)
    assert series == [("k7", [8]), ("k6", [7]), ("k5", [6]), ("other", [1 + 2 + 3 + 4 + 5])]


def test_an_empty_run_says_why() -> None:
    fig = run_charts.run_figure([], "r")
    assert not fig.data and "no episodes with a rollout step" in fig.layout.annotations[0].text
    assert run_charts.run_figure([]).layout.annotations[0].text == "no run chosen"  # not "in this run"


def test_one_step_draws_its_reward_range_as_a_bar_and_more_steps_as_a_band() -> None:
    """A band filled between min and max has no width at one step: that step's range is an error bar on the mean."""
    one = StepStats(3, 8, 0.25, -1.0, 1.0, 0, 0, 100.0, 0, {})
    mean = next(t for t in run_charts.run_figure([one], "r").data if t.name == "mean reward")
    assert (mean.error_y.array, mean.error_y.arrayminus) == ((0.75,), (1.25,))
    two = run_charts.run_figure([one, replace(one, step=4)], "r").data
    assert next(t for t in two if t.name == "mean reward").error_y.array is None
    assert next(t for t in two if t.name == "reward min–max").fill == "tonexty"
    assert step_table([]) == "" and "No steps yet" in alerts_note([], [])


def test_the_view_is_drawn_once_per_change(run: tuple[Store, str]) -> None:
    store, run_id = run
    drawn = runs_tab.view_values(store, run_id)
    assert set(drawn) == {"alerts", "plot", "outcomes", "steps", "view_key"}
    assert "step 1" in drawn["alerts"] and len(drawn["plot"].data) > 4 and 'data-step="0"' in drawn["steps"]
    assert runs_tab.view_values(store, run_id, drawn["view_key"]) == {}  # nothing new: nothing sent


def test_browse_filters_a_run_by_step_and_keeps_the_opened_row(run: tuple[Store, str]) -> None:
    store, run_id = run
    flt = browse_tab.episode_filter(run=run_id, step="1")
    assert flt.rollout_step == 1 and store.count(flt) == N
    assert browse_tab.episode_filter(step="1.5").rollout_step is None
    assert "Not a whole number, ignored: step &#x27;1.5&#x27;" in browse_tab._bad_bounds({"step": "1.5"})
    [one] = store.list_episodes(flt, limit=1)
    table, info, number = browse_tab.page(store, flt, None, 1, 25, selected=one.id, columns=["step"])
    assert number == 1 and f"of {N} matching" in info
    assert table.count('class="rs-selected"') == 1 and f'data-id="{one.id}" tabindex="0" class="rs-selected"' in table
    assert table.count('<td class="c-step c-num">1</td>') == N
    values = browse_tab.step_filters(store, run_id, 1)
    assert len(values) == 16 and values["run"].value == run_id and values["step"] == "1"
    assert browse_tab.episode_filter(**values | {"run": run_id}) == flt


def test_the_store_stamp_changes_when_episodes_arrive(tmp_path: Path) -> None:
    folder = tmp_path / "dumps"
    write_slime_dump(folder / "0.pt", _first_dump(), 0)
    store = Store(tmp_path / "r.db")
    empty = store.episodes_stamp()
    assert empty[0] == 0 and store.episodes_stamp() == empty
    Watcher(store, folder, "slime", settle=0.0).poll()
    assert store.episodes_stamp()[0] == N and store.episodes_stamp() != empty


def _until(what: Any, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_a_watch_imports_new_dumps_until_stopped(tmp_path: Path) -> None:
    folder = tmp_path / "run-a"
    write_slime_dump(folder / "0.pt", _first_dump(), 0)
    store = Store(tmp_path / "r.db")
    watches = WatchManager(interval=0.1, settle=0.0)
    job = watches.start(store, f" {folder} ", "slime", "", "my-run")
    assert job.status().state == WATCHING and job.watcher.run_id == "my-run" and job.watcher.check
    _until(lambda: job.status().new == N)
    with pytest.raises(ConfigError, match="already watched"):
        watches.start(store, str(folder / "."), "slime")
    assert watches.running(str(folder)) is job and watches.latest() is job

    write_slime_dump(folder / "1.pt", _second_dump(), 1)
    _until(lambda: job.status().new == 2 * N)
    assert [s.step for s in store.step_stats("my-run")] == [0, 1]
    status = job.status()
    assert status.reads == 2 and status.looks >= 2 and status.last_look is not None
    html = watch_status(status)
    assert 'data-state="watching"' in html and "0.pt: read: 8 new" in html and str(folder) in html

    assert job.stop() and job.wait(10) and job.status().state == STOPPED and not job.stop()
    assert watches.running(str(folder)) is None and "Stopped." in watch_status(job.status())
    watches.stop_all()


def test_a_watch_reads_the_score_its_form_names_of_a_dict_of_scores(tmp_path: Path) -> None:
    """The dashboard's watch has the reward key `rollscope watch --reward-key` has: the same dump reads the same."""
    folder = tmp_path / "run-k"
    write_slime_dump(folder / "0.pt", [slime_sample([1, 2, 3, 4], 2, index=0, reward={"acc": 0.5, "len": 7})], 0)
    store = Store(tmp_path / "r.db")
    watches = WatchManager(interval=0.1, settle=0.0)
    job = watches.start(store, str(folder), "slime", "", "k", " acc ")
    _until(lambda: job.status().new == 1)
    assert [e.reward for e in store.iter_episodes()] == [0.5]
    watches.stop_all()


def test_a_wrong_form_is_a_sentence(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    watches = WatchManager()
    with pytest.raises(ConfigError, match="Type the path"):
        watches.start(store, "  ", "slime")
    with pytest.raises(ConfigError, match="is not a folder on this server"):
        watches.start(store, str(tmp_path / "nowhere"), "slime")
    with pytest.raises(ConfigError, match="Choose the dumps' format"):
        watches.start(store, str(tmp_path), "parquet")
    with pytest.raises(ConfigError, match="leave it empty to import without token checks"):
        watches.start(store, str(tmp_path), "slime", str(tmp_path / "no-tokenizer"))
    assert watches.latest() is None


def test_a_watch_that_breaks_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "r.db")
    watches = WatchManager(interval=0.05, settle=0.0)
    job = watches.start(store, str(tmp_path), "slime")

    def broken() -> list[WatchEvent]:
        raise StoreError("the disk is full")

    monkeypatch.setattr(job.watcher, "poll", broken)
    _until(lambda: job.status().state == FAILED)
    assert job.status().error == "the disk is full"
    assert "The watch stopped on an error: the disk is full" in watch_status(job.status())


def test_event_lines_are_short_and_escaped(tmp_path: Path) -> None:
    event = WatchEvent(str(tmp_path / "<b>.pt"), "failed", message="bad <zip>")
    line = event_line(event, str(tmp_path))
    assert "<b>" not in line and "&lt;b&gt;.pt: failed (bad &lt;zip&gt;)" in line and str(tmp_path) not in line


def test_every_run_is_listed_with_what_it_ran_and_how_it_went(run: tuple[Store, str], smol_tokenizer) -> None:
    import asyncio

    from dashboard.views.runs import runs_table
    from engine import BackendSettings, plan_run, run_batch

    store, watched = run
    plan = plan_run("math", "0:2", 2, "auto", "max_turns = 2", 2, BackendSettings(mistake_rate=0.0), preflight=False)
    tokenizer, backend = plan.backend.open(plan.make_env)
    launched = asyncio.run(run_batch(plan.spec(), plan.make_env, backend, tokenizer, store, progress=False)).run_id
    rows = {r.run_id: r for r in store.run_overview()}
    assert set(rows) == {watched, launched}
    assert store.run_overview()[0].run_id == launched  # the newest first
    w, lv = rows[watched], rows[launched]
    assert (w.n_episodes, w.envs, w.status, w.with_errors) == (2 * N, w.envs, "imported", 6)
    assert (lv.n_episodes, lv.envs, lv.presets, lv.policies.split(" ")[0], lv.status) == (
        4, "math", "areal-math", "scripted", "finished")
    table = runs_table(store.run_overview())
    assert table.count("<tr data-run=") == 2 and f"<code>{launched}</code>" in table and "(38%)" in table


def test_ticked_rows_are_tagged_starred_and_exported_together(run: tuple[Store, str]) -> None:
    store, _ = run
    ids = store.episode_ids(browse_tab.episode_filter())[:3]
    message, path = browse_tab.bulk(store, {"bulk": "tag", "ids": ids, "tag": " look-here "})
    assert "Tagged 3 episodes &#x27;look-here&#x27;" in message and path is None
    assert store.count(browse_tab.episode_filter(tags=["look-here"])) == 3
    message, _ = browse_tab.bulk(store, {"bulk": "star", "ids": ids[:2]})
    assert "Starred 2 episodes" in message
    assert sorted(store.episode_ids(browse_tab.episode_filter(starred="starred"))) == sorted(ids[:2])
    browse_tab.bulk(store, {"bulk": "untag", "ids": ids[:1], "tag": "look-here"})
    assert store.count(browse_tab.episode_filter(tags=["look-here"])) == 2
    message, path = browse_tab.bulk(store, {"bulk": "export", "ids": ids, "format": "jsonl"})
    assert path is not None and "Exported 3 ticked episodes as jsonl" in message
    assert sorted(json.loads(line)["id"] for line in path.read_text().splitlines()) == sorted(ids)
    # Nothing ticked, no tag, an unknown id: a sentence, and nothing changes.
    assert "No rows are ticked" in browse_tab.bulk(store, {"bulk": "star", "ids": []})[0]
    assert "Type a tag" in browse_tab.bulk(store, {"bulk": "tag", "ids": ids, "tag": " "})[0]
    message, _ = browse_tab.bulk(store, {"bulk": "star", "ids": [ids[2], "nosuchepisode"]})
    assert "rs-error" in message and "nosuchepisode" in message
    assert sorted(store.episode_ids(browse_tab.episode_filter(starred="starred"))) == sorted(ids[:2])


def _collapsing_run(store: Store) -> dict[int, np.ndarray]:
    """Run ``collapse``: 6 rollout steps of 8 episodes, an entropy on every trainable token. Steps 0-3 draw it from
    (0.005, 0.8, 1.4, 2.0) nats, steps 4-5 from (0.001, 0.002, 0.003, 0.4): the policy collapses at step 4. Returns
    each step's entropies, for an independent count."""
    from engine.records.episode import Status
    from engine.records.provenance import Source
    from tests.synthetic import synthetic_episode

    planted: dict[int, list[np.ndarray]] = {}
    eps = []
    for i in range(48):
        step = i // 8
        values = (0.005, 0.8, 1.4, 2.0) if step < 4 else (0.001, 0.002, 0.003, 0.4)
        ep = synthetic_episode(i)
        t = ep.tokens
        entropy = np.where(t.loss_mask == 1, np.random.default_rng(i).choice(values, size=len(t)), np.nan)
        planted.setdefault(step, []).append(entropy[t.loss_mask == 1])
        # Completed, and nothing else changes from step to step: the collapse is the only news.
        eps.append(ep.evolve(run_id="collapse", tokens=t.evolve(entropy=entropy), status=Status.COMPLETED,
                             source=Source(kind="slime", details={"rollout_step": step})))
    store.save_episodes(eps)
    return {k: np.concatenate(v).astype(np.float32).astype(np.float64) for k, v in planted.items()}


def test_an_entropy_collapse_is_read_from_the_aggregates_and_marked(tmp_path: Path) -> None:
    store = Store(tmp_path / "collapse.db")
    planted = _collapsing_run(store)
    stats = store.step_stats("collapse")
    assert [s.step for s in stats] == [0, 1, 2, 3, 4, 5]
    for s in stats:
        e = planted[s.step]
        assert s.entropy_tokens == len(e) > 100 and s.near_zero_entropy == int((e < 0.01).sum())
        assert s.entropy_mean == pytest.approx(e.mean(), abs=1e-6)
    assert 0.9 < stats[3].entropy_mean < 1.2 and 0.15 < stats[3].near_zero_rate < 0.35  # type: ignore[operator]
    assert stats[4].entropy_mean < 0.15 and stats[4].near_zero_rate > 0.65  # type: ignore[operator]

    marked = step_changes(stats)
    assert [(c.step, c.what, c.collapse) for c in marked] == [(4, "near-zero entropy", True),
                                                               (4, "mean entropy", True)]
    low, mean = marked
    assert (low.before, low.after) == (stats[3].near_zero_rate, stats[4].near_zero_rate)
    assert (mean.before, mean.after) == (stats[3].entropy_mean, stats[4].entropy_mean)
    assert mean.text() == (f"step 4: mean entropy {stats[3].entropy_mean:.3g} → {stats[4].entropy_mean:.3g} nats "
                           "(entropy collapse)")

    fig = run_charts.run_figure(stats, "collapse", marked)
    assert list(_trace(fig, "mean entropy").y) == [s.entropy_mean for s in stats]
    assert list(_trace(fig, "near-zero entropy").y) == pytest.approx([100 * planted[k].__lt__(0.01).mean()
                                                                     for k in range(6)])
    assert [s.x0 for s in fig.layout.shapes] == [4] * 5  # the line on all five panels
    note = alerts_note(stats, marked)
    assert "The data changed at step 4" in note and "near-zero-entropy tokens" in note and "entropy collapse" in note
    table = step_table(stats, marked)
    assert table.count("rs-step-alert") == 1 and "⚠ 4" in table
    assert f">{stats[4].entropy_mean:.3g}</td>" in table and "<th class=\"rs-num\">near-zero entropy</th>" in table
    store.close()


def test_a_run_without_entropy_draws_no_entropy_panel_and_a_step_without_it_marks_nothing() -> None:
    def step(k: int, tokens: int = 0, mean: float | None = None, low: int = 0) -> StepStats:
        return StepStats(k, 10, 0.5, 0.0, 1.0, 0, 0, 100.0, 0, {}, entropy_tokens=tokens, entropy_mean=mean,
                         near_zero_entropy=low)

    plain = [step(0), step(1)]
    fig = run_charts.run_figure(plain, "r")
    assert not [t for t in fig.data if t.name in ("mean entropy", "near-zero entropy")]
    assert "entropy" not in step_table(plain) and "entropy" not in alerts_note(plain, [])
    # Entropy known at step 0 only (a later step generated without it): no collapse can be said.
    assert step_changes([step(0, 100, 1.5, 5), step(1)]) == []
    # A fall from an already collapsed mean is noise, not a new collapse; a rise of the near-zero share still counts.
    assert step_changes([step(0, 100, 0.08, 10), step(1, 100, 0.02, 10)]) == []
    assert [c.what for c in step_changes([step(0, 100, 1.0, 10), step(1, 100, 0.9, 40)])] == ["near-zero entropy"]
    assert "Nor did the entropy collapse" in alerts_note([step(0, 100, 1.0, 10), step(1, 100, 0.9, 20)], [])
