"""Episode: one episode's header, why it earned its reward, findings, per-turn chart, turn timeline and token view.

Also where a researcher stars, tags and annotates an episode (stored at
once through the store) and asks to fork it at a turn (the app hands the
request to the Step tab; see ``EpisodeTab.wire_fork``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import Store, StoreError

from ..assets import script
from ..gradio_glue import Outputs, event_data, fresh, html
from ..views import charts
from ..views import episode as views
from ..views.html import note
from ..views.outcome import render_outcome
from ..views.tokens import token_view
from . import playback as playback_tab

EMPTY = note("No episode selected: pick a row in Browse, or enter an episode id above.")
CHART_OPEN_TURNS = 6  # the per-turn chart is folded for episodes of this many turns or fewer
HEAT, ENTROPY, MISMATCH, SPECIAL = \
    "logprob heat map", "entropy heat map", "logprob mismatch heat map", "special tokens"


def _star_label(starred: bool) -> str:
    return "★ Starred" if starred else "☆ Star"


@dataclass
class EpisodeTab:
    """The Episode tab's components; ``outputs`` are what ``view`` gives values for."""

    id_box: gr.Textbox
    open_button: gr.Button
    star_button: gr.Button
    tags: gr.Dropdown
    note: gr.Textbox
    save_button: gr.Button
    saved: gr.HTML
    header: gr.HTML
    outcome: gr.HTML  # "Why this reward" (views/outcome.py)
    chart: gr.Plot
    chart_box: gr.Accordion  # folded for short episodes
    findings: gr.HTML
    conversation: gr.HTML
    toggles: gr.CheckboxGroup
    tokens: gr.HTML
    fork_turn: gr.Dropdown
    fork_button: gr.Button
    current: gr.State  # the id of the episode on screen, or None
    starred: gr.State
    playback: playback_tab.PlaybackPanel | None = None  # the playback and re-execution panel, following ``current``

    @property
    def outputs(self) -> Outputs:
        return Outputs(id_box=self.id_box, header=self.header, outcome=self.outcome, findings=self.findings,
                       conversation=self.conversation, tokens=self.tokens, chart=self.chart, chart_box=self.chart_box,
                       current=self.current, starred=self.starred, star_button=self.star_button, tags=self.tags, note=self.note, fork_turn=self.fork_turn,
                       saved=self.saved)

    def wire_fork(self, fn: Callable[[str, int], dict[str, Any]], outputs: Outputs) -> None:
        """Call ``fn(episode_id, turn)`` when the researcher forks, by the button or a timeline "fork here" link.

        ``fn`` returns values for ``outputs`` by name. Nothing happens while no episode is open.
        """

        def from_button(episode_id: str | None, turn: Any) -> Any:
            if not episode_id or turn is None:
                return outputs.skip()
            return outputs.values(**fn(episode_id, int(turn)))

        def from_link(episode_id: str | None, evt: gr.EventData) -> Any:
            turn = event_data(evt).get("fork_turn")
            if not episode_id or turn is None:
                return outputs.skip()
            return outputs.values(**fn(episode_id, int(turn)))

        self.fork_button.click(from_button, inputs=[self.current, self.fork_turn], outputs=outputs.components)
        self.conversation.click(from_link, inputs=[self.current], outputs=outputs.components)


def _tags_update(choices: list[str], value: list[str]) -> gr.Dropdown:
    # Said again in the update so Gradio validates it as a multiselect that takes new tags.
    return gr.Dropdown(choices=choices, value=value, multiselect=True, allow_custom_value=True)


def _blank(header: str, episode_id: str = "") -> dict[str, Any]:
    return {"id_box": episode_id, "header": header, "outcome": "", "findings": "", "conversation": "", "tokens": "",
            "chart": None,
            "chart_box": gr.Accordion(open=False),
            "current": None, "starred": False, "star_button": gr.Button(_star_label(False)),
            "tags": _tags_update([], []), "note": "", "fork_turn": gr.Dropdown(choices=[], value=None), "saved": ""}


def view(store: Store, episode_id: str | None) -> dict[str, Any]:
    """Values for ``EpisodeTab.outputs``, by name, showing ``episode_id`` (a unique prefix is enough)."""
    episode_id = (episode_id or "").strip()
    if not episode_id:
        return _blank(EMPTY)
    try:
        ep = store.get_episode(store.resolve_id(episode_id))
    except StoreError as e:
        return _blank(note(str(e), "error"), episode_id)
    turns = [t.index for t in ep.turns]
    tag_choices = sorted({t for t, _ in store.tag_counts()} | set(ep.tags))
    return {
        "id_box": ep.id,
        "header": views.render_header(ep),
        "outcome": render_outcome(ep),
        "findings": views.render_findings(ep, store.run_level_kinds([ep.run_id]).get(ep.run_id or "")
                                          if ep.run_id else None),
        "conversation": fresh(views.render_conversation(ep)),
        "tokens": fresh(token_view(ep)),
        "chart": charts.turn_chart(ep),
        "chart_box": gr.Accordion(open=ep.n_turns > CHART_OPEN_TURNS),
        "current": ep.id,
        "starred": ep.starred,
        "star_button": gr.Button(_star_label(ep.starred)),
        "tags": _tags_update(tag_choices, list(ep.tags)),
        "note": ep.note,
        "fork_turn": gr.Dropdown(choices=turns, value=turns[-1] if turns else None),
        "saved": "",
    }


def _saved(what: str) -> str:
    return note(f"{what} · saved {time.strftime('%H:%M:%S')}", "info")


def build(store: Store) -> EpisodeTab:
    """Lay out the Episode tab inside the current Blocks context and wire its own events."""
    with gr.Row(equal_height=True, elem_classes="rs-idbar"):
        id_box = gr.Textbox(
            label="Episode id", show_label=False, container=False, placeholder="episode id, or a unique prefix of one",
            scale=3, elem_id="rs-episode-id", max_lines=1,
        )
        open_button = gr.Button("Open", scale=0, min_width=90, variant="primary", elem_id="rs-episode-open")
        star_button = gr.Button(_star_label(False), scale=0, min_width=120, elem_id="rs-star")
    with gr.Row(equal_height=False, elem_classes="rs-ep-top"):
        with gr.Column(scale=3, min_width=520):
            header = html(EMPTY, "rs-episode-header")
        with gr.Column(scale=2, min_width=360):
            outcome = html("", "rs-episode-outcome", script("tokens"))
            findings = html("", "rs-episode-findings", script("tokens"))
            with gr.Accordion("Tags and note", open=False, elem_id="rs-annotate-box"):
                tags = gr.Dropdown([], value=[], multiselect=True, allow_custom_value=True,
                                   label="tags (pick or type + Enter)", elem_id="rs-tags")
                note_box = gr.Textbox(label="note", placeholder="what is interesting here", max_lines=3, elem_id="rs-note")
                with gr.Row(equal_height=True, elem_classes="rs-annotate"):
                    save_button = gr.Button("Save tags & note", scale=0, min_width=180, elem_id="rs-save")
                    saved = html("", "rs-saved")
    token_parts: dict[str, Any] = {}

    def token_column() -> None:
        # Beside the turn card: the token view, where playback outlines the turn's tokens.
        with gr.Row(equal_height=True, elem_classes="rs-viewbar"):
            # As narrow as its word, so the toggles keep one line beside it.
            html('<h4 class="rs-h">Tokens</h4>', scale=0, min_width=0, elem_classes="rs-h-narrow")
            token_parts["toggles"] = gr.CheckboxGroup([HEAT, ENTROPY, MISMATCH, SPECIAL], value=[SPECIAL], show_label=False,
                                                      container=False, elem_id="rs-token-toggles", scale=3)
        token_parts["tokens"] = html("", "rs-episode-tokens", script("tokens"))

    panel = playback_tab.build(store, beside=token_column)
    toggles, tokens = token_parts["toggles"], token_parts["tokens"]
    with gr.Accordion("Per turn: reward, return, findings, tokens, logprob", open=False,
                      elem_id="rs-turn-chart-box") as chart_box:
        chart = gr.Plot(show_label=False, elem_id="rs-turn-chart")
    with gr.Row(equal_height=True, elem_classes="rs-viewbar"):
        html('<h4 class="rs-h">Turn timeline</h4>')
        fork_turn = gr.Dropdown([], value=None, label="turn", show_label=False, container=False, scale=0,
                                min_width=90, elem_id="rs-fork-turn")
        fork_button = gr.Button("Fork from this turn", scale=0, min_width=200, elem_id="rs-fork")
    conversation = html("", "rs-episode-conversation", script("tokens", "fork_link"))
    current = gr.State(None)
    starred = gr.State(False)
    tab = EpisodeTab(id_box, open_button, star_button, tags, note_box, save_button, saved, header, outcome, chart, chart_box,
                     findings, conversation, toggles, tokens, fork_turn, fork_button, current, starred, panel)
    chart_box.expand(None, js=script("resize_charts"))
    panel.wire(current)

    shown = tab.outputs

    def open_typed(episode_id: str) -> list[Any]:
        return shown.values(**view(store, episode_id))

    for trigger in (open_button.click, id_box.submit):
        trigger(open_typed, inputs=[id_box], outputs=shown.components).then(
            None, inputs=[id_box], js=script("set_url"))
    toggles.change(None, inputs=[toggles], js=script("token_toggles", HEAT=HEAT, ENTROPY=ENTROPY, MISMATCH=MISMATCH,
                                                                SPECIAL=SPECIAL))

    starring = Outputs(starred=starred, star_button=star_button, saved=saved, header=header)

    def toggle_star(episode_id: str | None, was: bool) -> list[Any]:
        if not episode_id:
            return starring.values(saved=note("Open an episode first.", "warn"))
        try:
            store.set_starred(episode_id, not was)
            header_html = views.render_header(store.get_episode(episode_id))
        except StoreError as e:
            return starring.values(saved=note(str(e), "error"))
        return starring.values(starred=not was, star_button=gr.Button(_star_label(not was)),
                               saved=_saved("starred" if not was else "unstarred"), header=header_html)

    star_button.click(toggle_star, inputs=[current, starred], outputs=starring.components)
    saving = Outputs(saved=saved, header=header, tags=tags)

    def save(episode_id: str | None, tags_v: list[str] | None, note_v: str | None) -> list[Any]:
        if not episode_id:
            return saving.values(saved=note("Open an episode first.", "warn"))
        try:
            store.set_tags(episode_id, list(tags_v or []))
            store.set_note(episode_id, note_v or "")
            ep = store.get_episode(episode_id)
        except StoreError as e:
            return saving.values(saved=note(str(e), "error"))
        choices = sorted({t for t, _ in store.tag_counts()} | set(ep.tags))
        return saving.values(saved=_saved(f"{len(ep.tags)} tag{'s' if len(ep.tags) != 1 else ''} and note"),
                             header=views.render_header(ep), tags=_tags_update(choices, list(ep.tags)))

    save_button.click(save, inputs=[current, tags, note_box], outputs=saving.components)
    note_box.submit(save, inputs=[current, tags, note_box], outputs=saving.components)
    return tab

