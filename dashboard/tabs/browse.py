"""Browse: filter, sort and page through every episode, with charts of the filtered set.

Filters go to ``EpisodeFilter`` and the store does the work (indexes, the
full-text index, aggregates in SQL), so a page comes back fast at 100,000
episodes. The table shows first; the charts follow in a second step. A
``gr.Timer`` asks the store for a cheap stamp every few seconds and, when
episodes were added (a watch, a batch, an import elsewhere), shows the same
filters, sort and page again in place.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import SORTABLE, EpisodeFilter, RollscopeError, Status, Store

from .. import charts
from ..render import render_message
from ..render_browse import BROWSE_JS, render_run_notes, render_table

PAGE_SIZES = [25, 50, 100, 200]
PAGE_SIZE = 50
ALL = "all"
ANY_FINDING, NO_FINDING = "__any__", "__none__"
ROOT = "root:"  # findings filter values that select a root kind
STARRED = {"any": None, "starred": True, "not starred": False}
DEFAULT_SORT = {"by": "created_at", "desc": True}
MAX_TASK_CHOICES = 500  # beyond this, type a task id (the dropdown accepts any value)
REFRESH_S = 3.0


def _opt(value: Any) -> str | None:
    return None if value in (None, "", ALL) else str(value)


def _num(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def episode_filter(
    text: str | None = None, env: str | None = None, task: str | None = None, status: list[str] | None = None,
    run: str | None = None, reward_min: Any = None, reward_max: Any = None, turns_min: Any = None,
    turns_max: Any = None, tags: list[str] | None = None, starred: str | None = None, source: str | None = None,
    findings: str | None = None, step: Any = None,
) -> EpisodeFilter:
    """The store filter for the filter controls' values (``all``/empty means no filter)."""
    kind = _opt(findings)
    t_min, t_max, step_no = _num(turns_min), _num(turns_max), _num(step)
    return EpisodeFilter(
        text=(text or "").strip() or None,
        env=_opt(env),
        task_id=_opt(task),
        status=tuple(s for s in (status or []) if s and s != ALL),
        run_id=_opt(run),
        reward_min=_num(reward_min),
        reward_max=_num(reward_max),
        min_turns=None if t_min is None else int(t_min),
        max_turns=None if t_max is None else int(t_max),
        tags=tuple(tags or ()),
        starred=STARRED.get(starred or "any"),
        source=_opt(source),
        has_findings=True if kind == ANY_FINDING else False if kind == NO_FINDING else None,
        finding_kind=None if kind in (None, ANY_FINDING, NO_FINDING) or kind.startswith(ROOT) else kind,
        root_kind=kind[len(ROOT):] if kind and kind.startswith(ROOT) else None,
        rollout_step=int(step_no) if step_no is not None and step_no.is_integer() else None,
    )


def _sort(sort: Any) -> tuple[str, bool]:
    sort = sort if isinstance(sort, dict) else DEFAULT_SORT
    by = sort.get("by") if sort.get("by") in SORTABLE else DEFAULT_SORT["by"]
    return str(by), bool(sort.get("desc", True))


def page(store: Store, flt: EpisodeFilter, sort: Any, page_no: Any, page_size: Any = PAGE_SIZE,
         selected: str | None = None) -> list[Any]:
    """(table HTML, info HTML, clamped 1-based page number) for one page of the filtered, sorted episodes;
    the row of ``selected`` (the episode last opened) stays marked."""
    by, desc = _sort(sort)
    size = int(page_size) if page_size in PAGE_SIZES else PAGE_SIZE
    start = time.perf_counter()
    try:
        total = store.count(flt)
        last = max(1, math.ceil(total / size))
        number = min(max(1, int(_num(page_no) or 1)), last)
        rows = store.list_episodes(flt, order_by=by, descending=desc, limit=size, offset=(number - 1) * size)
        run_level = store.run_level_kinds([r.run_id for r in rows if r.run_id])
    except RollscopeError as e:
        return [render_table([], by, desc, "—"), render_message(str(e), "error"), 1]
    ms = (time.perf_counter() - start) * 1000
    if total:
        first = (number - 1) * size + 1
        everything = store.count()
        of_all = f" (of {everything:,})" if everything != total else ""
        info = render_message(
            f"Episodes {first:,}–{first + len(rows) - 1:,} of {total:,} matching{of_all} · page {number:,} of {last:,}"
            f" · sorted by {by} {'▼' if desc else '▲'} · {ms:.0f} ms · click a row to open it, a header to sort"
        )
        empty = ""
    elif store.count() == 0:
        empty = f"No episodes in {store.path} yet: run `rollscope run --db {store.path}` (or Launch) to make some."
        info = render_message(empty)
    else:
        empty = "No episode matches these filters."
        info = render_message(empty)
    return [render_table(rows, by, desc, empty, run_level, selected), info + render_run_notes(run_level), number]


def figures(store: Store, flt: EpisodeFilter) -> list[Any]:
    """The Browse charts of the filtered set (see ``charts.browse_figures``)."""
    return charts.browse_figures(store.stats(flt))


def choices(store: Store) -> list[Any]:
    """Dropdown updates with the values in the database now: env, task, run, source, tags, findings."""
    tasks = store.distinct("task_id")
    kinds = store.finding_kinds()
    root_kinds = store.root_kind_counts()
    return [
        gr.Dropdown(choices=[ALL, *store.distinct("env")]),
        gr.Dropdown(choices=[ALL, *tasks[:MAX_TASK_CHOICES]]),
        gr.Dropdown(choices=[ALL, *store.distinct("run_id")]),
        gr.Dropdown(choices=[ALL, *store.distinct("source")]),
        gr.Dropdown(choices=[f"{t}" for t, _ in store.tag_counts()]),
        gr.Dropdown(choices=[
            ("any", ALL), ("has findings (any kind)", ANY_FINDING), ("no findings", NO_FINDING),
            *((f"root: {k} ({n:,})", ROOT + k) for k, n in root_kinds),
            *((f"{k} ({n:,})", k) for k, n in kinds),
        ]),
    ]


@dataclass
class BrowseTab:
    """The Browse tab's components.

    ``table`` is a ``gr.HTML`` whose ``click`` event carries ``{"open": id}``
    when a row is chosen (the app wires that to the Episode tab) or
    ``{"sort": column}`` for a header (handled here). ``shown`` holds the
    values the table was last drawn with (filters, sort, page, page size), so
    a refresh redraws what the user asked for, not a half-typed filter.
    """

    filters: list[Any]  # in ``episode_filter``'s argument order
    apply: gr.Button
    reset: gr.Button
    refresh: gr.Button
    info: gr.HTML
    table: gr.HTML
    prev: gr.Button
    next: gr.Button
    page_box: gr.Number
    page_size: gr.Dropdown
    sort: gr.State
    plots: list[gr.Plot]
    shown: gr.State
    selected: gr.State  # the id of the row last opened
    stamp: gr.State  # the store's episodes_stamp() when the table was last drawn
    timer: gr.Timer

    @property
    def inputs(self) -> list[Any]:
        return [*self.filters, self.sort, self.page_box, self.page_size, self.selected]

    @property
    def outputs(self) -> list[Any]:
        return [self.table, self.info, self.page_box, self.shown]

    @property
    def choice_outputs(self) -> list[Any]:
        f = self.filters
        return [f[1], f[2], f[4], f[11], f[9], f[12]]  # env, task, run, source, tags, findings

    def wire_load(self, demo: gr.Blocks, store: Store) -> None:
        """On every page load (so a reload shows episodes written since): choices, first page, charts."""
        loaded = demo.load(lambda: [*choices(store), store.episodes_stamp()], outputs=[*self.choice_outputs, self.stamp])
        loaded.then(_show(store), inputs=self.inputs, outputs=self.outputs).then(
            _charts(store), inputs=self.filters, outputs=self.plots)

    def wire_request(self, store: Store, request: gr.State, tabs: gr.Tabs) -> None:
        """Show Browse when ``request`` is set to ``{"run", "step"}``: that run's episodes of that rollout step,
        every other filter cleared."""

        def apply(req: Any) -> list[Any]:
            if not isinstance(req, dict) or not req.get("run"):
                return [gr.skip()] * (3 + len(self.filters))
            return [gr.Tabs(selected="browse"), *step_filters(store, str(req["run"]), req.get("step")),
                    dict(DEFAULT_SORT), 1]

        request.change(apply, inputs=[request], outputs=[tabs, *self.filters, self.sort, self.page_box]).then(
            _show(store), inputs=self.inputs, outputs=self.outputs
        ).then(_charts(store), inputs=self.filters, outputs=self.plots)


def cleared_filters() -> list[Any]:
    """Every filter control's value for "no filter", in ``episode_filter``'s order."""
    return ["", ALL, ALL, [], ALL, "", "", "", "", [], "any", ALL, ALL, ""]


def step_filters(store: Store, run: str, step: Any) -> list[Any]:
    """Values for every filter control: ``run`` and rollout ``step``, the rest cleared (the run dropdown
    also gets the runs there are now, so it can hold ``run``)."""
    runs = [ALL, *store.distinct("run_id")]
    values = cleared_filters()
    values[4] = gr.Dropdown(choices=runs if run in runs else [*runs, run], value=run)
    values[13] = "" if step is None else str(step)
    return values


def _bad_bounds(filter_values: list[Any]) -> str:
    """A warning for reward/turn bounds and a step that are not numbers (they are ignored), or ''."""
    labels = ("reward ≥", "reward ≤", "turns ≥", "turns ≤")
    bad = [f"{label} {str(v).strip()!r}" for label, v in zip(labels, filter_values[5:9], strict=True)
           if str(v or "").strip() and _num(v) is None]
    out = render_message(f"Not a number, ignored: {', '.join(bad)}", "warn") if bad else ""
    step = str(filter_values[13] or "").strip() if len(filter_values) > 13 else ""
    if step and (_num(step) is None or not float(step).is_integer()):
        out += render_message(f"Not a whole number, ignored: step {step!r}", "warn")
    return out


def _drawn(store: Store, filter_values: list[Any], sort: Any, number: Any, size: Any, selected: Any) -> list[Any]:
    """[table, info, page number, shown] for these values."""
    table, info, number = page(store, episode_filter(*filter_values), sort, number, size, selected)
    return [table, _bad_bounds(filter_values) + info, number, [*filter_values, sort, number, size]]


def _show(store: Store, delta: int = 0, first: bool = False) -> Any:
    def show(*values: Any) -> list[Any]:
        *filter_values, sort, page_no, size, selected = values
        number = 1 if first else int(_num(page_no) or 1) + delta
        return _drawn(store, filter_values, sort, number, size, selected)
    return show


def _charts(store: Store) -> Any:
    def draw(*filter_values: Any) -> list[Any]:
        return figures(store, episode_filter(*filter_values))
    return draw


def _event_data(evt: gr.EventData) -> dict[str, Any]:
    data = getattr(evt, "_data", None)
    return data if isinstance(data, dict) else {}


def _bound(label: str, elem_id: str) -> gr.Textbox:
    return gr.Textbox(label=label, placeholder="any", max_lines=1, min_width=90, scale=1, elem_id=elem_id)


def build(store: Store) -> BrowseTab:
    """Lay out the Browse tab inside the current Blocks context and wire filters, sorting and paging.

    Opening a row is wired by the app, which knows the Episode tab.
    """
    with gr.Accordion("Filters", open=True, elem_id="rs-browse-filters"):
        with gr.Row(equal_height=True):
            text = gr.Textbox(label="search message contents", placeholder="text in any message, tool call or error "
                              "(Enter to search)", scale=4, elem_id="rs-filter-text", max_lines=1)
            env = gr.Dropdown([ALL], value=ALL, label="env", scale=1, min_width=120, elem_id="rs-filter-env")
            task = gr.Dropdown([ALL], value=ALL, label="task", scale=2, min_width=140, allow_custom_value=True,
                               elem_id="rs-filter-task")
            status = gr.Dropdown([s.value for s in Status], value=[], multiselect=True, label="status", scale=2,
                                 min_width=160, elem_id="rs-filter-status")
            run = gr.Dropdown([ALL], value=ALL, label="run", scale=1, min_width=120, elem_id="rs-filter-run")
        with gr.Row(equal_height=True):
            # Textboxes, not gr.Number: an empty Number arrives as 0, and
            # "no bound" must stay distinguishable from a bound of 0.
            reward_min = _bound("reward ≥", "rs-filter-reward-min")
            reward_max = _bound("reward ≤", "rs-filter-reward-max")
            turns_min = _bound("turns ≥", "rs-filter-turns-min")
            turns_max = _bound("turns ≤", "rs-filter-turns-max")
            tags = gr.Dropdown([], value=[], multiselect=True, label="tags (all of)", scale=2, min_width=140,
                               elem_id="rs-filter-tags")
            starred = gr.Dropdown(list(STARRED), value="any", label="starred", min_width=110, elem_id="rs-filter-starred")
            source = gr.Dropdown([ALL], value=ALL, label="source", min_width=100, elem_id="rs-filter-source")
            findings = gr.Dropdown([("any", ALL)], value=ALL, label="findings", scale=2, min_width=160,
                                   elem_id="rs-filter-findings")
            step = _bound("rollout step", "rs-filter-step")
        with gr.Row(elem_classes="rs-actions"):
            apply = gr.Button("Apply filters", variant="primary", scale=0, min_width=140, elem_id="rs-apply")
            reset = gr.Button("Reset", scale=0, min_width=90, elem_id="rs-reset")
            refresh = gr.Button("Refresh", scale=0, min_width=90, elem_id="rs-refresh")
    info = gr.HTML(render_message("Loading…"), elem_id="rs-browse-info", apply_default_css=False, js_on_load=None)
    table = gr.HTML(render_table([], DEFAULT_SORT["by"], True, "Loading…"), elem_id="rs-episode-table",
                    apply_default_css=False, js_on_load=BROWSE_JS)
    with gr.Row(elem_classes="rs-pager", equal_height=True):
        prev = gr.Button("◀ Prev", scale=0, min_width=100, elem_id="rs-prev")
        page_box = gr.Number(1, show_label=False, container=False, precision=0, minimum=1, scale=0, min_width=90,
                             elem_id="rs-page", label="page (Enter to go)")
        nxt = gr.Button("Next ▶", scale=0, min_width=100, elem_id="rs-next")
        page_size = gr.Dropdown([(f"{n} rows a page", n) for n in PAGE_SIZES], value=PAGE_SIZE, show_label=False,
                                container=False, scale=0, min_width=150, elem_id="rs-page-size", label="rows a page")
    sort = gr.State(dict(DEFAULT_SORT))
    with gr.Accordion("Charts of the filtered set", open=True, elem_id="rs-browse-charts"):
        plots: list[gr.Plot] = []
        for row in range(2):
            with gr.Row(equal_height=True):
                for col in range(3):
                    plots.append(gr.Plot(show_label=False, elem_id=f"rs-chart-{row * 3 + col}", min_width=300))
    filters = [text, env, task, status, run, reward_min, reward_max, turns_min, turns_max, tags, starred, source,
               findings, step]
    tab = BrowseTab(filters, apply, reset, refresh, info, table, prev, nxt, page_box, page_size, sort, plots,
                    gr.State(None), gr.State(None), gr.State(None), gr.Timer(REFRESH_S))

    def refilter(trigger: Any) -> None:
        trigger(_show(store, first=True), inputs=tab.inputs, outputs=tab.outputs).then(
            _charts(store), inputs=filters, outputs=plots
        )

    for control in (apply.click, text.submit, reward_min.submit, reward_max.submit, turns_min.submit,
                    turns_max.submit, step.submit, env.input, task.input, status.input, run.input, tags.input,
                    starred.input, source.input, findings.input):
        refilter(control)
    prev.click(_show(store, -1), inputs=tab.inputs, outputs=tab.outputs)
    nxt.click(_show(store, +1), inputs=tab.inputs, outputs=tab.outputs)
    page_box.submit(_show(store), inputs=tab.inputs, outputs=tab.outputs)
    page_size.input(_show(store, first=True), inputs=tab.inputs, outputs=tab.outputs)

    def defaults() -> list[Any]:
        return [*cleared_filters(), dict(DEFAULT_SORT), 1]

    reset.click(defaults, outputs=[*filters, sort, page_box]).then(
        _show(store), inputs=tab.inputs, outputs=tab.outputs
    ).then(_charts(store), inputs=filters, outputs=plots)
    refresh.click(lambda: choices(store), outputs=tab.choice_outputs).then(
        _show(store), inputs=tab.inputs, outputs=tab.outputs
    ).then(_charts(store), inputs=filters, outputs=plots)

    def on_table_click(evt: gr.EventData, *values: Any) -> list[Any]:
        *filter_values, sort_v, _page, size, selected = values
        data = _event_data(evt)
        column = data.get("sort")
        if column not in SORTABLE:
            # A row click: the app opens it; the row stays marked when the table is drawn again.
            opened = str(data["open"]) if data.get("open") else gr.skip()
            return [*([gr.skip()] * (len(tab.outputs) + 1)), opened]
        by, desc = _sort(sort_v)
        # A second click on the sorted column flips it; a new column starts
        # with the order usually wanted (highest, newest first; names A to Z).
        new = {"by": column, "desc": (not desc) if column == by else column not in ("id", "env", "task_id")}
        return [*_drawn(store, filter_values, new, 1, size, selected), new, gr.skip()]

    table.click(on_table_click, inputs=tab.inputs, outputs=[*tab.outputs, sort, tab.selected])

    def on_tick(stamp: Any, shown: Any, selected: Any) -> list[Any]:
        now = store.episodes_stamp()
        if now == stamp or not shown:
            return [gr.skip()] * (1 + len(tab.choice_outputs) + len(tab.outputs) + len(plots))
        *filter_values, sort_v, number, size = shown
        table_v, info_v, number_v, shown_v = _drawn(store, filter_values, sort_v, number, size, selected)
        return [now, *choices(store), table_v, info_v, gr.skip() if number_v == number else number_v, shown_v,
                *figures(store, episode_filter(*filter_values))]

    tab.timer.tick(on_tick, inputs=[tab.stamp, tab.shown, tab.selected],
                   outputs=[tab.stamp, *tab.choice_outputs, *tab.outputs, *plots], show_progress="hidden")
    return tab
