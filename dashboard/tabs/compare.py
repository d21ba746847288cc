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

from ..assets import script
from ..gradio_glue import Outputs, html
from ..views import compare as views


@dataclass
class CompareTab:
    a: gr.Textbox
    b: gr.Textbox
    run: gr.Button
    swap: gr.Button
    parent: gr.Button
    view: gr.HTML

    @property
    def outputs(self) -> Outputs:
        return Outputs(a=self.a, b=self.b, view=self.view)


def view(store: Store, a: Any, b: Any) -> dict[str, Any]:
    """Values for ``CompareTab.outputs``, by name: the resolved ids and the comparison (or why there is none)."""
    a_id, b_id = str(a or "").strip(), str(b or "").strip()
    if not a_id or not b_id:
        return {"view": views.empty()}
    try:
        ep_a = store.get_episode(store.resolve_id(a_id))
        ep_b = store.get_episode(store.resolve_id(b_id))
    except RollscopeError as e:
        return {"view": views.empty(str(e), "error")}
    return {"a": ep_a.id, "b": ep_b.id, "view": views.render_comparison(compare_episodes(ep_a, ep_b))}


def from_request(store: Store, request: Any) -> dict[str, Any]:
    """Show the pair a ``{"a", "b"}`` request names (nothing without both)."""
    if not isinstance(request, dict) or not request.get("a") or not request.get("b"):
        return {}
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
    out = html(views.empty(), "rs-compare-view", script("open_episode"))
    tab = CompareTab(a, b, run, swap, parent, out)
    shown = tab.outputs

    for trigger in (run.click, a.submit, b.submit):
        trigger(lambda x, y: shown.values(**view(store, x, y)), inputs=[a, b], outputs=shown.components)
    swap.click(lambda x, y: shown.values(**view(store, y, x)), inputs=[a, b], outputs=shown.components)

    def with_parent(a_v: Any) -> list[Any]:
        a_id = str(a_v or "").strip()
        if not a_id:
            return shown.values(view=views.empty("Type A's id first.", "warn"))
        try:
            ep = store.get_episode(store.resolve_id(a_id))
        except RollscopeError as e:
            return shown.values(view=views.empty(str(e), "error"))
        if not ep.parent_id:
            return shown.values(view=views.empty(f"{ep.id} is not a fork: it has no parent.", "warn"))
        # Parent on the left: read left to right as "before, after".
        return shown.values(**view(store, ep.parent_id, ep.id))

    parent.click(with_parent, inputs=[a], outputs=shown.components)
    return tab
