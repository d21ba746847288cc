"""Plotly figure builders: figures built from known data carry the right traces and values."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from dashboard.views import charts
from engine.records.episode import Finding, Generation, Segment, Severity, TokenArrays, Turn
from engine.store import Bins, BrowseStats, EpisodeFilter, RewardBins, RewardStats, Store
from tests.synthetic import synthetic_episode, synthetic_episodes


def _stats(**kw: object) -> BrowseStats:
    return BrowseStats(**kw)  # type: ignore[arg-type]


def test_reward_distribution_draws_the_bins() -> None:
    fig = charts.reward_distribution([RewardBins("math", "tito", 10, Bins((0.0, 0.5, 1.0), (3, 1, 6), 0.4))])
    [bar] = fig.data
    assert bar.type == "bar" and list(bar.x) == [0.0, 0.5, 1.0] and list(bar.y) == [3, 1, 6] and bar.width == 0.4
    assert fig.layout.title.text == "Reward distribution" and bar.name == "math · tito"
    one = charts.reward_distribution([RewardBins("math", "tito", 3, Bins((1.0,), (3,), 1.0))])
    assert one.data[0].width < 1 and list(one.layout.xaxis.range) == [0.0, 2.0]  # room around a lone value
    assert fig.layout.annotations[0].text == "math · tito · 10 episodes"


def test_reward_distribution_has_a_panel_per_env_and_preset_on_its_own_axis() -> None:
    shaped = RewardBins("math", "areal-math", 6, Bins((-5.0, 0.0, 5.0), (1, 2, 3), 4.0))
    binary = RewardBins("retail", "slime-tau", 4, Bins((0.0, 1.0), (3, 1), 0.8))
    fig = charts.reward_distribution([shaped, binary], n_sets=3)
    assert [t.name for t in fig.data] == ["math · areal-math", "retail · slime-tau"]
    assert [sum(t.y) for t in fig.data] == [6, 4]
    assert fig.data[0].xaxis == "x" and fig.data[1].xaxis == "x2"  # separate reward axes
    assert fig.layout.xaxis.matches is None and fig.layout.xaxis2.matches is None
    assert fig.data[0].marker.color != fig.data[1].marker.color
    assert "the 2 most frequent of 3" in fig.layout.title.text
    assert [a.text for a in fig.layout.annotations] == ["math · areal-math · 6 episodes",
                                                        "retail · slime-tau · 4 episodes"]
    assert fig.layout.height > 260


def test_status_breakdown_uses_status_colors_and_shares() -> None:
    fig = charts.status_breakdown((("completed", 6), ("aborted", 2), ("weird", 2)))
    [bar] = fig.data
    assert bar.orientation == "h" and list(bar.y) == ["completed", "aborted", "weird"] and list(bar.x) == [6, 2, 2]
    assert list(bar.marker.color) == [charts.STATUS_COLORS["completed"], charts.STATUS_COLORS["aborted"], "#6b7280"]
    assert list(bar.text) == ["6 (60%)", "2 (20%)", "2 (20%)"]


def test_turns_and_token_distributions() -> None:
    fig = charts.turns_distribution(((1, 4), (2, 7), (5, 1)))
    assert list(fig.data[0].x) == [1, 2, 5] and list(fig.data[0].y) == [4, 7, 1]
    assert fig.layout.xaxis.dtick == 1
    tokens = Bins((50.0, 150.0), (3, 2), 100.0)
    trainable = Bins((50.0, 150.0), (5, 0), 100.0)
    fig = charts.token_distribution(tokens, trainable)
    assert [t.name for t in fig.data] == ["all tokens", "trainable"]
    assert list(fig.data[1].y) == [5, 0] and fig.data[1].width == 0.5
    assert list(fig.data[0].x) == list(fig.data[1].x) == ["0", "100"]
    assert fig.layout.barmode == "overlay"
    # Bars that widen with the length: each drawn alike and named by its first and last length, in order.
    wide = Bins((7.0, 23.5, 55.5, 26_623.5, 1_081_343.5), (1, 4, 2, 1, 1), 1.0, (1.0, 32.0, 32.0, 2048.0, 65_536.0))
    fig = charts.token_distribution(wide, Bins())
    assert len(fig.data) == 1 and list(fig.data[0].x) == ["7", "8", "40", "25.6k", "1.05M"]
    assert [list(c) for c in fig.data[0].customdata] == [[7, 7], [8, 39], [40, 71], [25_600, 27_647],
                                                         [1_048_576, 1_114_111]]
    assert list(fig.layout.xaxis.categoryarray) == list(fig.data[0].x) and fig.layout.xaxis.type == "category"
    assert list(fig.layout.xaxis.tickvals) == list(fig.data[0].x)  # few bars: each named
    # Many bars: every k-th named, so no more than MAX_LENGTH_TICKS labels crowd the axis; every bar is still drawn.
    many = Bins(tuple(10.0 * k + 5 for k in range(23)), (1,) * 23, 10.0)
    fig = charts.token_distribution(many, Bins())
    ticks = list(fig.layout.xaxis.tickvals)
    assert len(fig.data[0].x) == 23 and 8 <= len(ticks) <= charts.MAX_LENGTH_TICKS and ticks == list(fig.data[0].x)[::3]


def test_reward_by_task_has_means_and_spread_and_says_when_cut() -> None:
    tasks = (RewardStats("b", "b", 4, 0.5, 0.5, 0.0, 1.0), RewardStats("a", "a", 2, 1.0, 0.0, 1.0, 1.0))
    fig = charts.reward_by_task(tasks, n_tasks=9)
    [bar] = fig.data
    assert list(bar.x) == ["a", "b"] and list(bar.y) == [1.0, 0.5] and list(bar.error_y.array) == [0.0, 0.5]
    assert "2 most frequent of 9" in fig.layout.title.text
    assert charts.reward_by_task(tasks, 2).layout.title.text == "Reward by task"


def test_reward_by_task_keeps_each_preset_apart_in_the_distributions_colors() -> None:
    tasks = (RewardStats("t1", "t1", 4, 2.5, 1.0, 1.0, 5.0, "math", "areal-math"),
             RewardStats("t1", "t1", 2, 0.5, 0.5, 0.0, 1.0, "math", "tito"),
             RewardStats("t2", "t2", 3, 1.0, 0.0, 1.0, 1.0, "math", "tito"))
    sets = [("math", "tito"), ("math", "areal-math")]
    fig = charts.reward_by_task(tasks, 3, sets)
    assert [t.name for t in fig.data] == ["math · tito", "math · areal-math"]
    tito, areal = fig.data
    assert list(tito.x) == ["t1", "t2"] and list(tito.y) == [0.5, 1.0] and list(areal.y) == [2.5]
    assert tito.marker.color == charts.set_color(0) and areal.marker.color == charts.set_color(1)
    assert fig.layout.barmode == "group" and "env · preset" in fig.layout.title.text


def test_group_spread_per_group_and_as_a_cloud() -> None:
    groups = (RewardStats("g0", "t0", 4, 0.25, 0.433, 0.0, 1.0), RewardStats("g1", "t0", 4, 1.0, 0.0, 1.0, 1.0))
    fig = charts.group_spread(groups, n_groups=2, n_flat=1)
    rng, means = fig.data
    assert rng.type == "bar" and list(rng.base) == [0.0, 1.0] and list(rng.y) == [1.0, 0.0]
    assert list(means.y) == [0.25, 1.0] and list(means.error_y.array) == [0.433, 0.0]
    assert list(means.marker.color) == [charts.ACCENT, "#dc2626"]  # a flat group is red
    assert "1 of 2 with zero spread" in fig.layout.title.text
    assert fig.layout.xaxis.tickangle == 0  # two short labels lie level
    # Six groups named as a slime dump names them would run together: they slant.
    named = tuple(RewardStats(f"slime:0:{i}", "arith-add-0000", 4, 0.5, 0.1, 0.0, 1.0) for i in range(6))
    assert charts.group_spread(named, n_groups=6, n_flat=0).layout.xaxis.tickangle == -35
    many = tuple(RewardStats(f"g{i}", "t", 2, i / 100, 0.1, 0.0, 1.0) for i in range(100))
    fig = charts.group_spread(many, n_groups=250, n_flat=0)
    [cloud] = fig.data
    assert cloud.type == "scattergl" and len(cloud.x) == 100 and cloud.y[0] == 0.1
    assert "100 shown" in fig.layout.title.text and "0 of 250" in fig.layout.title.text


def test_empty_selection_says_so() -> None:
    figs = charts.browse_figures(BrowseStats())
    assert len(figs) == 6
    for fig in figs:
        assert not fig.data and fig.layout.annotations and "no" in fig.layout.annotations[0].text


def test_browse_figures_from_a_real_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.db")
    records = [e.evolve(preset=("tito", "areal-math")[i % 2]) for i, e in enumerate(synthetic_episodes(120))]
    store.save_episodes(records)
    stats = store.stats(EpisodeFilter(env="math"))
    figs = charts.browse_figures(stats)
    # One reward trace per (env, preset), each with that pair's episodes.
    per_set = Counter(f"{e.env} · {e.preset}" for e in records if e.env == "math")
    assert {t.name: sum(t.y) for t in figs[0].data} == per_set and len(per_set) == 2
    assert sum(per_set.values()) == stats.total == 40
    assert sum(figs[1].data[0].x) == 40
    assert {t.name for t in figs[4].data} == set(per_set)
    assert figs[5].data and "Groups" in figs[5].layout.title.text


def test_turn_series_and_chart_from_a_known_episode() -> None:
    ep = synthetic_episode(5)  # 6 turns, a finding on turn 0
    s = charts.turn_series(ep)
    assert s.turns == tuple(range(ep.n_turns))
    assert s.reward == ep.turn_rewards and s.returns == ep.returns
    assert s.generated == tuple(len(t.generation.token_ids) for t in ep.turns)
    for t, mean in zip(ep.turns, s.logprob_mean, strict=True):
        assert mean == pytest.approx(float(np.mean(t.generation.logprobs)))
    assert s.with_findings == (0,)
    fig = charts.turn_chart(ep)
    names = [t.name for t in fig.data]
    assert names == ["reward", "return", "findings", "tokens generated", "mean logprob"]
    assert list(fig.data[3].y) == list(s.generated)
    assert list(fig.data[2].x) == [0]
    assert fig.data[4].yaxis == "y3" and fig.data[3].yaxis == "y2"


def test_turn_series_falls_back_to_token_logprobs_and_env_rewards() -> None:
    # An imported episode: generations without logprobs, no shaped rewards.
    lps = [math.nan, math.nan, -1.0, -3.0, math.nan]
    turn = Turn(index=0, prompt_text=None, prompt_len=2, generation=Generation("x", (5, 6, 7)), reward=0.5,
                segments=(Segment(2, 4, "assistant", 0, True),),
                findings=(Finding("k", Severity.INFO, "m", turn=0),))
    ep = synthetic_episode(1).evolve(turns=(turn,), turn_rewards=(), returns=(),
                                     tokens=TokenArrays([1, 2, 3, 4, 5], [0, 0, 1, 1, 0], lps))
    s = charts.turn_series(ep)
    assert s.reward == (0.5,) and math.isnan(s.returns[0]) and s.logprob_mean == (-2.0,) and s.generated == (3,)
    assert charts.turn_chart(ep.evolve(turns=())).layout.annotations[0].text == "this episode has no turns"
