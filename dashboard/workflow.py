"""What crosses the Runs, Launch, Step, Compare and Export tabs and the rest of the app.

- a Launch or Export row, a Step or Compare episode link opens that episode in
  the Episode tab (through the app's ``episode_request``);
- the Episode tab's "Fork from this turn" (the app's ``fork_request``)
  selects Step and starts the fork;
- Step's "Compare with parent" selects Compare with parent and fork filled in;
- a step of the Runs tab's run view selects Browse filtered to that run and step.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from engine import Store

from .gradio_glue import Outputs
from .tabs import compare as compare_tab
from .tabs import launch as launch_tab
from .tabs import runs as runs_tab
from .tabs import step as step_tab
from .tabs.browse import BrowseTab
from .tabs.compare import CompareTab
from .tabs.export import ExportTab
from .tabs.launch import LaunchTab
from .tabs.runs import RunsTab
from .tabs.step import StepTab


def wire(demo: gr.Blocks, store: Store, tabs: gr.Tabs, episode_request: gr.State, fork_request: gr.State,
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
