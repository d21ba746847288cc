"""The Rollscope dashboard: ``build_app(db)`` and ``launch(db, host, port)``.

Each tab lives in ``dashboard/tabs/<name>.py`` and exposes ``build(store)``;
this module lays the tabs out and wires what crosses tabs:

- a Browse row, a Launch or Export row, a Step or Compare episode link opens
  that episode in the Episode tab (``episode_request``; ``/?episode=ID``);
- the Episode tab's "Fork from this turn" (``fork_request``) selects Step and
  starts the fork;
- Step's "Compare with parent" selects Compare with parent and fork filled in;
- a step of the Runs tab's run view selects Browse filtered to that run and step.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

# Gradio reads this when it is imported and when Blocks are created; a
# debugger looking at private rollouts should not phone home.
os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"

import gradio as gr  # noqa: E402

from engine import Store, try_tokenizer  # noqa: E402

from . import server  # noqa: E402
from .assets import script, stylesheet  # noqa: E402
from .background.watching import WatchManager  # noqa: E402
from .gradio_glue import Outputs, event_data, html, turn_of  # noqa: E402
from .tabs import browse as browse_tab  # noqa: E402
from .tabs import compare as compare_tab  # noqa: E402
from .tabs import episode as episode_tab  # noqa: E402
from .tabs import export as export_tab  # noqa: E402
from .tabs import group as group_tab  # noqa: E402
from .tabs import launch as launch_tab  # noqa: E402
from .tabs import runs as runs_tab  # noqa: E402
from .tabs import step as step_tab  # noqa: E402
from .tabs.browse import BrowseTab  # noqa: E402
from .tabs.compare import CompareTab  # noqa: E402
from .tabs.export import ExportTab  # noqa: E402
from .tabs.launch import LaunchTab  # noqa: E402
from .tabs.runs import RunsTab  # noqa: E402
from .tabs.step import StepTab  # noqa: E402
from .views.html import esc  # noqa: E402


def _title_bar(db_path: str, read_only: bool = False, notice: str = "") -> str:
    # The stylesheet rides in the title bar rather than launch(css=...), so
    # any caller of build_app(...).launch() gets the same look.
    return (
        stylesheet("dashboard") + stylesheet("workflow")
        + '<div class="rs-titlebar"><h1>Rollscope</h1>'
        '<span class="rs-sub">a debugger for multi-turn RL rollouts</span>'
        f'<span class="rs-sub">database <code>{esc(db_path)}</code></span>'
        + ('<span class="rs-sub rs-readonly" title="no write permission on the file or its folder: episodes can '
           'be read and exported, not run, imported, starred or noted">read-only</span>' if read_only else "")
        + (f'<span class="rs-sub rs-readonly rs-notice">{esc(notice)}</span>' if notice else "")
        + "</div>"
    )


def build_app(db_path: str, watches: WatchManager | None = None) -> gr.Blocks:
    """The dashboard over the Rollscope database at ``db_path`` (created if missing).

    ``watches`` runs the Runs tab's folder watches (how often they look; tests make it quick).
    """
    # Gradio keeps every event's inputs and outputs in the browser's localStorage (its run history),
    # rewriting the whole list on each update: with a long episode's HTML that is most of the time an
    # Episode opens, and it copies episode text into the browser. The store is the history here.
    os.environ.setdefault("GRADIO_RUN_HISTORY", "False")
    store = Store(db_path)
    with gr.Blocks(title="Rollscope", fill_width=True, analytics_enabled=False) as demo:
        html(_title_bar(str(db_path), store.read_only, store.notice), "rs-titlebar")
        with gr.Tabs(selected="browse", elem_id="rs-tabs") as tabs:
            with gr.Tab("Browse", id="browse", elem_id="rs-tab-browse"):
                browse = browse_tab.build(store)
            with gr.Tab("Runs", id="runs", elem_id="rs-tab-runs"):
                runs_view = runs_tab.build(store, watches)
            with gr.Tab("Episode", id="episode", elem_id="rs-tab-episode"):
                episode = episode_tab.build(store)
            with gr.Tab("Launch", id="launch", elem_id="rs-tab-launch"):
                launch_view = launch_tab.build(store)
            with gr.Tab("Step", id="step", elem_id="rs-tab-step"):
                step_view = step_tab.build(store)
            with gr.Tab("Group", id="group", elem_id="rs-tab-group") as group_item:
                group_view = group_tab.build(store)
            with gr.Tab("Compare", id="compare", elem_id="rs-tab-compare"):
                compare_view = compare_tab.build(store)
            with gr.Tab("Export", id="export", elem_id="rs-tab-export"):
                export_view = export_tab.build(store, browse.filters, browse_tab.episode_filter)

        # A tab opened by a link drew its neighbours' charts while hidden: fit them when a tab shows.
        tabs.select(None, js=script("resize_charts"))
        tabs.change(None, js=script("resize_charts"))
        assert episode.playback is not None and episode.playback.start_turn is not None
        opened = Outputs(tabs=tabs, start_turn=episode.playback.start_turn) + episode.outputs

        def show(episode_id: Any, turn: int | None = None) -> list[Any]:
            # The Episode tab selected and showing episode_id (playback at turn, else the last); nothing
            # changes without one.
            if not episode_id:
                return opened.skip()
            return opened.values(tabs=gr.Tabs(selected="episode"), start_turn=turn,
                                 **episode_tab.view(store, str(episode_id)))

        def open_row(evt: gr.EventData) -> list[Any]:
            # The table's click event carries {"open": id} for a row ({"sort": ...} for a header).
            return show(event_data(evt).get("open"))

        def open_requested(request: Any) -> list[Any]:
            # Any tab opens an episode by setting episode_request to its id
            # (or to {"id": ..., ...} with a nonce, to reopen the same one; with "turn": k, playback at turn k).
            if isinstance(request, dict):
                return show(request.get("id"), turn_of(request.get("turn")))
            return show(request)

        def open_from_query(request: gr.Request) -> list[Any]:
            # /?episode=ID&turn=K&token=N: playback at turn K; the token view marks token N (assets/tokens.js).
            query = request.query_params if request else {}
            return show(query.get("episode"), turn_of(query.get("turn")))

        browse.table.click(open_row, outputs=opened.components).then(
            None, inputs=[episode.id_box], js=script("set_url")
        )
        # Cross-tab hooks. episode_request: set it to an episode id to show
        # that episode in the Episode tab. fork_request: set by the Episode
        # tab's "Fork from this turn" to {"episode_id", "turn", "at"} (turn k:
        # replay turns before k, continue from k; "at" makes each request new).
        episode_request = gr.State(None)
        fork_request = gr.State(None)
        episode_request.change(open_requested, inputs=[episode_request], outputs=opened.components).then(
            None, inputs=[episode.id_box], js=script("set_url")
        )
        episode.wire_fork(
            lambda episode_id, turn: {"fork_request": {"episode_id": episode_id, "turn": turn, "at": time.time()}},
            Outputs(fork_request=fork_request),
        )
        wire_workflow(demo, store, tabs, episode_request, fork_request, launch_view, step_view, compare_view,
                      export_view)
        wire_runs(demo, store, tabs, runs_view, browse)

        # On every page load, so a reload shows episodes written since.
        browse.wire_load(demo, store)
        demo.load(open_from_query, outputs=opened.components)

        compared = Outputs(tabs=tabs) + compare_view.outputs

        def compare_from_query(request: gr.Request) -> list[Any]:
            # /?compare=A,B opens the Compare tab on that pair.
            pair = [x.strip() for x in (request.query_params.get("compare") or "").split(",")] if request else []
            if len(pair) != 2 or not all(pair):
                return compared.skip()
            return compared.values(tabs=gr.Tabs(selected="compare"), **compare_tab.view(store, *pair))

        demo.load(compare_from_query, outputs=compared.components)

        # The Group tab: /?group=ID on load; a sample opens in Episode; two samples go to Compare.
        grouped = Outputs(tabs=tabs) + group_view.outputs

        def group_from_query(request: gr.Request) -> list[Any]:
            gid = (request.query_params.get("group") or "").strip() if request else ""
            if not gid:  # the groups to pick from are listed when the tab is opened
                return grouped.skip()
            return grouped.values(tabs=gr.Tabs(selected="group"), **group_tab.view(store, gid))

        demo.load(group_from_query, outputs=grouped.components)
        # The list of groups counts every group: read when the tab is opened (each time, so it is current), not
        # with every page load, and never over a group being shown.
        listed = group_view.outputs

        def group_list(gid: Any) -> list[Any]:
            return listed.skip() if str(gid or "").strip() else listed.values(**group_tab.view(store, ""))

        listing = group_item.select(group_list, inputs=[group_view.group], outputs=listed.components)
        for trigger in (group_view.show.click, group_view.group.submit):  # a group asked for: the list never lands on it
            trigger(None, cancels=[listing])
        group_view.view.click(launch_tab.open_request, outputs=[episode_request])
        group_view.compare.click(
            lambda x, y: compared.values(tabs=gr.Tabs(selected="compare"), **compare_tab.view(store, x, y)),
            inputs=[group_view.pick_a, group_view.pick_b], outputs=compared.components)
    return demo


def _warm_tokenizer() -> None:
    # The embedded tokenizer takes seconds to load from its GGUF file; load
    # it while the researcher is still looking at the table.
    try_tokenizer(None)


def launch(db: str, host: str = "127.0.0.1", port: int = 7860, auth: tuple[str, str] | None = None,
           allow_hosts: Sequence[str] = ()) -> None:
    """Serve the dashboard over ``db`` until interrupted (Ctrl-C or SIGTERM).

    Only requests naming ``host`` (or localhost on loopback) or one of ``allow_hosts`` in their Host header,
    and sent from the dashboard's own pages, are answered (``server.Gate``). ``auth`` (user, password)
    guards every route but the login page, with failed logins throttled per address (``server.LoginGuard``).
    ``host`` may be an IPv4 or IPv6 address or a name. Every file the server writes (exports for
    download, Gradio's cache) lives in a folder only this user can enter, removed when the server stops.
    """
    import uvicorn
    from fastapi import FastAPI

    with server.private_files():
        demo = build_app(db)
        guard = server.LoginGuard(*auth) if auth else None
        app = server.Gate(
            gr.mount_gradio_app(FastAPI(), demo, path="", auth=guard.auth() if guard else None, run_history=False),
            server.host_names(host, allow_hosts), any_address=server.listens_everywhere(host),
            allowed=frozenset(allow_hosts), guard=guard)
        threading.Thread(target=_warm_tokenizer, name="rollscope-warm-tokenizer", daemon=True).start()
        print(f"Rollscope dashboard: http://{server.url_host(host)}:{port}/ (database {db}); Ctrl-C stops it",
              flush=True)
        # uvicorn restores the handlers it found and raises the signal again once it has shut down:
        # a SIGTERM then ends the process through this block, so the folder goes too.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            # No X-Forwarded-For: a client could name any address with it and so escape its count of failed
            # logins; behind a proxy every client is the proxy's (loopback: one count that never locks out).
            uvicorn.run(app, host=host.strip().strip("[]"), port=port, log_level="warning", proxy_headers=False)
        except KeyboardInterrupt:
            pass


def wire_workflow(demo: gr.Blocks, store: Store, tabs: gr.Tabs, episode_request: gr.State, fork_request: gr.State,
         launch: LaunchTab, step: StepTab, compare: CompareTab, export: ExportTab) -> None:
    """Wire the workflow tabs to each other and to the app (call inside the Blocks context)."""
    launch.wire_load(demo)
    for view in (launch.table, step.header, compare.view, export.view):
        view.click(launch_tab.open_request, outputs=[episode_request])

    def open_fork(request: Any, *values: Any) -> list[Any]:
        out = step.open_fork(request, *values)
        selected = gr.Tabs(selected="step") if isinstance(request, dict) and request.get("episode_id") else gr.skip()
        return [selected, *out]

    fork_request.change(open_fork, inputs=[fork_request, *step.start_inputs],
                        outputs=[tabs, step.mode, step.parent_id, step.fork_turn, *step.outputs])

    compare_request = gr.State(None)
    step.compare.click(lambda key: step_tab.compare_request(key, step.sessions), inputs=[step.key],
                       outputs=[compare_request])

    compared = Outputs(tabs=tabs) + compare.outputs

    def open_compare(request: Any) -> list[Any]:
        if not isinstance(request, dict):
            return compared.skip()
        return compared.values(tabs=gr.Tabs(selected="compare"), **compare_tab.from_request(store, request))

    compare_request.change(open_compare, inputs=[compare_request], outputs=compared.components)


def wire_runs(demo: gr.Blocks, store: Store, tabs: gr.Tabs, runs: RunsTab, browse: BrowseTab) -> None:
    """The Runs tab on page load, and a step of its table showing that step's episodes in Browse."""
    runs.wire_load(demo, store)
    browse_request = gr.State(None)
    runs.steps.click(runs_tab.browse_request, inputs=[runs.run], outputs=[browse_request])
    browse.wire_request(store, browse_request, tabs)
