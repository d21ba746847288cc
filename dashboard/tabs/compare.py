"""Compare: two episodes side by side, aligned by turn, with the first divergence marked.

Pick them by id (a unique prefix is enough); "B ← A's parent" fills in the
episode A was forked from. Other tabs prefill it through a
``{"a", "b", "at"}`` request (Step's "Compare with parent").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import RollscopeError, Store, compare_episodes

from .. import render_compare as rc
from ..render_step import OPEN_JS


@dataclass
class CompareTab:
    a: gr.Textbox
    b: gr.Textbox
    run: gr.Button
    swap: gr.Button
    parent: gr.Button
    view: gr.HTML

    @property
    def outputs(self) -> list[Any]:
        return [self.a, self.b, self.view]


def view(store: Store, a: Any, b: Any) -> list[Any]:
    """Values for ``[a box, b box, view]``: the resolved ids and the comparison (or why there is none)."""
    a_id, b_id = str(a or "").strip(), str(b or "").strip()
    if not a_id or not b_id:
        return [gr.skip(), gr.skip(), rc.empty()]
    try:
        ep_a = store.get_episode(store.resolve_id(a_id))
        ep_b = store.get_episode(store.resolve_id(b_id))
    except RollscopeError as e:
        return [gr.skip(), gr.skip(), rc.empty(str(e), "error")]
    return [ep_a.id, ep_b.id, rc.render_comparison(compare_episodes(ep_a, ep_b))]


def from_request(store: Store, request: Any) -> list[Any]:
    """Show the pair a ``{"a", "b"}`` request names."""
    if not isinstance(request, dict) or not request.get("a") or not request.get("b"):
        return [gr.skip()] * 3
    return view(store, request["a"], request["b"])


def build(store: Store) -> CompareTab:
    """Lay out the Compare tab in the current Blocks context and wire its buttons."""
    with gr.Row(equal_height=True, elem_classes="rs-idbar"):
        a = gr.Textbox(label="A", placeholder="episode id (e.g. the parent)", scale=3, max_lines=1,
                       elem_id="rs-compare-a")
        b = gr.Textbox(label="B", placeholder="episode id (e.g. the fork)", scale=3, max_lines=1,
                       elem_id="rs-compare-b")
        run = gr.Button("Compare", variant="primary", scale=0, min_width=120, elem_id="rs-compare-run")
        swap = gr.Button("⇄ Swap", scale=0, min_width=110, elem_id="rs-compare-swap")
        parent = gr.Button("B ← A's parent", scale=0, min_width=150, elem_id="rs-compare-parent")
    out = gr.HTML(rc.empty(), elem_id="rs-compare-view", apply_default_css=False, js_on_load=OPEN_JS)
    tab = CompareTab(a, b, run, swap, parent, out)

    for trigger in (run.click, a.submit, b.submit):
        trigger(lambda x, y: view(store, x, y), inputs=[a, b], outputs=tab.outputs)
    swap.click(lambda x, y: view(store, y, x), inputs=[a, b], outputs=tab.outputs)

    def with_parent(a_v: Any) -> list[Any]:
        a_id = str(a_v or "").strip()
        if not a_id:
            return [gr.skip(), gr.skip(), rc.empty("Type A's id first.", "warn")]
        try:
            ep = store.get_episode(store.resolve_id(a_id))
        except RollscopeError as e:
            return [gr.skip(), gr.skip(), rc.empty(str(e), "error")]
        if not ep.parent_id:
            return [gr.skip(), gr.skip(), rc.empty(f"{ep.id} is not a fork: it has no parent.", "warn")]
        # Parent on the left: read left to right as "before, after".
        return view(store, ep.parent_id, ep.id)

    parent.click(with_parent, inputs=[a], outputs=tab.outputs)
    return tab
