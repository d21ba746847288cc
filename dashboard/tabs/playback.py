"""Playback and re-execution, inside the Episode tab.

Playback steps through a stored episode turn by turn: first / previous /
next / last and a turn slider. The card shows turn k as the model met it
(the exact prompt, what it generated, the parsed action, the env's answer,
rewards and findings so far); the timeline below hides later turns and the
token view dims them and outlines turn k's generated tokens. Those two are
restyled in the browser (``assets/playback.js``), never re-rendered: a step
sends one card, however long the episode.

"Re-execute" runs ``engine.replay_stored`` on the episode, stores the
verdict with ``Store.save_replay`` and shows it per turn, with the earlier
re-executions of the same episode.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from engine import (
    Episode,
    ReplayResult,
    Store,
    StoreError,
    TurnEntropy,
    decode,
    has_entropy,
    prompt_at,
    prompt_tokens,
    replay_stored,
    turn_entropy,
)

from ..assets import script
from ..gradio_glue import Outputs, event_data, fresh, html
from ..views import playback as views
from ..views.alternatives import fork_ids
from ..views.tokens import episode_tokenizer

DECODED_KEPT = 16  # decoded prompts kept per episode


@dataclass
class Loaded:
    """An episode being played back, with what its steps reuse."""

    ep: Episode
    tokenizer: Any
    tokenizer_error: str | None
    latest: ReplayResult | None = None
    decoded: dict[int, str] = field(default_factory=dict)  # turn -> its prompt's tokens decoded
    lock: threading.Lock = field(default_factory=threading.Lock)
    _entropy: tuple[TurnEntropy, ...] | None = None

    def entropy(self, k: int) -> tuple[TurnEntropy | None, dict[int, str]]:
        """Turn ``k``'s mean entropy and forks (``engine.turn_entropy``, computed once for the episode) and the
        texts of the ids its forks show; (None, {}) for an episode without entropy."""
        if not has_entropy(self.ep):
            return None, {}
        with self.lock:
            if self._entropy is None:
                self._entropy = turn_entropy(self.ep)
        te = self._entropy[k]
        ids = fork_ids(te)
        if self.tokenizer is None or not ids:
            return te, {}
        texts = self.tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False,
                                            clean_up_tokenization_spaces=False)
        return te, {i: str(t) for i, t in zip(ids, texts, strict=True)}

    def decoded_prompt(self, k: int) -> str | None:
        """Turn ``k``'s prompt tokens (``engine.prompt_tokens``: the generation prompt included) decoded, once:
        10 ms for 32,000 tokens, and steps go back and forth."""
        n = prompt_tokens(self.ep, k)
        if self.tokenizer is None or not n:
            return None
        with self.lock:
            if k not in self.decoded:
                if len(self.decoded) >= DECODED_KEPT:
                    self.decoded.pop(next(iter(self.decoded)))  # the oldest: a late prompt is 150,000 chars
                self.decoded[k] = decode(self.tokenizer, self.ep.tokens.ids[:n].tolist())
            return self.decoded[k]

    def prompt_text(self, k: int) -> str | None:
        """The prompt text of turn ``k`` as the card shows it (sent text, else decoded ids)."""
        t = self.ep.turns[k]
        return t.prompt_text if t.prompt_text else self.decoded_prompt(k)


class Episodes:
    """The episodes being played back, each loaded once.

    A step must not reload 32,000 tokens from SQLite and decode them again:
    the record is read when an episode is opened (``get(refresh=True)``) and
    steps reuse it. A few recent ones are kept, for several open pages.
    """

    def __init__(self, store: Store, size: int = 8) -> None:
        self.store = store
        self.size = size
        self._items: OrderedDict[str, Loaded] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, episode_id: str, refresh: bool = False) -> Loaded:
        """The loaded episode; raises ``StoreError`` when the store has no such episode."""
        with self._lock:
            hit = self._items.get(episode_id)
            if hit is not None and not refresh:
                self._items.move_to_end(episode_id)
                return hit
        ep = self.store.get_episode(episode_id)
        tok, error = episode_tokenizer(ep)
        stored = self.store.replays(ep.id)
        loaded = Loaded(ep, tok, error, ReplayResult.from_dict(stored[0]) if stored else None)
        with self._lock:
            self._items[episode_id] = loaded
            self._items.move_to_end(episode_id)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return loaded


def turn_card(loaded: Loaded, k: int, follow: bool = True) -> str:
    """The card of turn ``k`` (clamped to the episode's turns); ``follow``: the views scroll to the turn."""
    ep = loaded.ep
    if not ep.turns:
        return views.render_no_turns(ep)
    k = min(max(k, 0), ep.n_turns - 1)
    prompt = prompt_at(ep, k, loaded.tokenizer, loaded.tokenizer_error, decoded=loaded.decoded_prompt(k))
    previous = loaded.prompt_text(k - 1) if k > 0 else None
    g = ep.turns[k].generation
    # A dump imported without a tokenizer keeps only the generated ids: decode them when we can.
    spoken = (decode(loaded.tokenizer, list(g.token_ids)) if g is not None and not g.text and g.token_ids
              and loaded.tokenizer is not None else None)
    entropy, texts = loaded.entropy(k)
    return views.render_turn(ep, k, prompt, previous, loaded.latest, spoken, follow, entropy, texts)


def _slider(n_turns: int, k: int) -> gr.Slider:
    # A slider needs a range: one turn still gets 0..1, greyed out.
    return gr.Slider(minimum=0, maximum=max(n_turns - 1, 1), value=k, step=1, interactive=n_turns > 1)


@dataclass
class PlaybackPanel:
    """The playback controls, the turn card and the re-execution panel."""

    slider: gr.Slider
    first: gr.Button
    prev: gr.Button
    next: gr.Button
    last: gr.Button
    reexecute: gr.Button
    card: gr.HTML
    replay: gr.HTML
    episodes: Episodes
    start_turn: gr.State | None = None  # the turn an episode opens at (a link's &turn=K); its value None: the last

    @property
    def opened(self) -> Outputs:
        """What opening an episode shows (``open``)."""
        return Outputs(slider=self.slider, card=self.card, replay=self.replay)

    @property
    def stepped(self) -> Outputs:
        """What a step shows (``step``)."""
        return Outputs(slider=self.slider, card=self.card)

    @property
    def replayed(self) -> Outputs:
        """What a re-execution shows (``run_replay``)."""
        return Outputs(replay=self.replay, card=self.card)

    def open(self, episode_id: str | None, turn: Any = None) -> list[Any]:
        """Values for ``opened`` showing ``episode_id`` at turn ``turn`` (its last when None or out of range),
        read fresh from the store."""
        return self._open(episode_id, turn)[0]

    def _open(self, episode_id: str | None, turn: Any) -> tuple[list[Any], bool]:
        # ``open``'s values, and whether the episode was read (not a blank or an error card).
        if not episode_id:
            return self.opened.values(slider=_slider(0, 0), card=views.render_no_turns(None), replay=""), False
        try:
            loaded = self.episodes.get(episode_id, refresh=True)
        except StoreError as e:
            return self.opened.values(slider=_slider(0, 0), card=views.render_no_turns(None, str(e)), replay=""), False
        n = loaded.ep.n_turns
        last = max(n - 1, 0)
        k = int(turn) if isinstance(turn, int) and 0 <= turn < n else last
        return self.opened.values(slider=_slider(n, k), card=fresh(turn_card(loaded, k, follow=k != last)),
                                  replay=views.render_replays(self.episodes.store.replays(episode_id))), True

    def follow(self, episode_id: str | None, turn: Any, drawn: str | None) -> list[Any]:
        """``open``'s values and the episode drawn (None for a blank or error card), when the episode on screen changes
        to ``episode_id``; nothing changes when ``drawn`` (the episode the card was last opened on) is that episode
        already.

        A second answer for the same episode, arriving late, would otherwise draw the turn it opens at over a step
        the researcher took since."""
        if episode_id and episode_id == drawn:
            return self.opened.skip() + [gr.skip()]
        values, read = self._open(episode_id, turn)
        return [*values, episode_id if read else None]  # an error card is drawn again by the next answer

    def _step(self, episode_id: str | None, k: Any, how: str) -> dict[str, Any]:
        if not episode_id:
            return {"card": views.render_no_turns(None)}
        try:
            loaded = self.episodes.get(episode_id)
        except StoreError as e:
            return {"card": views.render_no_turns(None, str(e))}
        n = loaded.ep.n_turns
        k = int(k or 0)
        target = {"first": 0, "prev": k - 1, "next": k + 1, "last": n - 1}.get(how, k)
        target = min(max(target, 0), max(n - 1, 0))
        return {"slider": target, "card": fresh(turn_card(loaded, target))}

    def step(self, episode_id: str | None, k: Any, how: str) -> list[Any]:
        """Values for ``stepped`` after ``how`` (first, prev, next, last, or "at" for ``k`` itself)."""
        return self.stepped.values(**self._step(episode_id, k, how))

    async def run_replay(self, episode_id: str | None, k: Any) -> list[Any]:
        """Re-execute the episode, store the verdict, and values for ``replayed``."""
        if not episode_id:
            return self.replayed.values(replay=views.render_replays([], error="Open an episode first."))
        store = self.episodes.store
        try:
            loaded = self.episodes.get(episode_id)
            result = await replay_stored(loaded.ep)
            store.save_replay(result)
        except StoreError as e:
            return self.replayed.values(replay=views.render_replays(store.replays(episode_id), error=str(e)))
        loaded.latest = result
        card = fresh(turn_card(loaded, int(k or 0), follow=False)) if loaded.ep.turns else gr.skip()
        return self.replayed.values(replay=views.render_replays(store.replays(episode_id), fresh_run=True), card=card)

    def wire(self, current: gr.State) -> None:
        """Follow the episode in ``current`` (the Episode tab's id of the episode on screen)."""
        drawn = gr.State(None)  # the id of the episode whose card ``follow`` drew last
        opened = self.opened + Outputs(drawn=drawn)
        if self.start_turn is None:
            current.change(lambda e, was: self.follow(e, None, was), inputs=[current, drawn],
                           outputs=opened.components)
        else:
            current.change(self.follow, inputs=[current, self.start_turn, drawn], outputs=opened.components)
        stepped = self.stepped
        for button, how in ((self.first, "first"), (self.prev, "prev"), (self.next, "next"), (self.last, "last")):
            button.click(lambda e, k, how=how: self.step(e, k, how), inputs=[current, self.slider],
                         outputs=stepped.components, show_progress="hidden", queue=False)
        # input, not change: change also fires when a button sets the slider,
        # which would render the same card twice.
        self.slider.input(lambda e, k: self._step(e, k, "at")["card"], inputs=[current, self.slider],
                          outputs=[self.card], trigger_mode="always_last", show_progress="hidden", queue=False)
        self.reexecute.click(self.run_replay, inputs=[current, self.slider], outputs=self.replayed.components)

        def to_turn(episode_id: str | None, evt: gr.EventData) -> list[Any]:
            turn = event_data(evt).get("pb_turn")
            if turn is None:
                return stepped.skip()
            return self.step(episode_id, turn, "at")

        self.replay.click(to_turn, inputs=[current], outputs=stepped.components, show_progress="hidden")


def build(store: Store, beside: Callable[[], Any] | None = None) -> PlaybackPanel:
    """Lay out the playback controls, card and re-execution panel in the current Blocks context; ``beside``,
    when given, lays out what sits in a column to the right of the card (the Episode tab's token view)."""
    with gr.Row(equal_height=True, elem_classes="rs-pb-controls", elem_id="rs-pb-controls"):
        html('<h4 class="rs-h">Playback</h4>')
        first = gr.Button("◀◀ First", scale=0, min_width=90, size="sm", elem_id="rs-pb-first")
        prev = gr.Button("◀ Prev", scale=0, min_width=90, size="sm", elem_id="rs-pb-prev")
        slider = gr.Slider(0, 1, value=0, step=1, label="turn", show_label=False, container=False, scale=4,
                           min_width=220, interactive=False, buttons=[], elem_id="rs-pb-slider")
        nxt = gr.Button("Next ▶", scale=0, min_width=90, size="sm", elem_id="rs-pb-next")
        last = gr.Button("Last ▶▶", scale=0, min_width=90, size="sm", elem_id="rs-pb-last")
        reexecute = gr.Button("Re-execute", scale=0, min_width=130, size="sm", variant="secondary",
                              elem_id="rs-pb-reexec")
    with gr.Row(equal_height=False, elem_classes="rs-pb-pair"):
        with gr.Column(scale=1, min_width=420):
            card = html(views.render_no_turns(None), "rs-pb-card", script("tokens", "playback"))
            replay = html("", "rs-pb-replay", script("replay_turns"))
        if beside is not None:
            with gr.Column(scale=1, min_width=420):
                beside()
    return PlaybackPanel(slider, first, prev, nxt, last, reexecute, card, replay, Episodes(store), gr.State(None))
