"""Episode: one episode's header, conversation and token view."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine.errors import RollscopeError, StoreError
from engine.factory import load_tokenizer
from engine.records import Episode
from engine.store import Store

from .. import render

EMPTY = render.render_message("No episode selected: pick a row in Browse, or enter an episode id above.")

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

# Links in the conversation (data-jump="turn-3", "tok-120") scroll the token
# view to their target. Following the href itself would let Gradio's router
# reload the page and lose the episode.
JUMP_JS = """
element.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-jump]");
  if (!link) return;
  event.preventDefault();
  const target = document.getElementById(link.dataset.jump);
  if (!target) return;
  const token = target.classList.contains("tok") ? target : target.nextElementSibling || target;
  token.scrollIntoView({ block: "center", behavior: "smooth" });
  token.classList.add("rs-flash");
  setTimeout(() => token.classList.remove("rs-flash"), 1800);
});
"""

_tokenizers: dict[str | None, tuple[Any, str | None]] = {}
_tokenizers_lock = threading.Lock()


def tokenizer_spec(ep: Episode) -> str | None:
    """The ``load_tokenizer`` spec of the tokenizer an episode was made with (None = embedded)."""
    spec = ep.tokenizer.strip()
    return None if spec.lower() in ("", "smollm2") else spec


def get_tokenizer(spec: str | None) -> tuple[Any, str | None]:
    """(tokenizer, None), or (None, why) when it cannot be loaded; cached per spec, failures too.

    Failures are cached because a missing tokenizer stays missing while the
    server runs, and each attempt can take seconds.
    """
    with _tokenizers_lock:
        if spec not in _tokenizers:
            try:
                _tokenizers[spec] = (load_tokenizer(spec), None)
            except RollscopeError as e:
                _tokenizers[spec] = (None, str(e))
        return _tokenizers[spec]


def token_view(ep: Episode) -> str:
    """The token view of an episode, with texts from its own tokenizer when it loads."""
    tok, error = get_tokenizer(tokenizer_spec(ep))
    if tok is None:
        return render.render_tokens(ep, None, set(), tokenizer_error=error)
    texts = render.decode_token_texts(tok, ep.tokens.ids.tolist())
    return render.render_tokens(ep, texts, render.special_token_ids(tok))


@dataclass
class EpisodeTab:
    """The Episode tab's components; ``outputs`` is the order ``view`` returns values in."""

    id_box: gr.Textbox
    open_button: gr.Button
    header: gr.HTML
    conversation: gr.HTML
    tokens: gr.HTML
    current: gr.State

    @property
    def outputs(self) -> list[Any]:
        return [self.id_box, self.header, self.conversation, self.tokens, self.current]


def view(store: Store, episode_id: str | None) -> list[Any]:
    """Values for ``EpisodeTab.outputs`` showing ``episode_id`` (a unique prefix is enough)."""
    episode_id = (episode_id or "").strip()
    if not episode_id:
        return ["", EMPTY, "", "", None]
    try:
        ep = store.get_episode(store.resolve_id(episode_id))
    except StoreError as e:
        return [episode_id, render.render_message(str(e), "error"), "", "", None]
    return [ep.id, render.render_header(ep), render.render_conversation(ep), token_view(ep), ep.id]


def _html(value: str, elem_id: str, js_on_load: str | None = None) -> gr.HTML:
    # No default prose CSS (it restyles <pre>, <dl>, <details>) and no click
    # listener round-trips to the server.
    return gr.HTML(value, elem_id=elem_id, apply_default_css=False, js_on_load=js_on_load)


def build(store: Store) -> EpisodeTab:
    """Lay out the Episode tab inside the current Blocks context and wire its own events."""
    with gr.Row(equal_height=False, elem_classes="rs-idbar"):
        id_box = gr.Textbox(
            label="Episode id", show_label=False, container=False, placeholder="episode id, or a unique prefix of one",
            scale=4, elem_id="rs-episode-id", max_lines=1,
        )
        open_button = gr.Button("Open", scale=0, min_width=110, variant="primary", elem_id="rs-episode-open")
    header = _html(EMPTY, "rs-episode-header")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=420):
            gr.Markdown("#### Conversation")
            conversation = _html("", "rs-episode-conversation", JUMP_JS)
        with gr.Column(scale=1, min_width=420):
            gr.Markdown("#### Tokens")
            tokens = _html("", "rs-episode-tokens")
    current = gr.State(None)
    tab = EpisodeTab(id_box, open_button, header, conversation, tokens, current)

    def open_typed(episode_id: str) -> list[Any]:
        return view(store, episode_id)

    open_button.click(open_typed, inputs=[id_box], outputs=tab.outputs).then(None, inputs=[id_box], js=SET_URL_JS)
    id_box.submit(open_typed, inputs=[id_box], outputs=tab.outputs).then(None, inputs=[id_box], js=SET_URL_JS)
    return tab
