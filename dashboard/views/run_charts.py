"""The run view's figure: one point per rollout step of a training run.

Pure functions of the store's per-step aggregates (``Store.step_stats``): no Gradio, no store.
``run_figure`` draws four panels sharing the step axis (reward with its min-max band, truncation and
abort rates, response tokens, root findings by kind), and a fifth when the run recorded entropy (the mean entropy of
the generated tokens, and the share of them near zero), and marks on every panel the steps where the
data changed for the worse (``engine.step_changes``: an entropy collapse too); ``outcome_figure`` stacks the outcome
kinds per step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine import NEAR_ZERO_ENTROPY, OUTCOME_COLORS, OUTCOME_KINDS, StepChange, StepStats, kind_label

from .charts import ACCENT, STATUS_COLORS, TRAIN, empty, layout

MAX_KINDS = 6
"""Root kinds drawn one by one; the rest are summed as ``other``."""
KIND_COLORS = ("#dc2626", "#7c3aed", "#d97706", "#0891b2", "#db2777", "#65a30d")
OTHER_COLOR = "#6b7280"
ALERT_COLOR = "#dc2626"
ENTROPY_COLOR = "#7c3aed"
NEAR_ZERO_COLOR = "#d97706"
LEGEND = {"orientation": "h", "yref": "container", "y": 0.99, "yanchor": "top", "x": 1, "xanchor": "right",
          "font": {"size": 10}}
"""Both figures' legend: one row at the top right, above the plots."""


def kind_series(stats: Sequence[StepStats], max_kinds: int = MAX_KINDS) -> list[tuple[str, list[int]]]:
    """(kind, episodes per step) for the run's most frequent root kinds, then ``other`` for the rest."""
    totals: Counter[str] = Counter()
    for s in stats:
        totals.update(s.root_kinds)
    ranked = sorted(totals, key=lambda k: (-totals[k], k))
    top, rest = ranked[:max_kinds], set(ranked[max_kinds:])
    series = [(k, [s.root_kinds.get(k, 0) for s in stats]) for k in top]
    if rest:
        series.append(("other", [sum(n for k, n in s.root_kinds.items() if k in rest) for s in stats]))
    return series


def run_figure(stats: Sequence[StepStats], run_id: str = "", marked: Sequence[StepChange] = ()) -> go.Figure:
    """Four panels over the rollout steps: reward, truncated and aborted %, response tokens, root errors
    by kind; a fifth, when some step knows its entropy: the mean entropy of the generated tokens (nats, left axis) and
    the share of them near zero (%, right axis). The steps in ``marked`` are dashed red lines on every panel."""
    title = f"Run {run_id} by rollout step" if run_id else "Run by rollout step"
    if not stats:
        return empty(title, "no episodes with a rollout step in this run yet" if run_id else "no run chosen")
    x = [s.step for s in stats]
    entropy = any(s.entropy_tokens for s in stats)
    unchecked = sum(s.unchecked for s in stats)
    errors = "episodes with root errors, by kind" + (
        f" ({unchecked:,} of {sum(s.n for s in stats):,} not checked: their root errors are unknown)" if unchecked else "")
    titles = ["reward: mean and min–max", "truncated and aborted (% of episodes)", "mean response tokens (trainable)",
              errors]
    if entropy:
        titles.append(f"entropy of generated tokens: mean (nats) and near zero (< {NEAR_ZERO_ENTROPY:g} nats, %)")
    rows = len(titles)
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.06 if entropy else 0.07,
                        row_heights=[0.25, 0.17, 0.17, 0.21, 0.2] if entropy else [0.3, 0.22, 0.22, 0.26],
                        specs=[[{}]] * 4 + ([[{"secondary_y": True}]] if entropy else []),
                        subplot_titles=titles)
    fig.add_scatter(x=x, y=[s.reward_max for s in stats], mode="lines", line={"width": 0}, name="reward max",
                    hoverinfo="skip", showlegend=False, row=1, col=1)
    fig.add_scatter(x=x, y=[s.reward_min for s in stats], mode="lines", line={"width": 0}, fill="tonexty",
                    fillcolor="rgba(37,99,235,.15)", name="reward min–max", hoverinfo="skip", showlegend=False,
                    row=1, col=1)
    fig.add_scatter(
        x=x, y=[s.reward_mean for s in stats], mode="lines+markers", name="mean reward", showlegend=False,
        line={"color": ACCENT}, customdata=[[s.n, s.reward_min, s.reward_max] for s in stats], row=1, col=1,
        hovertemplate="step %{x}<br>mean reward %{y:.4g}<br>range %{customdata[1]:.4g} … %{customdata[2]:.4g}"
                      "<br>%{customdata[0]} episodes<extra></extra>",
        # One step has no band to fill between: its min–max is drawn as a bar through the point.
        error_y={"type": "data", "symmetric": False, "array": [stats[0].reward_max - stats[0].reward_mean],
                 "arrayminus": [stats[0].reward_mean - stats[0].reward_min], "color": "rgba(37,99,235,.45)",
                 "thickness": 6, "width": 0} if len(stats) == 1 else None)
    for name in ("truncated", "aborted"):  # StepStats.truncated, .truncated_rate, .aborted, .aborted_rate
        fig.add_scatter(
            x=x, y=[100 * getattr(s, f"{name}_rate") for s in stats], mode="lines+markers", name=name,
            line={"color": STATUS_COLORS[name]}, customdata=[[getattr(s, name), s.n] for s in stats], row=2, col=1,
            hovertemplate=f"step %{{x}}<br>{name} %{{y:.0f}}% (%{{customdata[0]}} of %{{customdata[1]}})"
                          "<extra></extra>")
    fig.add_scatter(x=x, y=[s.response_tokens for s in stats], mode="lines+markers", name="response tokens",
                    line={"color": TRAIN}, showlegend=False, row=3, col=1,
                    hovertemplate="step %{x}<br>%{y:,.0f} trainable tokens per episode<extra></extra>")
    for i, (kind, counts) in enumerate(kind_series(stats)):
        color = OTHER_COLOR if kind == "other" else KIND_COLORS[i % len(KIND_COLORS)]
        fig.add_bar(x=x, y=counts, name=kind, marker_color=color, row=4, col=1,
                    hovertemplate=f"step %{{x}}<br>root {kind}: %{{y}} episodes<extra></extra>")
    # A step no check ran on has no point: it is no step without errors. Its share is of the checked episodes.
    fig.add_scatter(
        x=x, y=[s.with_errors if s.checked else None for s in stats], mode="markers", name="any root error",
        marker={"symbol": "diamond-open", "color": "#111827", "size": 8},
        customdata=[[s.checked, 100 * (s.error_rate or 0.0), s.unchecked] for s in stats], row=4, col=1,
        hovertemplate="step %{x}<br>%{y} of %{customdata[0]} checked episodes have a root error "
                      "(%{customdata[1]:.0f}%); %{customdata[2]} not checked<extra></extra>")
    if entropy:
        _entropy_panel(fig, stats, row=5)
    for step in sorted({a.step for a in marked}):
        fig.add_vline(x=step, line={"color": ALERT_COLOR, "dash": "dash", "width": 1.5}, row="all", col=1)
        fig.add_annotation(x=step, y=1, xref="x", yref="y domain", text=f"⚠ {step}", showarrow=False,
                           yanchor="bottom", font={"color": ALERT_COLOR, "size": 11})
    fig.update_xaxes(title_text="rollout step", row=rows, col=1, dtick=1 if x[-1] - x[0] <= 30 else None)
    fig.update_yaxes(ticksuffix="%", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(rangemode="tozero", row=4, col=1)
    fig.update_annotations(font_size=11, selector={"showarrow": False, "xref": "paper"})
    layout(fig, title, height=820 if entropy else 660, showlegend=True, barmode="stack", uirevision=run_id or "run",
           margin={"l": 52, "r": 44 if entropy else 12, "t": 64, "b": 40})
    fig.update_layout(legend=LEGEND)
    return fig


def _entropy_panel(fig: go.Figure, stats: Sequence[StepStats], row: int) -> None:
    """The mean entropy per step on the left axis and the share of near-zero-entropy tokens on the right; a step
    that knows no entropy is a gap in both."""
    x = [s.step for s in stats]
    fig.add_scatter(
        x=x, y=[s.entropy_mean for s in stats], mode="lines+markers", name="mean entropy",
        line={"color": ENTROPY_COLOR}, customdata=[[s.entropy_tokens] for s in stats], row=row, col=1,
        secondary_y=False,
        hovertemplate="step %{x}<br>mean entropy %{y:.3g} nats over %{customdata[0]:,} tokens<extra></extra>")
    fig.add_scatter(
        x=x, y=[None if s.near_zero_rate is None else 100 * s.near_zero_rate for s in stats], mode="lines+markers",
        name="near-zero entropy", line={"color": NEAR_ZERO_COLOR, "dash": "dot"},
        customdata=[[s.near_zero_entropy, s.entropy_tokens] for s in stats], row=row, col=1, secondary_y=True,
        hovertemplate=f"step %{{x}}<br>%{{y:.0f}}% of tokens under {NEAR_ZERO_ENTROPY:g} nats "
                      "(%{customdata[0]:,} of %{customdata[1]:,})<extra></extra>")
    fig.update_yaxes(title_text="nats", rangemode="tozero", row=row, col=1, secondary_y=False)
    fig.update_yaxes(ticksuffix="%", range=[0, 100], showgrid=False, row=row, col=1, secondary_y=True)


def outcome_figure(stats: Sequence[StepStats], run_id: str = "") -> go.Figure:
    """Episodes per outcome kind at each rollout step (``StepStats.outcomes``), stacked: why the run's episodes
    earned their reward, step by step. One trace per kind present, in ``OUTCOME_KINDS`` order, named and
    coloured as the engine says (``kind_label``, ``OUTCOME_COLORS``); each trace's ``meta`` is its kind."""
    title = "Outcomes by rollout step (why each episode earned its reward)"
    present = [k for k in OUTCOME_KINDS if any(s.outcomes.get(k) for s in stats)]
    if not present:
        if not stats:
            return empty(title, "this run has no rollout steps" if run_id else "no run chosen")
        n = sum(s.n for s in stats)
        return empty(title, f"none of its {n:,} episodes has an outcome<br>(an episode still running, or imported "
                            "from an env Rollscope does not run, has none)")

    x = [s.step for s in stats]
    fig = go.Figure()
    for kind in present:
        label = kind_label(kind).replace("\\", "&#92;")  # plotly reads text as HTML
        fig.add_bar(x=x, y=[s.outcomes.get(kind, 0) for s in stats], name=label, meta=kind,
                    marker_color=OUTCOME_COLORS.get(kind, OTHER_COLOR),
                    customdata=[[s.n] for s in stats],
                    hovertemplate=f"step %{{x}}<br>{label}: %{{y}} of %{{customdata[0]}} episodes<extra></extra>")
    fig.update_xaxes(title_text="rollout step", dtick=1 if x[-1] - x[0] <= 30 else None)
    fig.update_yaxes(title_text="episodes", rangemode="tozero")
    layout(fig, title, height=280, showlegend=True, barmode="stack", uirevision=run_id or "run",
           margin={"l": 52, "r": 12, "t": 56, "b": 40})
    fig.update_layout(legend=LEGEND)
    return fig
