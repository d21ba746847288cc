"""Browse: the episode table, filtered by env and status, a page at a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine.records import Status
from engine.store import EpisodeFilter, EpisodeSummary, Store

from ..render import render_message

PAGE_SIZE = 50
ALL = "all"
COLUMNS = ["id", "env", "task", "status", "reward", "turns", "tokens", "trainable", "preset", "findings"]
DATATYPES = ["str", "str", "str", "str", "number", "number", "number", "number", "str", "number"]


def row(s: EpisodeSummary) -> list[Any]:
    """One table row of an episode summary, in ``COLUMNS`` order."""
    return [s.id, s.env, s.task_id, s.status, round(s.reward, 4), s.n_turns, s.n_tokens, s.n_trainable, s.preset,
            s.n_findings]


def episode_filter(env: str | None, status: str | None) -> EpisodeFilter:
    """The store filter for the dropdowns' values (``all`` means no filter)."""
    return EpisodeFilter(
        env=None if not env or env == ALL else env,
        status=() if not status or status == ALL else (status,),
    )


@dataclass
class BrowseTab:
    """The Browse tab's components; ``outputs`` is the order ``page`` returns values in."""

    env: gr.Dropdown
    status: gr.Dropdown
    refresh: gr.Button
    prev: gr.Button
    next: gr.Button
    info: gr.HTML
    table: gr.Dataframe
    page_no: gr.State

    @property
    def inputs(self) -> list[Any]:
        return [self.env, self.status, self.page_no]

    @property
    def outputs(self) -> list[Any]:
        return [self.table, self.info, self.page_no, self.env]


def page(store: Store, env: str | None, status: str | None, page_no: int) -> list[Any]:
    """Values for ``BrowseTab.outputs``: one page of rows, the count line, the clamped page, env choices."""
    flt = episode_filter(env, status)
    total = store.count(flt)
    last = max(0, (total - 1) // PAGE_SIZE)
    page_no = min(max(0, int(page_no or 0)), last)
    summaries = store.list_episodes(flt, limit=PAGE_SIZE, offset=page_no * PAGE_SIZE)
    rows = [row(s) for s in summaries]
    if total:
        first = page_no * PAGE_SIZE + 1
        info = render_message(
            f"Episodes {first}–{first + len(rows) - 1} of {total} (page {page_no + 1} of {last + 1}), newest first. "
            "Click a row to open it."
        )
    elif store.count() == 0:
        info = render_message(f"No episodes in {store.path} yet: run `rollscope run --db {store.path}` to make some.")
    else:
        info = render_message("No episode matches these filters.")
    envs = [ALL, *store.distinct("env")]
    env_update = gr.Dropdown(choices=envs, value=env if env in envs else ALL)
    return [rows, info, page_no, env_update]


def build(store: Store) -> BrowseTab:
    """Lay out the Browse tab inside the current Blocks context and wire paging and filters.

    Opening a row is wired by the app, which knows the Episode tab.
    """
    with gr.Row(equal_height=False, elem_classes="rs-pager"):
        env = gr.Dropdown([ALL], value=ALL, label="env", scale=2, elem_id="rs-filter-env")
        status = gr.Dropdown([ALL, *(s.value for s in Status)], value=ALL, label="status", scale=2,
                             elem_id="rs-filter-status")
        refresh = gr.Button("Refresh", scale=0, min_width=110, elem_id="rs-refresh")
        prev = gr.Button("◀ Prev", scale=0, min_width=100, elem_id="rs-prev")
        nxt = gr.Button("Next ▶", scale=0, min_width=100, elem_id="rs-next")
    info = gr.HTML(render_message("Loading…"), elem_id="rs-browse-info", apply_default_css=False, js_on_load=None)
    table = gr.Dataframe(
        value=[],
        headers=COLUMNS,
        datatype=DATATYPES,
        interactive=False,
        wrap=True,
        max_height=640,
        elem_id="rs-episode-table",
        column_widths=["16%", "7%", "14%", "10%", "8%", "7%", "8%", "9%", "12%", "9%"],
    )
    page_no = gr.State(0)
    tab = BrowseTab(env, status, refresh, prev, nxt, info, table, page_no)

    def show(env_v: str, status_v: str, page_v: int) -> list[Any]:
        return page(store, env_v, status_v, page_v)

    def first_page(env_v: str, status_v: str) -> list[Any]:
        return page(store, env_v, status_v, 0)

    refresh.click(show, inputs=tab.inputs, outputs=tab.outputs)
    prev.click(lambda e, s, p: show(e, s, p - 1), inputs=tab.inputs, outputs=tab.outputs)
    nxt.click(lambda e, s, p: show(e, s, p + 1), inputs=tab.inputs, outputs=tab.outputs)
    env.input(first_page, inputs=[env, status], outputs=tab.outputs)
    status.input(first_page, inputs=[env, status], outputs=tab.outputs)
    return tab
