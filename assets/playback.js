// Runs on the playback card's element, after tokens.js. On every new card it marks the Episode tab's
// token view (turn k's generated tokens outlined, later turns dimmed) and timeline (later turns
// hidden), and scrolls both to turn k. Those views are re-rendered by other events (opening an
// episode), so it also watches them and marks a fresh view again. Dimming goes by token block (one per
// turn, see views/tokens.py) so a step touches a few hundred spans, not 32,000.
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
