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

from engine import Bins, BrowseStats, Episode, RewardBins, RewardStats, turn_entropy

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
# One color per (env, preset) of a selection, in the order the store gives them (the most frequent first).
SET_COLORS = ("#2563eb", "#d97706", "#7c3aed", "#0d9488", "#db2777", "#65a30d", "#475569", "#b45309")
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


def set_color(i: int) -> str:
    """The color of the ``i``-th (env, preset) of a selection."""
    return SET_COLORS[i % len(SET_COLORS)]


def reward_distribution(rewards: Sequence[RewardBins], n_sets: int | None = None) -> go.Figure:
    """Episodes per reward value (or reward bin), one panel per (env, preset), each on its own reward axis:
    one preset's shaped returns and another's 0/1 rewards never share a scale."""
    title = "Reward distribution"
    if not rewards:
        return empty(title)
    n_sets = len(rewards) if n_sets is None else n_sets
    if n_sets > len(rewards):
        title += f" (the {len(rewards)} most frequent of {n_sets} env · preset)"
    elif len(rewards) > 1:
        title += " by env · preset"
    rows = len(rewards)
    fig = make_subplots(rows=rows, cols=1, vertical_spacing=min(0.5 / rows, 0.12),
                        subplot_titles=[f"{r.label} · {r.n:,} episode{'s' if r.n != 1 else ''}" for r in rewards])
    for i, r in enumerate(rewards):
        one = len(r.bins.centers) == 1
        fig.add_bar(
            x=list(r.bins.centers), y=list(r.bins.counts), width=0.3 if one else r.bins.width,
            marker_color=set_color(i), name=r.label, row=i + 1, col=1,
            hovertemplate=f"{r.label}<br>reward %{{x:.4g}}<br>%{{y}} episodes<extra></extra>",
        )
        if one:  # a single value: a bar with room around it, not one filling the axis
            fig.update_xaxes(range=[r.bins.centers[0] - 1, r.bins.centers[0] + 1], row=i + 1, col=1)
    fig.update_xaxes(title_text="reward", row=rows, col=1)
    fig.update_annotations(font_size=10)
    return layout(fig, title, height=260 if rows == 1 else 80 + 95 * rows, margin={"l": 48, "r": 12, "t": 56, "b": 36})


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


MAX_LENGTH_TICKS = 11  # the token-length bars named below a chart a third of the page wide


def token_distribution(tokens: Bins, trainable: Bins) -> go.Figure:
    """Episodes per token length: all tokens and the trainable (mask 1) ones, on the same bars. Bars widen with the
    length (``schema.length_bucket``), so each is drawn the same width and named by its first and last length: a
    length axis that reads 40 and 33,000 tokens side by side."""
    title = "Token length"
    if not tokens.counts:
        return empty(title)
    fig = go.Figure()

    def spans(b: Bins) -> list[list[int]]:
        """Each bar's first and last length."""
        return [[math.ceil(c - w / 2), math.ceil(c + w / 2) - 1] for c, w in zip(b.centers, b.bar_widths(), strict=True)]

    def labels(b: Bins) -> list[str]:
        """Each bar's first length, short (the hover gives its first and last)."""
        return [f"{lo / 1e6:.3g}M" if lo >= 1_000_000 else f"{lo / 1000:.3g}k" if lo >= 10_000 else f"{lo:,}"
                for lo, _ in spans(b)]

    fig.add_bar(x=labels(tokens), y=list(tokens.counts), name="all tokens", marker_color="rgba(100,116,139,.55)",
                customdata=spans(tokens),
                hovertemplate="%{customdata[0]:,}–%{customdata[1]:,} tokens<br>%{y} episodes<extra></extra>")
    if trainable.counts:
        fig.add_bar(x=labels(trainable), y=list(trainable.counts), width=0.5, name="trainable", marker_color=TRAIN,
                    customdata=spans(trainable),
                    hovertemplate="%{customdata[0]:,}–%{customdata[1]:,} trainable<br>%{y} episodes<extra></extra>")
    layout(fig, title, xaxis_title="tokens per episode (a bar from its length up; wider as lengths grow)",
           yaxis_title="episodes",
           barmode="overlay", showlegend=True)
    names = labels(tokens)
    every = math.ceil(len(names) / MAX_LENGTH_TICKS)  # past that many, every k-th bar named (its hover names all)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=names, tickvals=names[::every],
                     tickangle=-35 if len(names) > 6 else 0, automargin=True)
    fig.update_layout(legend={"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right", "font": {"size": 10}})
    return fig


def reward_by_task(tasks: Sequence[RewardStats], n_tasks: int, sets: Sequence[tuple[str, str]] = ()) -> go.Figure:
    """Mean reward per task with its standard deviation, one bar series per (env, preset) (a task run under
    two presets has a bar for each: their rewards are not on one scale); hover gives n and range. ``sets``
    orders the series (and their colors) as the reward distribution's panels."""
    shown = len({t.key for t in tasks})
    title = "Reward by task" + (f" (the {shown} most frequent of {n_tasks})" if n_tasks > shown else "")
    if not tasks:
        return empty(title)
    by_set: dict[tuple[str, str], list[RewardStats]] = {}
    for t in sorted(tasks, key=lambda t: t.key):
        by_set.setdefault((t.env, t.preset), []).append(t)
    known = list(sets)
    others = sorted(k for k in by_set if k not in known)
    order = [k for k in known if k in by_set] + others
    fig = go.Figure()
    for key in order:
        rows = by_set[key]
        label = RewardBins(key[0], key[1], 0).label
        fig.add_bar(
            x=[_short(t.key) for t in rows], y=[t.mean for t in rows], name=label,
            error_y={"type": "data", "array": [t.std for t in rows], "visible": True, "thickness": 1},
            marker_color=set_color(known.index(key) if key in known else len(known) + others.index(key)),
            customdata=[[t.key, t.n, t.min, t.max, t.std, label] for t in rows],
            hovertemplate="%{customdata[0]} (%{customdata[5]})<br>mean %{y:.4g} ± %{customdata[4]:.3g}"
                          "<br>n %{customdata[1]}<br>range %{customdata[2]:.4g} … %{customdata[3]:.4g}<extra></extra>",
        )
    fig.update_xaxes(tickangle=-35 if shown > 6 else 0, automargin=True, categoryorder="category ascending")
    # Each series in its reward panel's color; hover names it (a legend would cover the bars at this size).
    return layout(fig, title + (" · color: env · preset" if len(order) > 1 else ""),
                  yaxis_title="mean reward", barmode="group")


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
        # Level labels share the chart's width, about 70 characters: longer ones would run together, so they slant.
        level = len(groups) * max(map(len, labels)) <= GROUP_LABEL_CHARS
        fig.update_xaxes(tickangle=0 if level else -35, automargin=True, showticklabels=len(groups) <= 30)
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


GROUP_LABEL_CHARS = 70
"""The characters of group labels laid level under a Browse chart, at most (a chart is a third of 1440 px)."""


def browse_figures(stats: BrowseStats) -> list[go.Figure]:
    """Every Browse chart for one selection, in the order the tab lays them out."""
    return [
        reward_distribution(stats.rewards, stats.n_reward_sets),
        status_breakdown(stats.status),
        turns_distribution(stats.turns),
        token_distribution(stats.tokens, stats.trainable),
        reward_by_task(stats.tasks, stats.n_tasks, [(r.env, r.preset) for r in stats.rewards]),
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
    entropy_mean: tuple[float, ...] = ()
    """Mean entropy (nats) of each turn's generated tokens (``engine.turn_entropy``); empty when the episode has
    none."""


def turn_series(ep: Episode) -> TurnSeries:
    """Reward (shaped, as trained on), return, tokens generated, mean logprob and mean entropy per turn."""
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
    entropy = tuple(te.mean for te in turn_entropy(ep, forks=0))
    return TurnSeries(
        turns=tuple(t.index for t in ep.turns), reward=tuple(rewards), returns=tuple(returns),
        generated=tuple(generated), logprob_mean=tuple(lp_mean), with_findings=tuple(sorted(flagged)),
        entropy_mean=entropy if any(not math.isnan(v) for v in entropy) else (),
    )


def turn_chart(ep: Episode) -> go.Figure:
    """Three stacked panels sharing the turn axis: reward and return, tokens generated, mean logprob (and, on a
    second axis, mean entropy where the episode has it)."""
    title = "Per turn"
    if not ep.turns:
        return empty(title, "this episode has no turns")
    s = turn_series(ep)
    ent = bool(s.entropy_mean)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07, row_heights=[0.4, 0.3, 0.3],
                        specs=[[{}], [{}], [{"secondary_y": ent}]],
                        subplot_titles=("reward and return", "tokens generated",
                                        "mean logprob and mean entropy" if ent else "mean logprob"))
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
    if ent:
        fig.add_scatter(x=x, y=[None if math.isnan(v) else v for v in s.entropy_mean], name="mean entropy",
                        mode="lines+markers", line={"color": "#0284c7", "dash": "dot"}, row=3, col=1,
                        secondary_y=True, connectgaps=False,
                        hovertemplate="turn %{x}<br>mean entropy %{y:.3f} nats<extra></extra>")
        fig.update_yaxes(title_text="nats", title_font_size=10, rangemode="tozero", showgrid=False, row=3, col=1,
                         secondary_y=True)
    fig.update_xaxes(title_text="turn", row=3, col=1, dtick=1 if len(x) <= 30 else None)
    fig.update_annotations(font_size=11)
    layout(fig, title, height=440, showlegend=True, margin={"l": 48, "r": 12, "t": 64, "b": 36})
    # On the title's line, right-aligned, clear of the subplot titles.
    fig.update_layout(legend={"orientation": "h", "yref": "container", "y": 0.99, "yanchor": "top", "x": 1,
                              "xanchor": "right", "font": {"size": 10}})
    return fig
