"""Browse: filter, sort and page through every episode, with charts of the filtered set.

Filters go to ``EpisodeFilter`` and the store does the work (indexes, the
full-text index, aggregates in SQL), so a page comes back fast at 100,000
episodes. The table shows first, before anything else is computed; the
filters' choices, the exact count and the charts follow, each in a step of
its own, and the store counts the charts and the exact count on a connection
of their own, so the next page never waits for them. A
``gr.Timer`` asks the store for a cheap stamp every few seconds and, when
episodes were added (a watch, a batch, an import elsewhere), shows the same
filters, sort and page again in place.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import SORTABLE, EpisodeFilter, MatchCount, RollscopeError, Status, Store, kind_label

from ..assets import script
from ..bulk import bulk
from ..demo_button import DemoControls, demo_controls
from ..gradio_glue import Outputs, event_data, html
from ..views import charts
from ..views.browse import DEFAULT_COLUMNS, OPTIONAL_COLUMNS, render_run_notes, render_table
from ..views.html import note

PAGE_SIZES = [25, 50, 100, 200]
PAGE_SIZE = 50
ALL = "all"
ANY_FINDING, NO_FINDING, NOT_CHECKED, IN_PART = "__any__", "__none__", "__unchecked__", "__in_part__"
ROOT = "root:"  # findings filter values that select a root kind
STARRED = {"any": None, "starred": True, "not starred": False}
DEFAULT_SORT = {"by": "created_at", "desc": True}
MAX_TASK_CHOICES = 500  # beyond this, type a task id (the dropdown accepts any value)
REFRESH_S = 3.0
# The table's count stops here; the exact count follows once the page is on screen.
COUNT_BOUND = 10_000


def _opt(value: Any) -> str | None:
    return None if value in (None, "", ALL) else str(value)


def _num(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None  # "inf" or "nan" bounds nothing: ignored and said, as the CLI refuses it


def episode_filter(
    text: str | None = None, env: str | None = None, task: str | None = None, status: list[str] | None = None,
    run: str | None = None, reward_min: Any = None, reward_max: Any = None, turns_min: Any = None,
    turns_max: Any = None, tags: list[str] | None = None, starred: str | None = None, source: str | None = None,
    findings: str | None = None, step: Any = None, search_context: Any = False, outcome: str | None = None,
) -> EpisodeFilter:
    """The store filter for the filter controls' values (``all``/empty means no filter)."""
    kind = _opt(findings)
    t_min, t_max, step_no = _num(turns_min), _num(turns_max), _num(step)
    return EpisodeFilter(
        text=(text or "").strip() or None,
        search_context=bool(search_context),
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
        checked=True if kind in (NO_FINDING, IN_PART) else False if kind == NOT_CHECKED else None,
        # "no findings" is read off the browse index alone (its rows checked in part say so in their cells);
        # "checked in part" reads the findings' notes, when asked for.
        every_check=False if kind == IN_PART else None,
        finding_kind=None if kind in (None, ANY_FINDING, NO_FINDING, NOT_CHECKED, IN_PART) or kind.startswith(ROOT)
        else kind,
        root_kind=kind[len(ROOT):] if kind and kind.startswith(ROOT) else None,
        rollout_step=int(step_no) if step_no is not None and step_no.is_integer() else None,
        outcome=(why,) if (why := _opt(outcome)) else (),
    )


def _sort(sort: Any) -> tuple[str, bool]:
    sort = sort if isinstance(sort, dict) else DEFAULT_SORT
    by = sort.get("by") if sort.get("by") in SORTABLE else DEFAULT_SORT["by"]
    return str(by), bool(sort.get("desc", True))


def page(store: Store, flt: EpisodeFilter, sort: Any, page_no: Any, page_size: Any = PAGE_SIZE,
         selected: str | None = None, columns: Sequence[str] | None = None,
         cursor: dict[str, str] | None = None) -> tuple[str, str, int]:
    """(table HTML, info HTML, clamped 1-based page number) for one page of the filtered, sorted episodes,
    with the key columns and the chosen ``columns``; the row of ``selected`` (the episode last opened) stays
    marked. ``cursor`` (``{"after": token}`` or ``{"before": token}``, from the page next to it) reads the page
    from the sorted column's index instead of counting rows up to it."""
    drawn = _page(store, flt, sort, page_no, page_size, selected, columns, cursor)
    return drawn["table"], drawn["info"], drawn["number"]


def _page(store: Store, flt: EpisodeFilter, sort: Any, page_no: Any, page_size: Any, selected: str | None,
          columns: Sequence[str] | None, cursor: dict[str, str] | None = None) -> dict[str, Any]:
    """``page``'s table, info and number, with the page's tokens (``after``, ``before``) and what its info says
    (``count``: the bounded count, so the exact one can be put in later by ``count_info``)."""
    by, desc = _sort(sort)
    size = int(page_size) if page_size in PAGE_SIZES else PAGE_SIZE
    start = time.perf_counter()
    try:
        total = store.count_upto(flt, COUNT_BOUND)
        number = max(1, int(_num(page_no) or 1))
        if total.exact:
            number = min(number, max(1, math.ceil(total.n / size)))
        shown = store.page_episodes(flt, by, desc, size, **cursor, matches=total) if cursor else None
        if shown is None or not shown.rows:
            shown = store.page_episodes(flt, by, desc, size, offset=(number - 1) * size, matches=total)
        if not shown.rows and number > 1:  # past the end of a selection counted no further than the bound
            total = MatchCount(store.count(flt), True)
            number = max(1, math.ceil(total.n / size))
            shown = store.page_episodes(flt, by, desc, size, offset=(number - 1) * size, matches=total)
        rows = list(shown.rows)
        run_level = store.run_level_kinds([r.run_id for r in rows if r.run_id])
        not_run = store.checks_not_run([r.id for r in rows])
    except RollscopeError as e:
        return {"table": render_table([], by, desc, "—", columns=columns), "info": note(str(e), "error"), "number": 1,
                "after": None, "before": None, "count": None}
    ms = (time.perf_counter() - start) * 1000
    count = None
    if rows:
        count = {"n": total.n, "exact": total.exact, "first": (number - 1) * size + 1, "rows": len(rows),
                 "page": number, "size": size, "by": by, "desc": desc, "ms": ms, "all": None}
        if total.exact:  # the whole database's count, when it is under the bound too (else it comes with exact_count)
            everything = store.count_upto(EpisodeFilter(), COUNT_BOUND)
            count["all"] = everything.n if everything.exact else None
        info = count_info(count)
        empty = ""
    elif store.count_upto(EpisodeFilter(), 1).n == 0:
        empty = (f"No episodes in {store.path} yet: run `rollscope run --db {store.path}` (or Launch) to make some, "
                 f"or build the demo (`rollscope demo --db {store.path}`, or the button below).")
        info = note(empty)
    else:
        empty = "No episode matches these filters."
        info = note(empty)
    table = render_table(rows, by, desc, empty, run_level, selected, columns, not_run)
    return {"table": table, "info": info + render_run_notes(run_level), "number": number, "after": shown.after,
            "before": shown.before, "count": count, "notes": render_run_notes(run_level)}


def count_info(count: dict[str, Any]) -> str:
    """The line above the table: which rows of how many, the page, the sort and the time. A count that stopped
    at its bound says "10,000+" and leaves out the last page (``exact_count`` fills them in)."""
    n, first, number = count["n"], count["first"], count["page"]
    of_all = f" (of {count['all']:,})" if count.get("all") not in (None, n) else ""
    matching = f"{n:,}" if count["exact"] else f"{n:,}+"
    pages = f"page {number:,} of {max(1, math.ceil(n / count['size'])):,}" if count["exact"] else f"page {number:,}"
    counting = "" if count["exact"] else " (counting…)"
    return note(
        f"Episodes {first:,}–{first + count['rows'] - 1:,} of {matching} matching{of_all}{counting} · {pages}"
        f" · sorted by {count['by']} {'▼' if count['desc'] else '▲'} · {count['ms']:.0f} ms · click a row to open it,"
        " a header to sort, tick rows to act on them together"
    )


def exact_count(store: Store, shown: Any) -> dict[str, Any] | None:
    """``shown`` (what the table was drawn with) with its count made exact: the selection's and the database's,
    counted whole after the page is on screen; None when both were exact already."""
    count = shown.get("count") if isinstance(shown, dict) else None
    if not isinstance(count, dict) or count["exact"] and count.get("all") is not None:
        return None
    n = count["n"] if count["exact"] else store.count(episode_filter(**shown["filters"]))
    everything = store.count()
    return {**shown, "count": {**shown["count"], "n": n, "all": everything, "exact": True}}


def figures(store: Store, flt: EpisodeFilter) -> dict[str, Any]:
    """The Browse charts of the filtered set (see ``charts.browse_figures``), as ``plot0``, ``plot1``… in layout
    order (``BrowseTab.chart_outputs``)."""
    return {f"plot{i}": fig for i, fig in enumerate(charts.browse_figures(store.stats(flt)))}


def choices(store: Store) -> dict[str, Any]:
    """Dropdown updates with the values in the database now, by filter: env, task, run, source, tags, findings,
    outcome (its kinds, most episodes first, with how many have each)."""
    tasks = store.distinct("task_id")
    kinds = store.finding_kinds()
    root_kinds = store.root_kind_counts()
    return {
        "env": gr.Dropdown(choices=[ALL, *store.distinct("env")]),
        "task": gr.Dropdown(choices=[ALL, *tasks[:MAX_TASK_CHOICES]]),
        "run": gr.Dropdown(choices=[ALL, *store.distinct("run_id")]),
        "source": gr.Dropdown(choices=[ALL, *store.distinct("source")]),
        "tags": gr.Dropdown(choices=[f"{t}" for t, _ in store.tag_counts()]),
        "findings": gr.Dropdown(choices=[
            ("any", ALL), ("has findings (any kind)", ANY_FINDING), ("no findings (checked)", NO_FINDING),
            ("not checked (no check ran)", NOT_CHECKED),
            *([("checked in part (a check could not run)", IN_PART)] if any(k == "not_checked" for k, _ in kinds)
              else []),
            *((f"root: {k} ({n:,})", ROOT + k) for k, n in root_kinds),
            # A note of a check that could not look is not a finding: said so beside the episodes no check ran on.
            *((f"note: a check could not run, not_checked ({n:,})" if k == "not_checked" else f"{k} ({n:,})", k)
              for k, n in kinds),
        ]),
        "outcome": gr.Dropdown(choices=[("any", ALL), *((f"{kind_label(k)} ({n:,})", k)
                                                         for k, n in store.outcome_counts().get(None, {}).items())]),
    }


@dataclass
class BrowseTab:
    """The Browse tab's components.

    ``table`` is a ``gr.HTML`` whose ``click`` event carries ``{"open": id}``
    when a row is chosen (the app wires that to the Episode tab),
    ``{"sort": column}`` for a header, or ``{"bulk": action, "ids": [...]}``
    for the ticked rows (both handled here). ``shown`` holds the values the
    table was last drawn with (filters, sort, page, page size, columns), so a
    refresh redraws what the user asked for, not a half-typed filter.
    """

    filters: Outputs  # named as ``episode_filter``'s arguments
    apply: gr.Button
    reset: gr.Button
    refresh: gr.Button
    more: gr.Accordion  # the filters past the first row, and the column chooser
    columns: gr.Dropdown  # optional columns shown beside the key ones
    info: gr.HTML
    table: gr.HTML
    bulk_file: gr.File  # the file "Export ticked" wrote, downloaded at once and kept for another download
    prev: gr.Button
    next: gr.Button
    page_box: gr.Number
    page_size: gr.Dropdown
    sort: gr.State
    plots: list[gr.Plot]
    shown: gr.State
    selected: gr.State  # the id of the row last opened
    stamp: gr.State  # the store's episodes_stamp() when the table was last drawn
    charted: gr.State  # the stamp the charts and the filters' choices were last drawn for
    timer: gr.Timer
    demo: DemoControls  # "Build the demo", on an empty database
    store: Store

    @property
    def inputs(self) -> list[Any]:
        """What drawing the table reads: the filters, then sort, page, page size, the row last opened and the
        columns."""
        return [*self.filters, self.sort, self.page_box, self.page_size, self.selected, self.columns]

    @property
    def outputs(self) -> Outputs:
        """What drawing the table shows (``_drawn``)."""
        return Outputs(table=self.table, info=self.info, page_box=self.page_box, shown=self.shown, more=self.more)

    @property
    def choice_outputs(self) -> Outputs:
        """The filters whose choices come from the database (``choices``)."""
        return Outputs(**{name: self.filters[name] for name in ("env", "task", "run", "source", "tags", "findings",
                                                                 "outcome")})

    @property
    def chart_outputs(self) -> Outputs:
        """The charts, ``plot0``, ``plot1``… in the order ``figures`` draws them."""
        return Outputs(**{f"plot{i}": plot for i, plot in enumerate(self.plots)})

    @property
    def count_event(self) -> tuple[Any, ...]:
        """The exact count's step (``_counted``): what follows a drawn table, as ``then``'s arguments."""
        return (_counted(self.store, self), [self.shown], [self.info, self.shown])

    def wire_load(self, demo: gr.Blocks, store: Store) -> None:
        """On every page load (so a reload shows episodes written since): the first page before anything else,
        then the filters' choices, the exact count and the charts, each a step of its own that fills in as it
        comes (none waits for another)."""
        shown = demo.load(_show(store, self), inputs=self.inputs, outputs=self.outputs.components)
        shown.then(*self.choices_event)
        shown.then(*self.count_event)
        shown.then(_charts(store, self), inputs=self.filters.components, outputs=self.chart_outputs.components)
        self.demo.wire_load(demo, store)

    @property
    def choices_event(self) -> tuple[Any, ...]:
        """The filters' choices and the store's stamp (what the timer compares with), as ``then``'s arguments;
        ``charted`` says the charts and choices are of that stamp."""
        out = self.choice_outputs + Outputs(stamp=self.stamp, charted=self.charted)

        def chosen() -> list[Any]:
            stamp = store.episodes_stamp()
            return out.values(**choices(store), stamp=stamp, charted=stamp)

        store = self.store
        return (chosen, None, out.components)

    def wire_request(self, store: Store, request: gr.State, tabs: gr.Tabs) -> None:
        """Show Browse when ``request`` is set to ``{"run", "step"}``: that run's episodes of that rollout step,
        every other filter cleared, and the step column shown."""
        out = Outputs(tabs=tabs) + self.filters + Outputs(sort=self.sort, page_box=self.page_box, columns=self.columns,
                                                          more=self.more)

        def apply(req: Any, columns: Any) -> list[Any]:
            if not isinstance(req, dict) or not req.get("run"):
                return out.skip()
            shown = list(DEFAULT_COLUMNS if columns is None else columns)
            return out.values(tabs=gr.Tabs(selected="browse"), **step_filters(store, str(req["run"]), req.get("step")),
                              sort=dict(DEFAULT_SORT), page_box=1, more=gr.Accordion(open=True),
                              columns=shown if "step" in shown else [*shown, "step"])

        shown = request.change(apply, inputs=[request, self.columns], outputs=out.components).then(
            _show(store, self), inputs=self.inputs, outputs=self.outputs.components)
        shown.then(*self.count_event)
        shown.then(_charts(store, self), inputs=self.filters.components, outputs=self.chart_outputs.components)


def cleared_filters() -> dict[str, Any]:
    """Every filter control's value for "no filter", by name."""
    return {"text": "", "env": ALL, "task": ALL, "status": [], "run": ALL, "reward_min": "", "reward_max": "",
            "turns_min": "", "turns_max": "", "tags": [], "starred": "any", "source": ALL, "findings": ALL, "step": "",
            "search_context": False, "outcome": ALL}


def step_filters(store: Store, run: str, step: Any) -> dict[str, Any]:
    """Values for every filter control, by name: ``run`` and rollout ``step``, the rest cleared (the run
    dropdown also gets the runs there are now, so it can hold ``run``)."""
    runs = [ALL, *store.distinct("run_id")]
    values = cleared_filters()
    values["run"] = gr.Dropdown(choices=runs if run in runs else [*runs, run], value=run)
    values["step"] = "" if step is None else str(step)
    return values


def _bad_bounds(filter_values: dict[str, Any]) -> str:
    """A warning for reward/turn bounds and a step that are not numbers (they are ignored), or ''."""
    labels = {"reward_min": "reward ≥", "reward_max": "reward ≤", "turns_min": "turns ≥", "turns_max": "turns ≤"}
    bounds = [(label, filter_values.get(name)) for name, label in labels.items()]
    bad = [f"{label} {str(v).strip()!r}" for label, v in bounds if str(v or "").strip() and _num(v) is None]
    out = note(f"Not a finite number, ignored: {', '.join(bad)}", "warn") if bad else ""
    step = str(filter_values.get("step") or "").strip()
    if step and (_num(step) is None or not float(step).is_integer()):
        out += note(f"Not a whole number, ignored: step {step!r}", "warn")
    return out


MORE = ("task", "run", "reward_min", "reward_max", "turns_min", "turns_max", "starred", "source", "step",
        "search_context")


def more_label(filter_values: dict[str, Any]) -> str:
    """The fold's title: what it holds, and how many of its filters are set, so a set filter is never hidden
    without a word."""
    cleared = cleared_filters()
    n = sum(1 for name in MORE if str(filter_values.get(name) or "").strip() not in ("", "False", str(cleared[name])))
    return "More filters and columns" + (f" · {n} filter{'s' if n != 1 else ''} set here" if n else "")


def _drawn(store: Store, filter_values: dict[str, Any], sort: Any, number: Any, size: Any,
           selected: Any, columns: Any = None, cursor: dict[str, str] | None = None) -> dict[str, Any]:
    """Values for ``BrowseTab.outputs``: the table drawn with these filters (by name), sort, page, page size and
    columns (``cursor``: the page's token, from the page beside it)."""
    drawn = _page(store, episode_filter(**filter_values), sort, number, size, selected, columns, cursor)
    number = drawn["number"]
    return {"table": drawn["table"], "info": _bad_bounds(filter_values) + drawn["info"], "page_box": number,
            "shown": {"filters": filter_values, "sort": sort, "page": number, "size": size, "columns": columns,
                      "after": drawn["after"], "before": drawn["before"], "count": drawn["count"],
                      "notes": drawn.get("notes", "")},
            "more": gr.Accordion(label=more_label(filter_values))}


def _show(store: Store, tab: BrowseTab, delta: int = 0, first: bool = False) -> Any:
    out = tab.outputs

    def show(*values: Any) -> list[Any]:
        *filter_values, sort, page_no, size, selected, columns = values
        number = 1 if first else int(_num(page_no) or 1) + delta
        return out.values(**_drawn(store, tab.filters.read(filter_values), sort, number, size, selected, columns))
    return show


def _step(store: Store, tab: BrowseTab, delta: int) -> Any:
    """Prev (-1) and Next (+1): the page beside the one shown, read from its token (keyset pagination: as fast
    at page 20,000 as at page 2) when the table shows what the controls say, else counted to by offset."""
    out = tab.outputs
    side = "after" if delta > 0 else "before"

    def step(*values: Any) -> list[Any]:
        *filter_values, sort, page_no, size, selected, columns, shown = values
        read = tab.filters.read(filter_values)
        number = int(_num(page_no) or 1)
        cursor = None
        if isinstance(shown, dict) and [shown.get(k) for k in ("filters", "sort", "page", "size")] == \
                [read, sort, number, size]:
            if not shown.get(side):  # the first or the last page: it stays
                return out.values(**_drawn(store, read, sort, number, size, selected, columns))
            cursor = {side: str(shown[side])}
        return out.values(**_drawn(store, read, sort, number + delta, size, selected, columns, cursor))
    return step


def _counted(store: Store, tab: BrowseTab) -> Any:
    """After a table is drawn: the exact count, when the table's stopped at its bound."""
    out = Outputs(info=tab.info, shown=tab.shown)

    def count(shown: Any) -> list[Any]:
        done = exact_count(store, shown)
        if done is None:
            return out.skip()
        info = _bad_bounds(done["filters"]) + count_info(done["count"]) + str(done.get("notes") or "")
        return out.values(info=info, shown=done)
    return count


def _charts(store: Store, tab: BrowseTab) -> Any:
    out = tab.chart_outputs

    def draw(*filter_values: Any) -> list[Any]:
        return out.values(**figures(store, episode_filter(**tab.filters.read(filter_values))))
    return draw


def _bound(label: str, elem_id: str) -> gr.Textbox:
    return gr.Textbox(label=label, placeholder="any", max_lines=1, min_width=90, scale=1, elem_id=elem_id)


# One click exports and downloads: browse_table.js marks the export (download_mark.js's record, under this key),
# and once the table's click has put a new file in the file component, download_new.js clicks its link.
DOWNLOAD = {"ROOT": "#rs-bulk-file", "KEY": "rsBrowseExport", "MESSAGE": "#rs-browse-info"}


def build(store: Store) -> BrowseTab:
    """Lay out the Browse tab inside the current Blocks context and wire filters, sorting and paging.

    Opening a row is wired by the app, which knows the Episode tab.
    """
    with gr.Row(equal_height=True, elem_id="rs-browse-filters"):
        text = gr.Textbox(label="search messages, tool calls and errors", placeholder="text (Enter to search)",
                          scale=3, min_width=220, elem_id="rs-filter-text", max_lines=1)
        env = gr.Dropdown([ALL], value=ALL, label="env", scale=1, min_width=110, elem_id="rs-filter-env")
        status = gr.Dropdown([s.value for s in Status], value=[], multiselect=True, label="status", scale=2,
                             min_width=150, elem_id="rs-filter-status")
        findings = gr.Dropdown([("any", ALL)], value=ALL, label="findings", scale=2, min_width=160,
                               elem_id="rs-filter-findings")
        outcome = gr.Dropdown([("any", ALL)], value=ALL, label="outcome (why this reward)", scale=2, min_width=170,
                              elem_id="rs-filter-outcome")
        tags = gr.Dropdown([], value=[], multiselect=True, label="tags (all of)", scale=2, min_width=140,
                           elem_id="rs-filter-tags")
        with gr.Column(scale=0, min_width=110, elem_classes="rs-filter-buttons"):
            apply = gr.Button("Apply", variant="primary", size="sm", elem_id="rs-apply")
            reset = gr.Button("Reset", size="sm", elem_id="rs-reset")
    with gr.Accordion(more_label({}), open=False, elem_id="rs-browse-more") as more:
        with gr.Row(equal_height=True):
            task = gr.Dropdown([ALL], value=ALL, label="task", scale=2, min_width=140, allow_custom_value=True,
                               elem_id="rs-filter-task")
            run = gr.Dropdown([ALL], value=ALL, label="run", scale=2, min_width=140, elem_id="rs-filter-run")
            # Textboxes, not gr.Number: an empty Number arrives as 0, and
            # "no bound" must stay distinguishable from a bound of 0.
            reward_min = _bound("reward ≥", "rs-filter-reward-min")
            reward_max = _bound("reward ≤", "rs-filter-reward-max")
            turns_min = _bound("turns ≥", "rs-filter-turns-min")
            turns_max = _bound("turns ≤", "rs-filter-turns-max")
            starred = gr.Dropdown(list(STARRED), value="any", label="starred", min_width=110, elem_id="rs-filter-starred")
            source = gr.Dropdown([ALL], value=ALL, label="source", min_width=100, elem_id="rs-filter-source")
            step = _bound("rollout step", "rs-filter-step")
        with gr.Row(equal_height=True):
            search_context = gr.Checkbox(False, label="search system prompts and tool schemas too", scale=2,
                                         min_width=200, elem_id="rs-filter-search-context")
            columns = gr.Dropdown(list(OPTIONAL_COLUMNS), value=list(DEFAULT_COLUMNS), multiselect=True,
                                  label="more columns (beside id, env, task, status, reason, reward, outcome and diagnosis)",
                                  scale=4, elem_id="rs-columns")
            refresh = gr.Button("Refresh", scale=0, min_width=100, elem_id="rs-refresh")
    info = html(note("Loading…"), "rs-browse-info")
    demo = demo_controls(store)
    table = html(render_table([], DEFAULT_SORT["by"], True, "Loading…"), "rs-episode-table", script("browse_table"))
    bulk_file = gr.File(label="exported (ticked rows)", visible=False, interactive=False, elem_id="rs-bulk-file")
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
    filters = Outputs(text=text, env=env, task=task, status=status, run=run, reward_min=reward_min,
                      reward_max=reward_max, turns_min=turns_min, turns_max=turns_max, tags=tags, starred=starred,
                      source=source, findings=findings, step=step, search_context=search_context, outcome=outcome)
    tab = BrowseTab(filters, apply, reset, refresh, more, columns, info, table, bulk_file, prev, nxt, page_box,
                    page_size, sort, plots, gr.State(None), gr.State(None), gr.State(None), gr.State(None),
                    gr.Timer(REFRESH_S), demo, store)
    drawn = tab.outputs

    def refilter(trigger: Any) -> None:
        shown = trigger(_show(store, tab, first=True), inputs=tab.inputs, outputs=drawn.components)
        shown.then(*tab.count_event)
        shown.then(_charts(store, tab), inputs=filters.components, outputs=tab.chart_outputs.components)

    for control in (apply.click, text.submit, reward_min.submit, reward_max.submit, turns_min.submit,
                    turns_max.submit, step.submit, env.input, task.input, status.input, run.input, tags.input,
                    starred.input, source.input, findings.input, search_context.input, outcome.input):
        refilter(control)
    prev.click(_step(store, tab, -1), inputs=[*tab.inputs, tab.shown], outputs=drawn.components).then(*tab.count_event)
    nxt.click(_step(store, tab, +1), inputs=[*tab.inputs, tab.shown], outputs=drawn.components).then(*tab.count_event)
    page_box.submit(_show(store, tab), inputs=tab.inputs, outputs=drawn.components).then(*tab.count_event)
    page_size.input(_show(store, tab, first=True), inputs=tab.inputs, outputs=drawn.components).then(
        *tab.count_event)
    columns.input(_show(store, tab), inputs=tab.inputs, outputs=drawn.components)
    cleared = filters + Outputs(sort=sort, page_box=page_box)

    def defaults() -> list[Any]:
        return cleared.values(**cleared_filters(), sort=dict(DEFAULT_SORT), page_box=1)

    for shown in (reset.click(defaults, outputs=cleared.components).then(
                      _show(store, tab), inputs=tab.inputs, outputs=drawn.components),
                  refresh.click(lambda: tab.choice_outputs.values(**choices(store)),
                                outputs=tab.choice_outputs.components).then(
                      _show(store, tab), inputs=tab.inputs, outputs=drawn.components)):
        shown.then(*tab.count_event)
        shown.then(_charts(store, tab), inputs=filters.components, outputs=tab.chart_outputs.components)
    clicked = drawn + Outputs(sort=sort, selected=tab.selected, bulk_file=bulk_file, tags=tags)

    def on_table_click(evt: gr.EventData, *values: Any) -> list[Any]:
        *filter_values, sort_v, page_no, size, selected, cols = values
        data = event_data(evt)
        if data.get("bulk"):
            message, path = bulk(store, data)
            shown = _drawn(store, filters.read(filter_values), sort_v, page_no, size, selected, cols)
            shown["info"] = message + shown["info"]
            file = gr.File(value=str(path), visible=True) if path else gr.skip()
            return clicked.values(**shown, bulk_file=file, tags=choices(store)["tags"])
        column = data.get("sort")
        if column not in SORTABLE:
            # A row click: the app opens it; the row stays marked when the table is drawn again.
            return clicked.values(selected=str(data["open"])) if data.get("open") else clicked.skip()
        by, desc = _sort(sort_v)
        # A second click on the sorted column flips it; a new column starts
        # with the order usually wanted (highest, newest first; names A to Z).
        new = {"by": column, "desc": (not desc) if column == by else column not in ("id", "env", "task_id")}
        return clicked.values(**_drawn(store, filters.read(filter_values), new, 1, size, selected, cols), sort=new)

    table_clicked = table.click(on_table_click, inputs=tab.inputs, outputs=clicked.components)
    table_clicked.then(None, js=script("download_new", **DOWNLOAD))
    table_clicked.then(*tab.count_event)
    ticked = Outputs(stamp=tab.stamp) + drawn
    followed = Outputs(charted=tab.charted) + tab.choice_outputs + tab.chart_outputs

    def on_tick(stamp: Any, shown: Any, selected: Any) -> list[Any]:
        now = store.episodes_stamp()
        if now == stamp or not shown:
            return ticked.skip()
        number = shown["page"]
        values = _drawn(store, shown["filters"], shown["sort"], number, shown["size"], selected, shown.get("columns"))
        if values["page_box"] == number:
            del values["page_box"]
        return ticked.values(stamp=now, **values)

    def after_tick(stamp: Any, charted: Any, shown: Any) -> list[Any]:
        # New episodes were drawn in the table: their choices and charts follow, as a step of their own.
        if stamp == charted or not shown:
            return followed.skip()
        return followed.values(charted=stamp, **choices(store), **figures(store, episode_filter(**shown["filters"])))

    tab.timer.tick(on_tick, inputs=[tab.stamp, tab.shown, tab.selected], outputs=ticked.components,
                   show_progress="hidden").then(after_tick, inputs=[tab.stamp, tab.charted, tab.shown],
                                                outputs=followed.components, show_progress="hidden")
    return tab
