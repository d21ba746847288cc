"""Playback and re-execution, inside the Episode tab.

Playback steps through a stored episode turn by turn: first / previous /
next / last and a turn slider. The card shows turn k as the model met it
(the exact prompt, what it generated, the parsed action, the env's answer,
rewards and findings so far); the timeline below hides later turns and the
token view dims them and outlines turn k's generated tokens. Those two are
restyled in the browser (``PLAYBACK_JS``), never re-rendered: a step sends
one card, however long the episode.

"Re-execute" runs ``engine.replay.replay_stored`` on the episode, stores the
verdict with ``Store.save_replay`` and shows it per turn, with the earlier
re-executions of the same episode.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from engine import Episode, ReplayResult, Store, StoreError, decode, replay_stored

from .. import render_playback as rp
from ..render import TOKEN_JS

# Runs on the card's element. On every new card it marks the Episode tab's
# token view (turn k's generated tokens outlined, later turns dimmed) and
# timeline (later turns hidden), and scrolls both to turn k. Those views
# are re-rendered by other events (opening an episode), so it also watches
# them and marks a fresh view again. Dimming goes by token block (one per
# turn, see render_tokens) so a step touches a few hundred spans, not 32,000.
PLAYBACK_JS = TOKEN_JS + r"""
const PB_TOKVIEW = "#rs-episode-tokens .rs-tokview", PB_CONV = "#rs-episode-conversation .rs-conv";
const pbState = () => {
  const card = element.querySelector(".rs-pb-card");
  if (!card) return null;
  const d = card.dataset;
  return { ep: d.episode, k: +d.k, n: +d.n, gs: +d.gs, ge: +d.ge, cut: +d.cut, follow: d.follow === "1" };
};
const pbOnScreen = (st) => {
  // The views belong to the episode in the id box; a view of another episode
  // (opened a moment before its new card arrives) must not get these marks.
  const box = document.querySelector("#rs-episode-id input, #rs-episode-id textarea");
  return !!st && !!box && box.value === st.ep;
};
const pbIndex = (view) => {
  if (!view._pb) {
    const toks = Array.from(view.querySelectorAll(".rs-tokens .tok"));
    const blocks = [];
    let at = 0;
    view.querySelectorAll(".rs-tokens .rs-tblock").forEach((b) => {
      const n = b.getElementsByClassName("tok").length;
      blocks.push([b, at, at + n]);
      at += n;
    });
    view._pb = { toks, blocks, marked: [], dimmed: [] };
  }
  return view._pb;
};
const pbScroll = (box, target, offset) => {
  const top = target.getBoundingClientRect().top - box.getBoundingClientRect().top;
  if (Math.abs(top - offset) > 2) box.scrollTop += top - offset;
};
// Token blocks off screen have estimated heights (content-visibility) until
// the browser lays them out, so a scroll computed while the view is off the
// page lands elsewhere once it is seen. Scroll when the view is on screen,
// and correct for a few frames while the blocks around the target settle.
const pbCancelReveal = (view) => {
  if (view && view._pbSeen) view._pbSeen.disconnect();
};
const pbReveal = (view, target, offset) => {
  pbCancelReveal(view);
  const seen = new IntersectionObserver((entries) => {
    if (!entries.some((e) => e.isIntersecting)) return;
    seen.disconnect();
    let frames = 0;
    const settle = () => {
      pbScroll(view, target, offset);
      if (++frames < 8) requestAnimationFrame(settle);
    };
    settle();
  });
  view._pbSeen = seen;
  seen.observe(view);
};
const pbMarkTokens = (st, scroll) => {
  const view = document.querySelector(PB_TOKVIEW);
  if (!view) return;
  const ix = pbIndex(view);
  for (const t of ix.marked) t.classList.remove("pb-gen", "pb-gen-first", "pb-after");
  for (const b of ix.dimmed) b.classList.remove("pb-after");
  ix.marked = [];
  ix.dimmed = [];
  view._pbFor = st;
  if (!pbOnScreen(st)) return;
  const n = ix.toks.length;
  for (const [b, a, e] of ix.blocks) {
    if (a >= st.cut) { b.classList.add("pb-after"); ix.dimmed.push(b); }
    else if (e > st.cut) {
      for (let i = st.cut; i < e; i++) { ix.toks[i].classList.add("pb-after"); ix.marked.push(ix.toks[i]); }
    }
  }
  const ge = Math.min(st.ge, n);
  for (let i = st.gs; i < ge; i++) { ix.toks[i].classList.add("pb-gen"); ix.marked.push(ix.toks[i]); }
  if (st.gs < ge) ix.toks[st.gs].classList.add("pb-gen-first");
  const target = ix.toks[Math.min(st.gs, n - 1)];
  if (scroll && target) {
    const head = view.querySelector(".rs-tokhead");
    pbReveal(view, target, (head ? head.offsetHeight : 0) + 12);
  }
};
const pbMarkTimeline = (st, scroll) => {
  const conv = document.querySelector(PB_CONV);
  if (!conv) return;
  conv._pbFor = st;
  const on = pbOnScreen(st);
  let current = null;
  for (const sec of conv.querySelectorAll(":scope > .rs-turn")) {
    const t = Number(sec.id.slice("conv-turn-".length));
    sec.classList.toggle("pb-hidden", on && t > st.k);
    sec.classList.toggle("pb-current", on && t === st.k);
    if (on && t === st.k) current = sec;
  }
  const hidden = on ? st.n - st.k - 1 : 0;
  if (hidden > 0) {
    conv.dataset.pbMore = `Playback is at turn ${st.k}: ${hidden} later turn${hidden > 1 ? "s" : ""} hidden (Last ▶▶ shows them).`;
  } else {
    delete conv.dataset.pbMore;
  }
  if (scroll && current) pbScroll(conv, current, 0);
};
const pbSync = () => {
  const st = pbState();
  element._pbState = st;
  // Only a step moves the views; opening an episode leaves them where the researcher looks.
  const scroll = !!st && st.follow;
  pbMarkTokens(st, scroll);
  pbMarkTimeline(st, scroll);
  pbWatchViews();
};
const pbWatchViews = () => {
  for (const [root, sel, mark] of [["rs-episode-tokens", PB_TOKVIEW, pbMarkTokens], ["rs-episode-conversation", PB_CONV, pbMarkTimeline]]) {
    const el = document.getElementById(root);
    if (!el || el._pbObserved) continue;
    el._pbObserved = true;
    new MutationObserver(() => {
      const view = document.querySelector(sel);
      if (view && view._pbFor !== element._pbState) mark(element._pbState, false);
    }).observe(el, { childList: true, subtree: true });
  }
};
watch("value", pbSync);
// A link the researcher follows (a finding, a turn) wins over a scroll still waiting for the view.
document.addEventListener("click", (event) => {
  if (event.target.closest && event.target.closest("a[data-jump]")) pbCancelReveal(document.querySelector(PB_TOKVIEW));
}, true);
element.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a[data-pb-tok]");
  if (!link) return;
  event.preventDefault();
  const view = document.querySelector(PB_TOKVIEW);
  if (!view) return;
  view.scrollIntoView({ block: "center" });
  pbMarkTokens(element._pbState, true);
});
"""

DECODED_KEPT = 16  # decoded prompts kept per episode

# A turn link in the verdict table moves playback to that turn.
REPLAY_JS = r"""
element.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a[data-pb-turn]");
  if (!link) return;
  event.preventDefault();
  trigger("click", { pb_turn: Number(link.dataset.pbTurn) });
});
"""


@dataclass
class Loaded:
    """An episode being played back, with what its steps reuse."""

    ep: Episode
    tokenizer: Any
    tokenizer_error: str | None
    latest: ReplayResult | None = None
    decoded: dict[int, str] = field(default_factory=dict)  # turn -> tokens[:prompt_len] decoded
    lock: threading.Lock = field(default_factory=threading.Lock)

    def decoded_prompt(self, k: int) -> str | None:
        """``tokens[:prompt_len]`` of turn ``k`` decoded (once: 10 ms for 32,000 tokens, and steps go back and forth)."""
        n = min(max(self.ep.turns[k].prompt_len, 0), len(self.ep.tokens))
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
        from .episode import episode_tokenizer  # episode imports this module to mount it

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
        return rp.render_no_turns(ep)
    k = min(max(k, 0), ep.n_turns - 1)
    prompt = rp.prompt_at(ep, k, loaded.tokenizer, loaded.tokenizer_error, decoded=loaded.decoded_prompt(k))
    previous = loaded.prompt_text(k - 1) if k > 0 else None
    g = ep.turns[k].generation
    # A dump imported without a tokenizer keeps only the generated ids: decode them when we can.
    spoken = (decode(loaded.tokenizer, list(g.token_ids)) if g is not None and not g.text and g.token_ids
              and loaded.tokenizer is not None else None)
    return rp.render_turn(ep, k, prompt, previous, loaded.latest, spoken, follow)


def _fresh(html_text: str) -> str:
    from .episode import fresh

    return fresh(html_text)


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

    def open(self, episode_id: str | None) -> list[Any]:
        """Values for (slider, card, replay) showing ``episode_id`` at its last turn, read fresh from the store."""
        if not episode_id:
            return [_slider(0, 0), rp.render_no_turns(None), ""]
        try:
            loaded = self.episodes.get(episode_id, refresh=True)
        except StoreError as e:
            return [_slider(0, 0), rp.render_no_turns(None, str(e)), ""]
        n = loaded.ep.n_turns
        last = max(n - 1, 0)
        return [_slider(n, last), _fresh(turn_card(loaded, last, follow=False)),
                rp.render_replays(self.episodes.store.replays(episode_id))]

    def step(self, episode_id: str | None, k: Any, how: str) -> list[Any]:
        """Values for (slider, card) after ``how`` (first, prev, next, last, or "at" for ``k`` itself)."""
        if not episode_id:
            return [gr.skip(), rp.render_no_turns(None)]
        try:
            loaded = self.episodes.get(episode_id)
        except StoreError as e:
            return [gr.skip(), rp.render_no_turns(None, str(e))]
        n = loaded.ep.n_turns
        k = int(k or 0)
        target = {"first": 0, "prev": k - 1, "next": k + 1, "last": n - 1}.get(how, k)
        target = min(max(target, 0), max(n - 1, 0))
        return [target, _fresh(turn_card(loaded, target))]

    async def run_replay(self, episode_id: str | None, k: Any) -> list[Any]:
        """Re-execute the episode, store the verdict, and values for (replay, card)."""
        if not episode_id:
            return [rp.render_replays([], error="Open an episode first."), gr.skip()]
        store = self.episodes.store
        try:
            loaded = self.episodes.get(episode_id)
            result = await replay_stored(loaded.ep)
            store.save_replay(result)
        except StoreError as e:
            return [rp.render_replays(store.replays(episode_id), error=str(e)), gr.skip()]
        loaded.latest = result
        card = _fresh(turn_card(loaded, int(k or 0), follow=False)) if loaded.ep.turns else gr.skip()
        return [rp.render_replays(store.replays(episode_id), fresh_run=True), card]

    def wire(self, current: gr.State) -> None:
        """Follow the episode in ``current`` (the Episode tab's id of the episode on screen)."""
        current.change(self.open, inputs=[current], outputs=[self.slider, self.card, self.replay])
        for button, how in ((self.first, "first"), (self.prev, "prev"), (self.next, "next"), (self.last, "last")):
            button.click(lambda e, k, how=how: self.step(e, k, how), inputs=[current, self.slider],
                         outputs=[self.slider, self.card], show_progress="hidden", queue=False)
        # input, not change: change also fires when a button sets the slider,
        # which would render the same card twice.
        self.slider.input(lambda e, k: self.step(e, k, "at")[1], inputs=[current, self.slider], outputs=[self.card],
                          trigger_mode="always_last", show_progress="hidden", queue=False)
        self.reexecute.click(self.run_replay, inputs=[current, self.slider], outputs=[self.replay, self.card])

        def to_turn(episode_id: str | None, evt: gr.EventData) -> list[Any]:
            data = getattr(evt, "_data", None)
            turn = data.get("pb_turn") if isinstance(data, dict) else None
            if turn is None:
                return [gr.skip(), gr.skip()]
            return self.step(episode_id, turn, "at")

        self.replay.click(to_turn, inputs=[current], outputs=[self.slider, self.card], show_progress="hidden")


def _html(value: str, elem_id: str, js_on_load: str | None) -> gr.HTML:
    return gr.HTML(value, elem_id=elem_id, apply_default_css=False, js_on_load=js_on_load)


def build(store: Store) -> PlaybackPanel:
    """Lay out the playback controls, card and re-execution panel in the current Blocks context."""
    with gr.Row(equal_height=True, elem_classes="rs-pb-controls", elem_id="rs-pb-controls"):
        gr.HTML('<h4 class="rs-h">Playback</h4>', apply_default_css=False, js_on_load=None)
        first = gr.Button("◀◀ First", scale=0, min_width=90, size="sm", elem_id="rs-pb-first")
        prev = gr.Button("◀ Prev", scale=0, min_width=90, size="sm", elem_id="rs-pb-prev")
        slider = gr.Slider(0, 1, value=0, step=1, label="turn", show_label=False, container=False, scale=4,
                           min_width=220, interactive=False, buttons=[], elem_id="rs-pb-slider")
        nxt = gr.Button("Next ▶", scale=0, min_width=90, size="sm", elem_id="rs-pb-next")
        last = gr.Button("Last ▶▶", scale=0, min_width=90, size="sm", elem_id="rs-pb-last")
        reexecute = gr.Button("Re-execute", scale=0, min_width=130, size="sm", variant="secondary",
                              elem_id="rs-pb-reexec")
    card = _html(rp.render_no_turns(None), "rs-pb-card", PLAYBACK_JS)
    replay = _html("", "rs-pb-replay", REPLAY_JS)
    return PlaybackPanel(slider, first, prev, nxt, last, reexecute, card, replay, Episodes(store))
