"""Group: one task's GRPO samples side by side, from Browse's group column or ``/?group=GROUP_ID``.

Per sample: reward, advantage (GRPO's normalization, named), status, turns,
trainable tokens and root findings; the turn where the samples first take
different actions; a warning when the group has zero reward spread, and the
run's other such groups. A sample opens in the Episode tab; any two go to
Compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import RollscopeError, Store, flat_groups, load_group

from ..assets import script
from ..gradio_glue import Outputs, html
from ..views import group as views


@dataclass
class GroupTab:
    group: gr.Textbox
    show: gr.Button
    view: gr.HTML
    pick_a: gr.Dropdown
    pick_b: gr.Dropdown
    compare: gr.Button

    @property
    def outputs(self) -> Outputs:
        return Outputs(group=self.group, view=self.view, pick_a=self.pick_a, pick_b=self.pick_b)


def view(store: Store, group_id: Any) -> dict[str, Any]:
    """Values for ``GroupTab.outputs``, by name."""
    gid = str(group_id or "").strip()
    if not gid:
        return {"view": views.render_list(*store.group_stats())}
    try:
        g = load_group(store, gid)
        flat = flat_groups(store, g.samples[0].episode.run_id)
    except RollscopeError as e:  # the id stays in its box: the list, read when the tab opens, leaves the error
        return {"group": gid, "view": views.empty(str(e), "error")}
    ids = [(f"sample {s.episode.sample_index} · {s.episode.id} · reward {s.reward:g}", s.episode.id) for s in g.samples]
    return {"group": gid, "view": views.render(g, flat),
            "pick_a": gr.Dropdown(choices=ids, value=ids[0][1]),
            "pick_b": gr.Dropdown(choices=ids, value=ids[1][1] if len(ids) > 1 else ids[0][1])}


def build(store: Store) -> GroupTab:
    """Lay out the Group tab in the current Blocks context and wire its button."""
    with gr.Row(equal_height=True, elem_classes="rs-idbar"):
        group = gr.Textbox(label="group", placeholder="group id (run:task)", scale=3, max_lines=1,
                           elem_id="rs-group-id")
        show = gr.Button("Show", variant="primary", scale=0, min_width=100, elem_id="rs-group-show")
    with gr.Row(equal_height=True, elem_classes="rs-idbar"):
        pick_a = gr.Dropdown([], label="compare A", scale=2, min_width=200, elem_id="rs-group-a")
        pick_b = gr.Dropdown([], label="with B", scale=2, min_width=200, elem_id="rs-group-b")
        compare = gr.Button("Compare", scale=0, min_width=110, elem_id="rs-group-compare")
    out = html(views.empty(), "rs-group-view", script("open_episode"))  # the list comes when the tab is opened
    tab = GroupTab(group, show, out, pick_a, pick_b, compare)
    shown = tab.outputs
    for trigger in (show.click, group.submit):
        trigger(lambda g: shown.values(**view(store, g)), inputs=[group], outputs=shown.components)
    return tab
