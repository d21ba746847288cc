"""Launch: run a batch (tasks × samples) in the background, watch it finish, cancel it.

The form is checked at once (env, task range, numbers, whether a server
URL answers) so a mistake shows as a sentence, not a traceback; the slow
setup (tokenizer, a local model) and the episodes run in the job's own
thread (``dashboard.background.jobs``), writing to the app's database as they go. A
``gr.Timer`` polls the job while it runs; a reloaded page finds the latest
batch again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import AUTO, ENVS, PRESET_CHOICES, ConfigError, RollscopeError, Store, plan_run

from ..assets import script
from ..background.jobs import JobManager, JobStatus
from ..controls import BackendControls, LoopControls, backend_controls, loop_controls, loop_table
from ..controls import parse as parse_backend
from ..gradio_glue import Outputs, event_data, html, turn_of
from ..views import launch as views
from ..views.html import note

POLL_S = 1.0


@dataclass
class LaunchTab:
    """The Launch tab's components. ``table`` click events carry ``{"open": id}``."""

    env: gr.Dropdown
    tasks: gr.Textbox
    samples: gr.Number
    preset: gr.Dropdown
    loop: LoopControls
    concurrency: gr.Number
    backend: BackendControls
    start: gr.Button
    cancel: gr.Button
    message: gr.HTML
    progress: gr.HTML
    table: gr.HTML
    timer: gr.Timer
    job_id: gr.State
    shown: gr.State  # (state, rows) last rendered, so an idle tick leaves the table alone
    jobs: JobManager

    @property
    def poll_outputs(self) -> Outputs:
        """What a poll of the batch shows (``_poll_values``)."""
        return Outputs(progress=self.progress, table=self.table, shown=self.shown, timer=self.timer, start=self.start,
                       cancel=self.cancel, message=self.message)

    @property
    def job_outputs(self) -> Outputs:
        """The batch shown, and what a poll of it shows."""
        return Outputs(job_id=self.job_id) + self.poll_outputs

    def wire_load(self, demo: gr.Blocks) -> None:
        """On page load, show the latest batch (and keep polling it if it still runs)."""
        out = self.job_outputs

        def attach() -> list[Any]:
            job = self.jobs.latest()
            if job is None:
                return out.values(job_id=None, progress=views.progress(None), shown=None)
            return out.values(job_id=job.job_id, **_poll_values(job.status(), None))

        demo.load(attach, outputs=out.components)


def _poll_values(status: JobStatus, shown: Any) -> dict[str, Any]:
    """Values for ``LaunchTab.poll_outputs`` showing ``status`` (the table only when it changed since ``shown``)."""
    key = [status.state, status.done]
    active = status.active
    values = {"progress": views.progress(status), "shown": key, "timer": gr.Timer(active=active),
              "start": gr.Button(interactive=not active), "cancel": gr.Button(interactive=active)}
    if shown != key:
        values["table"] = views.finished_table(status.rows)
    if not active:
        # Once the batch ends, the progress box says how; an old "Started…" or "Cancelling…" would only mislead.
        values["message"] = ""
    return values


def build(store: Store, jobs: JobManager | None = None) -> LaunchTab:
    """Lay out the Launch tab in the current Blocks context and wire Start, Cancel and the poll."""
    jobs = jobs or JobManager()
    html('<p class="rs-lead">Run a batch of episodes in the background; each is written to this database '
         "as it finishes. Cancelling keeps finished episodes and marks those in flight <i>interrupted</i>.</p>")
    with gr.Group(elem_classes="rs-form"):
        with gr.Row(equal_height=True):
            env = gr.Dropdown(list(ENVS), value="math", label="env", min_width=140, scale=1, elem_id="rs-launch-env")
            tasks = gr.Textbox("0:4", label="tasks", placeholder="0:8, 3, 1,5,9, all, or task ids", min_width=150,
                               scale=1, elem_id="rs-launch-tasks", max_lines=1)
            samples = gr.Number(1, label="samples per task", precision=0, min_width=120,
                                elem_id="rs-launch-samples")
            preset = gr.Dropdown(list(PRESET_CHOICES), value=AUTO, label="preset", min_width=130,
                                 elem_id="rs-launch-preset")
            concurrency = gr.Number(4, label="concurrency", precision=0, min_width=110,
                                    elem_id="rs-launch-concurrency")
        with gr.Row(equal_height=True):
            run_name = gr.Textbox(label="run name (optional)", placeholder="default: a fresh id", max_lines=1,
                                  scale=2, elem_id="rs-launch-run")
            tags = gr.Textbox(label="tags (optional)", placeholder="comma-separated: baseline, qwen3", max_lines=1,
                              scale=3, elem_id="rs-launch-tags")
        loop = loop_controls("rs-launch", "math", AUTO)
        backend = backend_controls("rs-launch")
    with gr.Row(elem_classes="rs-actions"):
        start = gr.Button("▶ Start", variant="primary", scale=0, min_width=130, elem_id="rs-launch-start")
        cancel = gr.Button("■ Cancel", variant="stop", scale=0, min_width=130, interactive=False,
                           elem_id="rs-launch-cancel")
    message = html("", "rs-launch-message")
    progress = html(views.progress(None), "rs-launch-progress")
    html('<h4 class="rs-h">Finished episodes <span class="rs-dim">(newest first; click one to open it)</span></h4>')
    table = html(views.finished_table(()), "rs-launch-table", script("open_episode"))
    timer = gr.Timer(POLL_S, active=False)
    job_id = gr.State(None)
    shown = gr.State(None)
    tab = LaunchTab(env, tasks, samples, preset, loop, concurrency, backend, start, cancel, message, progress,
                    table, timer, job_id, shown, jobs)
    polled, started = tab.poll_outputs, tab.job_outputs

    def on_start(env_v: Any, tasks_v: Any, samples_v: Any, preset_v: Any, settings_v: Any, conc_v: Any,
                 run_v: Any, tags_v: Any, *backend_v: Any) -> list[Any]:
        try:
            plan = plan_run(env_v, tasks_v, samples_v, preset_v, settings_v, conc_v, parse_backend(*backend_v),
                            run_name=run_v, tags=tags_v)
            if plan.run_name and store.has_run(plan.run_name):
                raise ConfigError(f"there is a run {plan.run_name!r} already: choose another run name")
        except RollscopeError as e:
            return started.values(message=note(str(e), "error"))
        job = jobs.start(plan, store)
        return started.values(job_id=job.job_id, **{**_poll_values(job.status(), None),
                                                    "message": note(f"Started {job.job_id}.", "info")})

    start.click(on_start, inputs=[env, tasks, samples, preset, loop.settings, concurrency, run_name, tags,
                                  *backend.inputs],
                outputs=started.components, concurrency_limit=None)
    for source in (env, preset, loop.settings):
        source.change(loop_table, inputs=[preset, env, loop.settings], outputs=[loop.table], show_progress="hidden",
                      queue=False)

    def on_tick(job_id_v: str | None, shown_v: Any) -> list[Any]:
        job = jobs.get(job_id_v)
        if job is None:
            return polled.values(timer=gr.Timer(active=False), start=gr.Button(interactive=True),
                                 cancel=gr.Button(interactive=False))
        return polled.values(**_poll_values(job.status(), shown_v))

    timer.tick(on_tick, inputs=[job_id, shown], outputs=polled.components, show_progress="hidden",
               concurrency_limit=None)

    def on_cancel(job_id_v: str | None) -> list[Any]:
        job = jobs.get(job_id_v)
        if job is None or not job.cancel():
            return polled.values(message=note("No batch is running.", "warn"))
        return polled.values(**{**_poll_values(job.status(), None), "message": note(f"Cancelling {job.job_id}…", "warn")})

    cancel.click(on_cancel, inputs=[job_id], outputs=polled.components, concurrency_limit=None)
    return tab


def open_request(evt: gr.EventData) -> Any:
    """``{"id", "at"}`` for the app's episode_request when a row was clicked (and ``"turn"`` when the link names
    one), else skip."""
    data = event_data(evt)
    episode_id = data.get("open")
    if not episode_id:
        return gr.skip()
    turn = turn_of(data.get("turn"))
    return {"id": str(episode_id), "at": time.time(), **({"turn": turn} if turn is not None else {})}
