// Runs on the playback card's element, after tokens.js. On every new card it marks the Episode tab's
// token view (turn k's generated tokens outlined, later turns dimmed) and timeline (later turns
// hidden), and scrolls both to turn k. Those views are re-rendered by other events (opening an
// episode), so it also watches them and marks a fresh view again. The token view keeps the marks and
// draws them on the blocks it draws (tokens.js: tvMark), so a step restyles a few thousand spans at most.
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
const pbScroll = (box, target, offset) => {
  const top = target.getBoundingClientRect().top - box.getBoundingClientRect().top;
  if (Math.abs(top - offset) > 2) box.scrollTop += top - offset;
};
// A view off the page may be in a tab not shown, with no layout to scroll; the scroll waits until the
// view is on screen, then the token view draws the target's block and keeps it in place (tvReveal).
const pbCancelReveal = (view) => {
  if (view && view._pbSeen) view._pbSeen.disconnect();
};
const pbReveal = (view, i, offset) => {
  pbCancelReveal(view);
  const seen = new IntersectionObserver((entries) => {
    if (!entries.some((e) => e.isIntersecting)) return;
    seen.disconnect();
    tvReveal(view, i, offset);
  });
  view._pbSeen = seen;
  seen.observe(view);
};
const pbMarkTokens = (st, scroll) => {
  const view = document.querySelector(PB_TOKVIEW);
  if (!view) return;
  view._pbFor = st;
  const on = pbOnScreen(st);
  tvMark(view, on ? { gs: st.gs, ge: st.ge, cut: st.cut } : null);
  const n = on ? (tvData(view).n || 0) : 0;
  if (scroll && n) {
    const head = view.querySelector(".rs-tokhead");
    pbReveal(view, Math.min(st.gs, n - 1), (head ? head.offsetHeight : 0) + 12);
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
