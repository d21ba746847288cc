"""Episode: one episode's header, findings, per-turn chart, turn timeline and token view.

Also where a researcher stars, tags and annotates an episode (stored at
once through the store) and asks to fork it at a turn (the app hands the
request to the Step tab; see ``EpisodeTab.wire_fork``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import Episode, Store, StoreError, tokenizers

from .. import charts, render

EMPTY = render.render_message("No episode selected: pick a row in Browse, or enter an episode id above.")
HEAT, MISMATCH, SPECIAL = "logprob heat map", "logprob mismatch heat map", "special tokens"

# Writes ?episode=ID into the address bar without reloading, so the episode
# on screen can be shared or reloaded. Takes the id box's value.
SET_URL_JS = """
(id) => {
  if (id) {
    const u = new URL(window.location.href);
    u.searchParams.set("episode", id);
    window.history.replaceState(null, "", u);
  }
  return [];
}
"""

# The token view's display toggles are classes on its (long-lived) Gradio
# element, so they survive opening another episode and cost no round trip.
TOGGLES_JS = f"""
(values) => {{
  const el = document.getElementById("rs-episode-tokens");
  if (el) {{
    el.classList.toggle("rs-heat", values.includes("{HEAT}"));
    el.classList.toggle("rs-diffheat", values.includes("{MISMATCH}"));
    el.classList.toggle("rs-nospecial", !values.includes("{SPECIAL}"));
  }}
  return [];
}}
"""

# A "fork here" link in the timeline sends its turn to the server.
FORK_JS = render.TOKEN_JS + r"""
element.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a[data-fork]");
  if (!link) return;
  event.preventDefault();
  trigger("click", { fork_turn: Number(link.dataset.fork) });
});
"""

def episode_tokenizer(ep: Episode) -> tuple[Any, str | None]:
    """(the tokenizer an episode's ids are shown with, None), or (None, why); loaded once per process.

    An import that names no tokenizer is shown with the embedded one, and the views say so; the checks
    (``tokenizers.for_episode``) do not judge such ids.
    """
    return tokenizers.get(tokenizers.spec_of(ep))


def token_view(ep: Episode) -> str:
    """The token view of an episode, with texts from its own tokenizer when it loads."""
    tok, error = episode_tokenizer(ep)
    if tok is None:
        return render.render_tokens(ep, None, set(), tokenizer_error=error)
    texts = render.decode_token_texts(tok, ep.tokens.ids.tolist())
    return render.render_tokens(ep, texts, render.special_token_ids(tok))


_renders = itertools.count()


def fresh(html_text: str) -> str:
    """``html_text`` wrapped in an element whose tag name is new at every call.

    Gradio's HTML component updates its content by diffing the old DOM
    against the new one node by node, which for a 32,000-token view costs
    seconds of script. When the top element's tag differs, it replaces the
    subtree in one native operation instead; a never-repeated custom tag
    makes that always so. (Custom elements are inline; ``.rs-fresh`` makes
    them blocks.)
    """
    n = next(_renders)
    return f'<rs-v{n} class="rs-fresh">{html_text}</rs-v{n}>'


def _star_label(starred: bool) -> str:
    return "★ Starred" if starred else "☆ Star"


@dataclass
class EpisodeTab:
    """The Episode tab's components; ``outputs`` is the order ``view`` returns values in."""

    id_box: gr.Textbox
    open_button: gr.Button
    star_button: gr.Button
    tags: gr.Dropdown
    note: gr.Textbox
    save_button: gr.Button
    saved: gr.HTML
    header: gr.HTML
    chart: gr.Plot
    findings: gr.HTML
    conversation: gr.HTML
    toggles: gr.CheckboxGroup
    tokens: gr.HTML
    fork_turn: gr.Dropdown
    fork_button: gr.Button
    current: gr.State  # the id of the episode on screen, or None
    starred: gr.State
    playback: Any = None  # the playback and re-execution panel (tabs/playback.py), following ``current``

    @property
    def outputs(self) -> list[Any]:
        return [self.id_box, self.header, self.findings, self.conversation, self.tokens, self.chart, self.current,
                self.starred, self.star_button, self.tags, self.note, self.fork_turn, self.saved]

    def wire_fork(self, fn: Callable[[str, int], Any], outputs: list[Any]) -> None:
        """Call ``fn(episode_id, turn)`` when the researcher forks, by the button or a timeline "fork here" link.

        ``fn``'s return value goes to ``outputs`` (a Gradio event handler's
        contract). Nothing happens while no episode is open.
        """
        skip = [gr.skip()] * len(outputs)

        def from_button(episode_id: str | None, turn: Any) -> Any:
            if not episode_id or turn is None:
                return skip if len(outputs) != 1 else gr.skip()
            return fn(episode_id, int(turn))

        def from_link(episode_id: str | None, evt: gr.EventData) -> Any:
            data = getattr(evt, "_data", None) or {}
            turn = data.get("fork_turn") if isinstance(data, dict) else None
            if not episode_id or turn is None:
                return skip if len(outputs) != 1 else gr.skip()
            return fn(episode_id, int(turn))

        self.fork_button.click(from_button, inputs=[self.current, self.fork_turn], outputs=outputs)
        self.conversation.click(from_link, inputs=[self.current], outputs=outputs)


def _tags_update(choices: list[str], value: list[str]) -> gr.Dropdown:
    # Said again in the update so Gradio validates it as a multiselect that takes new tags.
    return gr.Dropdown(choices=choices, value=value, multiselect=True, allow_custom_value=True)


def _blank(header: str, episode_id: str = "") -> list[Any]:
    return [episode_id, header, "", "", "", None, None, False, gr.Button(_star_label(False)), _tags_update([], []),
            "", gr.Dropdown(choices=[], value=None), ""]


def view(store: Store, episode_id: str | None) -> list[Any]:
    """Values for ``EpisodeTab.outputs`` showing ``episode_id`` (a unique prefix is enough)."""
    episode_id = (episode_id or "").strip()
    if not episode_id:
        return _blank(EMPTY)
    try:
        ep = store.get_episode(store.resolve_id(episode_id))
    except StoreError as e:
        return _blank(render.render_message(str(e), "error"), episode_id)
    turns = [t.index for t in ep.turns]
    tag_choices = sorted({t for t, _ in store.tag_counts()} | set(ep.tags))
    return [
        ep.id,
        render.render_header(ep),
        render.render_findings(ep, store.run_level_kinds([ep.run_id]).get(ep.run_id or "") if ep.run_id else None),
        fresh(render.render_conversation(ep)),
        fresh(token_view(ep)),
        charts.turn_chart(ep),
        ep.id,
        ep.starred,
        gr.Button(_star_label(ep.starred)),
        _tags_update(tag_choices, list(ep.tags)),
        ep.note,
        gr.Dropdown(choices=turns, value=turns[-1] if turns else None),
        "",
    ]


def _saved(what: str) -> str:
    return render.render_message(f"{what} · saved {time.strftime('%H:%M:%S')}", "info")


def _html(value: str, elem_id: str, js_on_load: str | None = None) -> gr.HTML:
    # No default prose CSS (it restyles <pre>, <dl>, <details>) and no click
    # listener round-trips to the server unless the script asks for one.
    return gr.HTML(value, elem_id=elem_id, apply_default_css=False, js_on_load=js_on_load)


def build(store: Store) -> EpisodeTab:
    """Lay out the Episode tab inside the current Blocks context and wire its own events."""
    with gr.Row(equal_height=True, elem_classes="rs-idbar"):
        id_box = gr.Textbox(
            label="Episode id", show_label=False, container=False, placeholder="episode id, or a unique prefix of one",
            scale=3, elem_id="rs-episode-id", max_lines=1,
        )
        open_button = gr.Button("Open", scale=0, min_width=90, variant="primary", elem_id="rs-episode-open")
        star_button = gr.Button(_star_label(False), scale=0, min_width=120, elem_id="rs-star")
    with gr.Row(equal_height=True, elem_classes="rs-annotate"):
        tags = gr.Dropdown([], value=[], multiselect=True, allow_custom_value=True, label="tags (pick or type + Enter)",
                           scale=2, min_width=220, elem_id="rs-tags")
        note = gr.Textbox(label="note", placeholder="what is interesting here", scale=3, min_width=260, max_lines=3,
                          elem_id="rs-note")
        with gr.Column(scale=0, min_width=190, elem_classes="rs-save-col"):
            save_button = gr.Button("Save tags & note", min_width=180, elem_id="rs-save")
            saved = _html("", "rs-saved")
    header = _html(EMPTY, "rs-episode-header")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3, min_width=420):
            chart = gr.Plot(show_label=False, elem_id="rs-turn-chart")
        with gr.Column(scale=2, min_width=360):
            findings = _html("", "rs-episode-findings", render.TOKEN_JS)
    # Imported here: playback reuses this module's tokenizer cache and fresh().
    from . import playback as playback_tab

    panel = playback_tab.build(store)
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=420):
            with gr.Row(equal_height=True, elem_classes="rs-viewbar"):
                gr.HTML('<h4 class="rs-h">Turn timeline</h4>', apply_default_css=False, js_on_load=None)
                fork_turn = gr.Dropdown([], value=None, label="turn", show_label=False, container=False, scale=0,
                                        min_width=90, elem_id="rs-fork-turn")
                fork_button = gr.Button("Fork from this turn", scale=0, min_width=200, elem_id="rs-fork")
            conversation = _html("", "rs-episode-conversation", FORK_JS)
        with gr.Column(scale=1, min_width=420):
            with gr.Row(equal_height=True, elem_classes="rs-viewbar"):
                gr.HTML('<h4 class="rs-h">Tokens</h4>', apply_default_css=False, js_on_load=None)
                toggles = gr.CheckboxGroup([HEAT, MISMATCH, SPECIAL], value=[SPECIAL], show_label=False,
                                           container=False, elem_id="rs-token-toggles", scale=3)
            tokens = _html("", "rs-episode-tokens", render.TOKEN_JS)
    current = gr.State(None)
    starred = gr.State(False)
    tab = EpisodeTab(id_box, open_button, star_button, tags, note, save_button, saved, header, chart, findings,
                     conversation, toggles, tokens, fork_turn, fork_button, current, starred, panel)
    panel.wire(current)

    def open_typed(episode_id: str) -> list[Any]:
        return view(store, episode_id)

    for trigger in (open_button.click, id_box.submit):
        trigger(open_typed, inputs=[id_box], outputs=tab.outputs).then(None, inputs=[id_box], js=SET_URL_JS)
    toggles.change(None, inputs=[toggles], js=TOGGLES_JS)

    def toggle_star(episode_id: str | None, was: bool) -> list[Any]:
        if not episode_id:
            return [gr.skip(), gr.skip(), render.render_message("Open an episode first.", "warn"), gr.skip()]
        try:
            store.set_starred(episode_id, not was)
            header_html = render.render_header(store.get_episode(episode_id))
        except StoreError as e:
            return [gr.skip(), gr.skip(), render.render_message(str(e), "error"), gr.skip()]
        return [not was, gr.Button(_star_label(not was)), _saved("starred" if not was else "unstarred"), header_html]

    star_button.click(toggle_star, inputs=[current, starred], outputs=[starred, star_button, saved, header])

    def save(episode_id: str | None, tags_v: list[str] | None, note_v: str | None) -> list[Any]:
        if not episode_id:
            return [render.render_message("Open an episode first.", "warn"), gr.skip(), gr.skip()]
        try:
            store.set_tags(episode_id, list(tags_v or []))
            store.set_note(episode_id, note_v or "")
            ep = store.get_episode(episode_id)
        except StoreError as e:
            return [render.render_message(str(e), "error"), gr.skip(), gr.skip()]
        choices = sorted({t for t, _ in store.tag_counts()} | set(ep.tags))
        return [_saved(f"{len(ep.tags)} tag{'s' if len(ep.tags) != 1 else ''} and note"), render.render_header(ep),
                _tags_update(choices, list(ep.tags))]

    save_button.click(save, inputs=[current, tags, note], outputs=[saved, header, tags])
    note.submit(save, inputs=[current, tags, note], outputs=[saved, header, tags])
    return tab

