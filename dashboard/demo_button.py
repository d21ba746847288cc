"""Browse's "Build the demo" button: on an empty database, the demo's runs (``engine.build_demo``) are built in
the background (``jobs.DemoJob``), like a Launch batch, and Browse shows them as they are stored.

The button shows only on an empty database this server may write; the message under it follows the build
(a timer polls it while it runs) and then says which tag shows what. A reloaded page finds the build again,
and a database that holds the demo's tags gets the guide folded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import Store

from .background.jobs import DemoJobs
from .gradio_glue import Outputs, html
from .views.browse import offer as demo_offer
from .views.browse import present as demo_present
from .views.browse import progress as demo_progress
from .views.html import note

POLL_S = 1.0


@dataclass
class DemoControls:
    """The button, the message that follows the build, and the timer that polls it."""

    row: gr.Row  # hidden when it has nothing to say, so it takes no room
    button: gr.Button
    message: gr.HTML
    timer: gr.Timer
    jobs: DemoJobs

    @property
    def outputs(self) -> Outputs:
        return Outputs(row=self.row, button=self.button, message=self.message, timer=self.timer)

    def shown(self, store: Store) -> dict[str, Any]:
        """Values for ``outputs``: the build this server ran, else the offer (an empty database this server may
        write), else the guide to the demo's tags the database holds."""
        job = self.jobs.latest()
        if job is not None:
            status = job.status()
            return {"row": gr.Row(visible=True), "button": gr.Button(visible=False),
                    "message": demo_progress(status), "timer": gr.Timer(active=status.active)}
        empty = not store.read_only and store.count() == 0
        message = demo_offer() if empty else demo_present(store.tag_counts())
        return {"row": gr.Row(visible=bool(message)), "button": gr.Button(visible=empty), "message": message,
                "timer": gr.Timer(active=False)}

    def wire_load(self, blocks: gr.Blocks, store: Store) -> None:
        """On every page load: the offer, the build under way, or the guide."""
        blocks.load(lambda: self.outputs.values(**self.shown(store)), outputs=self.outputs.components)


def demo_controls(store: Store, jobs: DemoJobs | None = None) -> DemoControls:
    """Lay out the button and its message in the current Blocks context and wire the click and the poll."""
    with gr.Row(elem_classes="rs-actions rs-demo-row", equal_height=True, visible=False) as row:
        button = gr.Button("▶ Build the demo", variant="primary", visible=False, scale=0, min_width=210,
                           elem_id="rs-demo-build")
        message = html("", "rs-demo-message")
    controls = DemoControls(row, button, message, gr.Timer(POLL_S, active=False), jobs or DemoJobs())
    out = controls.outputs

    def start() -> list[Any]:
        if store.count() and controls.jobs.latest() is None:
            return out.values(row=gr.Row(visible=True), button=gr.Button(visible=False), message=note(
                f"{store.path} holds episodes now: the demo is built into an empty database "
                "(`rollscope demo --db NEW.db`, or `--force` to add it to these)", "warn"))
        controls.jobs.start(store)
        return out.values(**controls.shown(store))

    def poll() -> list[Any]:
        job = controls.jobs.latest()
        if job is None:
            return out.values(timer=gr.Timer(active=False))
        status = job.status()
        return out.values(message=demo_progress(status), timer=gr.Timer(active=status.active))

    button.click(start, outputs=out.components, concurrency_limit=None)
    controls.timer.tick(poll, outputs=out.components, show_progress="hidden", concurrency_limit=None)
    return controls
