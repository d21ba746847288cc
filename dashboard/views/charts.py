"""Plotly figure builders: pure functions of records and store aggregates.

Browse's charts take a :class:`engine.store.BrowseStats` (the store bins and
groups in SQL, so a 100,000-episode selection sends a few dozen bars to the
browser, not 100,000 points); the Episode chart takes an :class:`Episode`.
No Gradio and no store here: each builder returns a ``go.Figure`` that a
test can inspect trace by trace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine import Bins, BrowseStats, Episode, RewardStats

STATUS_COLORS = {
    "completed": "#16a34a",
    "truncated": "#d97706",
    "aborted": "#dc2626",
    "failed": "#991b1b",
    "running": "#2563eb",
    "interrupted": "#6b7280",
}
ACCENT = "#2563eb"
TRAIN = "#16a34a"
# Past this many groups one marker per group is unreadable; show mean vs spread instead.
MAX_GROUP_BARS = 60
MAX_TASK_LABEL = 28


def layout(fig: go.Figure, title: str, height: int = 260, **kw: object) -> go.Figure:
    """The dashboard's look on ``fig``: its title, height, small fonts, faint grids; ``kw`` overrides."""
    # Transparent backgrounds so the figures sit on Gradio's light or dark page.
    base: dict[str, object] = {
        "title": {"text": title, "font": {"size": 13}, "x": 0.01, "xanchor": "left"},
        "height": height,
        "margin": {"l": 48, "r": 12, "t": 36, "b": 36},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "showlegend": False,
        "bargap": 0.08,
        "font": {"size": 11},
    }
    fig.update_layout(**(base | kw))
    fig.update_xaxes(gridcolor="rgba(128,128,128,.2)", zerolinecolor="rgba(128,128,128,.35)")
    fig.update_yaxes(gridcolor="rgba(128,128,128,.2)", zerolinecolor="rgba(128,128,128,.35)")
    return fig


def empty(title: str, why: str = "no episodes match the filters") -> go.Figure:
    """A blank figure that says why it is blank."""
    fig = go.Figure()
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font={"size": 12})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return layout(fig, title)


def _short(label: str) -> str:
    return label if len(label) <= MAX_TASK_LABEL else label[: MAX_TASK_LABEL - 1] + "…"


# -- Browse -------------------------------------------------------------------


def reward_distribution(bins: Bins) -> go.Figure:
    """Episodes per reward value (or reward bin)."""
    title = "Reward distribution"
    if not bins.counts:
        return empty(title)
    fig = go.Figure(go.Bar(
        x=list(bins.centers), y=list(bins.counts), width=bins.width, marker_color=ACCENT, name="episodes",
        hovertemplate="reward %{x:.4g}<br>%{y} episodes<extra></extra>",
    ))
    return layout(fig, title, xaxis_title="reward", yaxis_title="episodes")


def status_breakdown(status: Sequence[tuple[str, int]]) -> go.Figure:
    """Episodes per status, in the status colors the rest of the dashboard uses."""
    title = "Status"
    if not status:
        return empty(title)
    names = [s for s, _ in status]
    counts = [c for _, c in status]
    total = sum(counts)
    fig = go.Figure(go.Bar(
        x=counts, y=names, orientation="h", marker_color=[STATUS_COLORS.get(s, "#6b7280") for s in names],
        text=[f"{c:,} ({c / total:.0%})" for c in counts], textposition="auto", name="episodes",
        hovertemplate="%{y}: %{x} episodes<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    return layout(fig, title, xaxis_title="episodes")


def turns_distribution(turns: Sequence[tuple[int, int]]) -> go.Figure:
    """Episodes per number of turns."""
    title = "Turns per episode"
    if not turns:
        return empty(title)
    fig = go.Figure(go.Bar(
        x=[t for t, _ in turns], y=[c for _, c in turns], marker_color=ACCENT, name="episodes",
        hovertemplate="%{x} turns<br>%{y} episodes<extra></extra>",
    ))
    fig.update_xaxes(dtick=1 if max(t for t, _ in turns) <= 20 else None)
    return layout(fig, title, xaxis_title="turns", yaxis_title="episodes")


def token_distribution(tokens: Bins, trainable: Bins) -> go.Figure:
    """Episodes per token length: all tokens and the trainable (mask 1) ones, on the same bins."""
    title = "Token length"
    if not tokens.counts:
        return empty(title)
    fig = go.Figure()
    fig.add_bar(x=list(tokens.centers), y=list(tokens.counts), width=tokens.width, name="all tokens",
                marker_color="rgba(100,116,139,.55)", hovertemplate="~%{x:.0f} tokens<br>%{y} episodes<extra></extra>")
    if trainable.counts:
        fig.add_bar(x=list(trainable.centers), y=list(trainable.counts), width=trainable.width * 0.5,
                    name="trainable", marker_color=TRAIN,
                    hovertemplate="~%{x:.0f} trainable<br>%{y} episodes<extra></extra>")
    layout(fig, title, xaxis_title="tokens per episode", yaxis_title="episodes", barmode="overlay", showlegend=True)
    fig.update_layout(legend={"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right", "font": {"size": 10}})
    return fig


def reward_by_task(tasks: Sequence[RewardStats], n_tasks: int) -> go.Figure:
    """Mean reward per task with its standard deviation; hover gives n and range."""
    title = "Reward by task" + (f" (the {len(tasks)} most frequent of {n_tasks})" if n_tasks > len(tasks) else "")
    if not tasks:
        return empty(title)
    ordered = sorted(tasks, key=lambda t: t.key)
    fig = go.Figure(go.Bar(
        x=[_short(t.key) for t in ordered], y=[t.mean for t in ordered],
        error_y={"type": "data", "array": [t.std for t in ordered], "visible": True, "thickness": 1},
        marker_color=ACCENT, customdata=[[t.key, t.n, t.min, t.max, t.std] for t in ordered], name="mean reward",
        hovertemplate="%{customdata[0]}<br>mean %{y:.4g} ± %{customdata[4]:.3g}<br>n %{customdata[1]}"
                      "<br>range %{customdata[2]:.4g} … %{customdata[3]:.4g}<extra></extra>",
    ))
    fig.update_xaxes(tickangle=-35 if len(ordered) > 6 else 0, automargin=True)
    return layout(fig, title, yaxis_title="mean reward")


def group_spread(groups: Sequence[RewardStats], n_groups: int, n_flat: int) -> go.Figure:
    """Per GRPO group (n samples of a task): mean reward and spread.

    Up to ``MAX_GROUP_BARS`` groups, one marker per group with the standard
    deviation as error bar and the min..max range as a thin bar; more than
    that, one point per group at (mean, std). The title counts the groups
    whose samples all got the same reward, which give GRPO no advantage.
    """
    if not groups:
        return empty("Groups", "no groups of two or more samples in this selection")
    flat = f" · {n_flat:,} of {n_groups:,} with zero spread (no advantage signal)"
    if len(groups) <= MAX_GROUP_BARS:
        labels = [f"{_short(g.task_id)} · {g.key}" for g in groups]
        custom = [[g.key, g.task_id, g.n, g.min, g.max, g.std] for g in groups]
        fig = go.Figure()
        fig.add_bar(x=labels, y=[g.max - g.min for g in groups], base=[g.min for g in groups], width=0.5,
                    marker_color="rgba(100,116,139,.3)", name="range", hoverinfo="skip")
        fig.add_scatter(
            x=labels, y=[g.mean for g in groups], mode="markers", name="mean ± std",
            marker={"color": ["#dc2626" if g.max == g.min else ACCENT for g in groups], "size": 8},
            error_y={"type": "data", "array": [g.std for g in groups], "visible": True, "thickness": 1.2},
            customdata=custom,
            hovertemplate="group %{customdata[0]} (%{customdata[1]})<br>n %{customdata[2]}<br>mean %{y:.4g} ± "
                          "%{customdata[5]:.3g}<br>range %{customdata[3]:.4g} … %{customdata[4]:.4g}<extra></extra>",
        )
        fig.update_xaxes(tickangle=-35 if len(groups) > 6 else 0, automargin=True, showticklabels=len(groups) <= 30)
        return layout(fig, "Groups: mean and spread" + flat, yaxis_title="reward")
    shown = "" if len(groups) == n_groups else f" ({len(groups):,} shown)"
    fig = go.Figure(go.Scattergl(
        x=[g.mean for g in groups], y=[g.std for g in groups], mode="markers",
        marker={"color": ["#dc2626" if g.max == g.min else ACCENT for g in groups], "size": 5, "opacity": 0.6},
        customdata=[[g.key, g.task_id, g.n] for g in groups], name="groups",
        hovertemplate="group %{customdata[0]} (%{customdata[1]})<br>n %{customdata[2]}<br>mean %{x:.4g}"
                      "<br>std %{y:.3g}<extra></extra>",
    ))
    return layout(fig, "Groups: mean vs spread" + shown + flat, xaxis_title="group mean reward",
                   yaxis_title="group reward std")


def browse_figures(stats: BrowseStats) -> list[go.Figure]:
    """Every Browse chart for one selection, in the order the tab lays them out."""
    return [
        reward_distribution(stats.reward),
        status_breakdown(stats.status),
        turns_distribution(stats.turns),
        token_distribution(stats.tokens, stats.trainable),
        reward_by_task(stats.tasks, stats.n_tasks),
        group_spread(stats.groups, stats.n_groups, stats.n_flat_groups),
    ]


# -- Episode ------------------------------------------------------------------


@dataclass(frozen=True)
class TurnSeries:
    """Per-turn numbers of an episode, in turn order (NaN where a turn has none)."""

    turns: tuple[int, ...]
    reward: tuple[float, ...]
    returns: tuple[float, ...]
    generated: tuple[int, ...]
    logprob_mean: tuple[float, ...]
    with_findings: tuple[int, ...]


def turn_series(ep: Episode) -> TurnSeries:
    """Reward (shaped, as trained on), return, tokens generated and mean logprob per turn."""
    n = ep.n_turns
    # turn_rewards are what the trainer sees (shaped when the preset shapes);
    # fall back to the env's raw reward per turn.
    rewards = list(ep.turn_rewards) if len(ep.turn_rewards) == n else [t.reward for t in ep.turns]
    returns = list(ep.returns) if len(ep.returns) == n else [math.nan] * n
    generated: list[int] = []
    lp_mean: list[float] = []
    lps = ep.tokens.logprobs
    for t in ep.turns:
        g = t.generation
        generated.append(len(g.token_ids) if g is not None else 0)
        values = np.asarray(g.logprobs, dtype=np.float64) if g is not None and g.logprobs else np.empty(0)
        if not values.size:
            # No logprobs on the generation (e.g. an import): use the episode's
            # token arrays over this turn's assistant span.
            spans = [lps[s.start : s.end] for s in t.segments if s.kind == "assistant"]
            values = np.concatenate(spans).astype(np.float64) if spans else np.empty(0)
        values = values[~np.isnan(values)]
        lp_mean.append(float(values.mean()) if values.size else math.nan)
    flagged = {t.index for t in ep.turns if t.findings} | {f.turn for f in ep.findings if f.turn is not None}
    return TurnSeries(
        turns=tuple(t.index for t in ep.turns), reward=tuple(rewards), returns=tuple(returns),
        generated=tuple(generated), logprob_mean=tuple(lp_mean), with_findings=tuple(sorted(flagged)),
    )


def turn_chart(ep: Episode) -> go.Figure:
    """Three stacked panels sharing the turn axis: reward and return, tokens generated, mean logprob."""
    title = "Per turn"
    if not ep.turns:
        return empty(title, "this episode has no turns")
    s = turn_series(ep)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07, row_heights=[0.4, 0.3, 0.3],
                        subplot_titles=("reward and return", "tokens generated", "mean logprob"))
    x = list(s.turns)
    fig.add_bar(x=x, y=list(s.reward), name="reward", marker_color=ACCENT, row=1, col=1,
                hovertemplate="turn %{x}<br>reward %{y:.4g}<extra></extra>")
    fig.add_scatter(x=x, y=[None if math.isnan(v) else v for v in s.returns], name="return", mode="lines+markers",
                    line={"color": "#7c3aed"}, row=1, col=1, hovertemplate="turn %{x}<br>return %{y:.4g}<extra></extra>")
    if s.with_findings:
        top = max([*s.reward, *(v for v in s.returns if not math.isnan(v)), 0.0])
        fig.add_scatter(x=list(s.with_findings), y=[top] * len(s.with_findings), mode="markers", name="findings",
                        marker={"symbol": "triangle-down", "color": "#dc2626", "size": 9}, row=1, col=1,
                        hovertemplate="turn %{x} has findings<extra></extra>")
    fig.add_bar(x=x, y=list(s.generated), name="tokens generated", marker_color=TRAIN, row=2, col=1,
                hovertemplate="turn %{x}<br>%{y} tokens<extra></extra>")
    fig.add_scatter(x=x, y=[None if math.isnan(v) else v for v in s.logprob_mean], name="mean logprob",
                    mode="lines+markers", line={"color": "#d97706"}, row=3, col=1, connectgaps=False,
                    hovertemplate="turn %{x}<br>mean logprob %{y:.4f}<extra></extra>")
    fig.update_xaxes(title_text="turn", row=3, col=1, dtick=1 if len(x) <= 30 else None)
    fig.update_annotations(font_size=11)
    layout(fig, title, height=440, showlegend=True, margin={"l": 48, "r": 12, "t": 64, "b": 36})
    # On the title's line, right-aligned, clear of the subplot titles.
    fig.update_layout(legend={"orientation": "h", "yref": "container", "y": 0.99, "yanchor": "top", "x": 1,
                              "xanchor": "right", "font": {"size": 10}})
    return fig
