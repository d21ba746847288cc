"""Runs: watch a training run's dump folder, and see the run step by step.

Start checks the form at once (folder, format, tokenizer) and runs the watch in a thread of the
server (``dashboard.background.watching``): new dumps are imported and checked into this database as the
trainer writes them. Below, the run view plots the chosen run one point per rollout step, marks the
steps where the data changed for the worse, stacks each step's outcome kinds (why its episodes earned
their reward), and lists the steps; a step opens its episodes in Browse. One ``gr.Timer`` polls the watch
and a cheap stamp of the store, so the view grows while a run is written (by this server or a ``rollscope watch`` elsewhere) and stays still otherwise; a
reloaded page finds a running watch again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import RollscopeError, Store, step_changes

from ..assets import script
from ..background.watching import FORMATS, WatchJob, WatchManager, WatchStatus
from ..gradio_glue import Outputs, event_data, html
from ..views import run_charts
from ..views.html import note
from ..views.runs import alerts_note, run_label, runs_table, step_table, watch_status

POLL_S = 1.5
STOP_WAIT_S = 5.0  # how long Stop waits for the watch to end before it answers "stopping"


@dataclass
class RunsTab:
    """The Runs tab's components. ``steps`` click events carry ``{"step": N}`` (the app opens Browse)."""

    folder: gr.Textbox
    fmt: gr.Dropdown
    tokenizer: gr.Textbox
    run_name: gr.Textbox
    start: gr.Button
    stop: gr.Button
    message: gr.HTML
    status: gr.HTML
    run: gr.Dropdown
    alerts: gr.HTML
    plot: gr.Plot
    outcomes: gr.Plot  # outcome kinds per step, stacked
    steps: gr.HTML
    timer: gr.Timer
    watch_id: gr.State
    shown: gr.State  # the watch's state, looks and events last rendered, so a tick with nothing new sends nothing
    view_key: gr.State  # (run, its steps) last drawn
    stamp: gr.State  # the store's episodes_stamp() when the run list was last read
    watches: WatchManager
    all_runs: gr.HTML  # every run of the database (Store.run_overview)

    @property
    def status_outputs(self) -> Outputs:
        """A watch's state (``_status_values``)."""
        return Outputs(status=self.status, shown=self.shown, stop=self.stop, message=self.message)

    @property
    def view_outputs(self) -> Outputs:
        """The run view (``view_values``)."""
        return Outputs(alerts=self.alerts, plot=self.plot, outcomes=self.outcomes, steps=self.steps,
                       view_key=self.view_key)

    @property
    def tick_outputs(self) -> Outputs:
        """What a poll updates: the watch, the run list, the view and the store's stamp."""
        return (self.status_outputs + Outputs(run=self.run, all_runs=self.all_runs) + self.view_outputs
                + Outputs(stamp=self.stamp))

    @property
    def watch_outputs(self) -> Outputs:
        """The watch shown, and what a poll updates."""
        return Outputs(watch_id=self.watch_id) + self.tick_outputs

    def wire_load(self, demo: gr.Blocks, store: Store) -> None:
        """On page load: the newest running watch (else the newest), the run list and the view."""
        out = self.watch_outputs

        def attach() -> list[Any]:
            job = self.watches.latest()
            follow = job.watcher.run_id if job is not None else None
            choices, value = _run_choices(store, None, follow)
            return out.values(watch_id=job.watch_id if job else None, **_status_values(self.watches, job, None),
                              run=gr.Dropdown(choices=choices, value=value), **view_values(store, value),
                              all_runs=runs_table(store.run_overview()), stamp=store.episodes_stamp())

        demo.load(attach, outputs=out.components)


def _others(watches: WatchManager, shown: WatchJob | None) -> list[WatchStatus]:
    return [w.status() for w in watches.active() if w is not shown]


def _status_values(watches: WatchManager, job: WatchJob | None, shown: Any, message: Any = None) -> dict[str, Any]:
    """Values for ``RunsTab.status_outputs`` showing ``job``; none when nothing changed since ``shown``.

    ``message`` replaces the note under the buttons; without one, a watch that ended clears it (an old
    "Watching…" or "Stopping…" would only mislead).
    """
    status = job.status() if job is not None else None
    others = _others(watches, job)
    ids = [o.watch_id for o in others]
    key = [status.state, status.looks, len(status.events), status.new, ids] if status else [None, ids]
    said = {} if message is None else {"message": message}
    if key == shown:
        return said
    if message is None and status is not None and not status.active:
        said = {"message": ""}
    return {"status": watch_status(status, others), "shown": key,
            "stop": gr.Button(interactive=bool(status and status.active)), **said}


def view_values(store: Store, run: str | None, key: Any = None) -> dict[str, Any]:
    """Values for ``RunsTab.view_outputs`` of ``run``: alerts, figure, step table and the key of what was drawn;
    none when its steps are what ``key`` says was drawn."""
    try:
        stats = store.step_stats(run) if run else []
    except RollscopeError as e:
        return {"alerts": note(str(e), "error"), "view_key": None}
    new_key = [run, hash(repr(stats))]
    if new_key == key:
        return {}
    marked = step_changes(stats)
    return {"alerts": alerts_note(stats, marked), "plot": run_charts.run_figure(stats, run or "", marked),
            "outcomes": run_charts.outcome_figure(stats, run or ""), "steps": step_table(stats, marked),
            "view_key": new_key}


def _run_choices(store: Store, current: str | None, follow: str | None) -> tuple[list[tuple[str, str]], str | None]:
    """The run dropdown's (label, run) choices and the run to show: ``current`` if set, else the watched
    run (``follow``), else the run that grew last."""
    choices = [(run_label(r), r.run_id) for r in store.runs_with_steps()]
    ids = {value for _, value in choices}
    for extra in (current, follow):
        if extra and extra not in ids:
            choices.append((f"{extra} · no steps yet", extra))
            ids.add(extra)
    value = current or follow or (choices[0][1] if choices else None)
    return choices, value


def build(store: Store, watches: WatchManager | None = None) -> RunsTab:
    """Lay out the Runs tab in the current Blocks context and wire Start, Stop, the run view and the poll."""
    watches = watches or WatchManager()
    html('<h4 class="rs-h">All runs <span class="rs-dim">(launched, imported, watched, the demo\'s; newest first)'
         "</span></h4>")
    all_runs = html("", "rs-runs-all")
    html('<p class="rs-lead">Watch a training run\'s dump folder: each new dump is imported and checked into '
         "this database as the trainer writes it, and the run view below grows a point per rollout step.</p>")
    with gr.Group(elem_classes="rs-form"):
        with gr.Row(equal_height=True):
            folder = gr.Textbox(label="dump folder (on this server)", placeholder="/path/to/run/dumps", scale=3,
                                max_lines=1, elem_id="rs-watch-folder")
            fmt = gr.Dropdown(list(FORMATS), value=FORMATS[0], label="format", min_width=110, scale=1,
                              elem_id="rs-watch-format")
            tokenizer = gr.Textbox(label="tokenizer (optional)", placeholder="folder or hub id; slime: its tokenizer/ "
                                   "folder if there is one", scale=2, max_lines=1, elem_id="rs-watch-tokenizer")
            run_name = gr.Textbox(label="run name (optional)", placeholder="default: folder name and a hash",
                                  scale=2, max_lines=1, elem_id="rs-watch-run")
            reward_key = gr.Textbox(label="reward key (optional)", placeholder="a dict of scores: which is the reward",
                                    scale=2, max_lines=1, elem_id="rs-watch-reward-key")
    with gr.Row(elem_classes="rs-actions"):
        start = gr.Button("▶ Start watching", variant="primary", scale=0, min_width=210, elem_id="rs-watch-start")
        stop = gr.Button("■ Stop", variant="stop", scale=0, min_width=110, interactive=False,
                         elem_id="rs-watch-stop")
    message = html("", "rs-watch-message")
    status = html(watch_status(None), "rs-watch-status")
    html('<h4 class="rs-h">Run view <span class="rs-dim">(one point per rollout step)</span></h4>')
    run = gr.Dropdown([], value=None, label="run", elem_id="rs-run-select")
    alerts = html("", "rs-run-alerts")
    plot = gr.Plot(show_label=False, elem_id="rs-run-chart")
    outcomes = gr.Plot(show_label=False, elem_id="rs-run-outcomes")
    html('<h4 class="rs-h">Steps <span class="rs-dim">(newest first; click a step to see its episodes in '
         "Browse)</span></h4>")
    steps = html("", "rs-run-steps", script("run_steps"))
    timer = gr.Timer(POLL_S)
    tab = RunsTab(folder, fmt, tokenizer, run_name, start, stop, message, status, run, alerts, plot, outcomes, steps, timer,
                  gr.State(None), gr.State(None), gr.State(None), gr.State(None), watches, all_runs)
    ticked, watched, status_out, view_out = tab.tick_outputs, tab.watch_outputs, tab.status_outputs, tab.view_outputs

    def on_tick(watch_id: str | None, shown: Any, run_v: str | None, key: Any, stamp: Any) -> list[Any]:
        # The watch, then (only when the store changed) the run list and the view.
        job = watches.get(watch_id)
        out = _status_values(watches, job, shown)
        now = store.episodes_stamp()
        if now == stamp:
            return ticked.values(**out)
        follow = job.watcher.run_id if job is not None and job.status().active else None
        choices, value = _run_choices(store, run_v, follow)
        return ticked.values(**out, run=gr.Dropdown(choices=choices, value=value), **view_values(store, value, key),
                             all_runs=runs_table(store.run_overview()), stamp=now)

    timer.tick(on_tick, inputs=[tab.watch_id, tab.shown, run, tab.view_key, tab.stamp], outputs=ticked.components,
               show_progress="hidden", concurrency_limit=None)

    def on_start(folder_v: str, fmt_v: str, tok_v: str, name_v: str, key_v: str) -> list[Any]:
        running = watches.running(folder_v) if (folder_v or "").strip() else None
        try:
            job = running or watches.start(store, folder_v, fmt_v, tok_v, name_v, key_v)
        except RollscopeError as e:
            return watched.values(message=note(str(e), "error"))
        said = (f"Already watching {job.folder}: showing that watch." if running else
                f"Watching {job.folder} into run {job.watcher.run_id}: it looks every {watches.interval:g} s.")
        choices, value = _run_choices(store, job.watcher.run_id, None)
        return watched.values(watch_id=job.watch_id, **_status_values(watches, job, None, note(said, "info")),
                              run=gr.Dropdown(choices=choices, value=value), **view_values(store, value))

    start.click(on_start, inputs=[folder, fmt, tokenizer, run_name, reward_key], outputs=watched.components,
                concurrency_limit=None)

    def on_stop(watch_id: str | None) -> list[Any]:
        job = watches.get(watch_id)
        if job is None or not job.stop():
            return status_out.values(message=note("No watch is running here.", "warn"))
        # A watch between files ends at once: the answer shows it stopped, not only the polls after it.
        if job.wait(STOP_WAIT_S):
            return status_out.values(**_status_values(watches, job, None))
        return status_out.values(**_status_values(watches, job, None, note(f"Stopping the watch of {job.folder}…",
                                                                           "warn")))

    stop.click(on_stop, inputs=[tab.watch_id], outputs=status_out.components, concurrency_limit=None)
    run.input(lambda run_v: view_out.values(**view_values(store, run_v)), inputs=[run], outputs=view_out.components)
    return tab


def browse_request(run: str | None, evt: gr.EventData) -> Any:
    """``{"run", "step", "at"}`` for the app's browse request when a step row was chosen, else skip."""
    step = event_data(evt).get("step")
    if not run or not isinstance(step, int | float):
        return gr.skip()
    return {"run": run, "step": int(step), "at": time.time()}
