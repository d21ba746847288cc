// Runs on the token view's (and the timeline's and findings') element: hover text from the view's
// data-meta, and links (data-jump) that scroll to a token or a turn. Listeners sit on the element,
// which outlives each new episode's HTML.
const metaOf = (view) => {
  if (!view._rsMeta) view._rsMeta = JSON.parse(view.dataset.meta || "{}");
  return view._rsMeta;
};
const indexOf = (view, tok) => {
  if (!view._rsIndex) {
    view._rsIndex = new Map();
    view.querySelectorAll(".rs-tokens .tok").forEach((t, i) => view._rsIndex.set(t, i));
  }
  return view._rsIndex.get(tok);
};
const fmt = (x, digits) => (x === null || x === undefined ? "n/a" : x.toFixed(digits));
const describe = (m, i) => {
  let seg = null;
  for (const s of m.seg || []) { if (s[0] <= i && i < s[1]) { seg = s; break; } }
  let text = `#${i} · id ${m.ids[i]} · logprob ${fmt(m.lp[i], 4)} · mask ${m.mask[i]}`;
  text += seg ? (seg[3] === null ? ` · ${seg[2]}` : ` · turn ${seg[3]} · ${seg[2]}`) : "";
  if (m.ver && m.ver[i] >= 0) text += ` · version ${m.ver[i]}`;
  if (m.diff && m.diff[i] !== null && m.diff[i] !== undefined) {
    text += ` · Δ recomputed−rollout ${m.diff[i] >= 0 ? "+" : ""}${m.diff[i].toFixed(4)}`;
  }
  const kinds = (m.find || []).filter((f) => f[0] <= i && i < f[1]).map((f) => f[2]);
  if (kinds.length) text += ` · finding: ${kinds.join(", ")}`;
  return text;
};
element.addEventListener("mouseover", (event) => {
  const tok = event.target.closest && event.target.closest(".rs-tokens .tok");
  if (!tok) return;
  const view = tok.closest(".rs-tokview");
  const i = indexOf(view, tok);
  if (i === undefined) return;
  const text = describe(metaOf(view), i);
  tok.title = text;
  const bar = view.querySelector(".rs-hover");
  if (bar) bar.textContent = text;
});
element.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a[data-jump]");
  if (!link) return;
  // Following the href would let Gradio's router reload the page.
  event.preventDefault();
  const target = document.getElementById(link.dataset.jump);
  if (!target) return;
  const token = target.classList.contains("tok") || target.classList.contains("rs-turn")
    ? target : (target.nextElementSibling || target);
  token.scrollIntoView({ block: "center" });
  token.classList.add("rs-flash");
  setTimeout(() => token.classList.remove("rs-flash"), 1800);
});
