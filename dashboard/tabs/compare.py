"""Compare: two episodes side by side, aligned by turn, with the first divergence marked.

Pick them by id (a unique prefix is enough); "B ← A's parent" fills in the
episode A was forked from. Other tabs prefill it through a
``{"a", "b", "at"}`` request (Step's "Compare with parent"), and
``/?compare=A,B`` opens a pair. Token diff aligns A's tokens with B's, or
with A's own conversation laid down by another preset (its recorded
generations replayed through that loop), and marks what differs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import (
    AUTO,
    PRESET_CHOICES,
    RollscopeError,
    Store,
    compare,
    episode_tokenizer,
    laid_down_ending,
    retokenized,
    token_diff,
    token_parting,
)

from ..assets import script
from ..gradio_glue import Outputs, html
from ..views import compare as views
from ..views import tokendiff as token_views
from ..views.tokens import decode_token_texts

AGAINST_B = "episode B"
AGAINST = [AGAINST_B] + [f"A under {p}" for p in PRESET_CHOICES if p != AUTO]


@dataclass
class CompareTab:
    a: gr.Textbox
    b: gr.Textbox
    run: gr.Button
    swap: gr.Button
    parent: gr.Button
    view: gr.HTML
    against: gr.Dropdown
    tokens_run: gr.Button
    tokens: gr.HTML

    @property
    def outputs(self) -> Outputs:
        return Outputs(a=self.a, b=self.b, view=self.view, tokens=self.tokens)


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
    # The parting token is read with A's tokenizer (the two share their prompt, so their vocabulary).
    tokenizer, _ = episode_tokenizer(ep_a)
    parting = token_parting(ep_a, ep_b, tokenizer)
    # A token diff drawn for an earlier pair does not describe this one.
    return {"a": ep_a.id, "b": ep_b.id, "view": views.render_comparison(compare(ep_a, ep_b), parting),
            "tokens": token_views.empty()}


def token_view(store: Store, a: Any, b: Any, against: Any) -> str:
    """The token diff of A against B, or against A's conversation under the preset ``against`` names."""
    a_id, b_id = str(a or "").strip(), str(b or "").strip()
    if not a_id:
        return token_views.empty("Type A's id first.", "warn")
    preset = str(against or AGAINST_B).removeprefix("A under ") if against != AGAINST_B else None
    if preset is None and not b_id:
        return token_views.empty("Type B's id, or diff A against a preset.", "warn")
    try:
        ep_a = store.get_episode(store.resolve_id(a_id))
        tok_a, why = episode_tokenizer(ep_a)
        if tok_a is None:
            return token_views.empty(f"A: {why}", "error")
        if preset is None:
            ep_b = store.get_episode(store.resolve_id(b_id))
            tok_b, why = episode_tokenizer(ep_b)
            if tok_b is None:
                return token_views.empty(f"B: {why}", "error")
            label = ep_b.id
        else:
            ep_b = asyncio.run(retokenized(ep_a, preset=preset, tokenizer=tok_a))
            tok_b, label = tok_a, f"A under {preset}"
        d = token_diff(ep_a, ep_b, tok_a, tok_b)
    except RollscopeError as e:
        return token_views.empty(str(e), "error")
    texts_a = decode_token_texts(tok_a, ep_a.tokens.ids.tolist())
    texts_b = decode_token_texts(tok_b, ep_b.tokens.ids.tolist())
    return token_views.render(d, texts_a, texts_b, label, laid_down_ending(ep_a, ep_b) if preset is not None else "")


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
    with gr.Row(equal_height=True, elem_classes="rs-idbar"):
        against = gr.Dropdown(AGAINST, value=AGAINST_B, label="token diff: A against", scale=2, min_width=200,
                              elem_id="rs-compare-against")
        tokens_run = gr.Button("Token diff", scale=0, min_width=130, elem_id="rs-compare-tokens-run")
    tokens = html(token_views.empty(), "rs-compare-tokens")
    out = html(views.empty(), "rs-compare-view", script("open_episode"))
    tab = CompareTab(a, b, run, swap, parent, out, against, tokens_run, tokens)
    shown = tab.outputs
    tokens_run.click(lambda x, y, z: token_view(store, x, y, z), inputs=[a, b, against], outputs=[tokens])

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
