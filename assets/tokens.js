// The token view (views/tokens.py), drawn from its data-meta: an empty block of estimated height per
// block of tokens, the blocks near the screen filled with token spans and emptied again when they leave
// it; long context folded behind a control; the hover text; links (data-jump) that scroll to a token or
// a turn, drawing its block first. Runs on the token view's element and on the elements whose links lead
// into it (findings, timeline, playback card); listeners sit on the element, which outlives each new
// episode's HTML, and what a view holds lives on the view.
const TV_MARGIN = "150% 0px"; // blocks within 1.5 view heights above or below the view are drawn
const TV_SETTLE_FRAMES = 8; // frames a jump keeps its token in place while the blocks around it are drawn
const metaOf = (view) => {
  if (!view._rsMeta) view._rsMeta = JSON.parse(view.dataset.meta || "{}");
  return view._rsMeta;
};
// The index among the tokens sent of token i: i itself, or in a folded view (data-meta's win: the
// [start, end] parts sent) its place among them, -1 for a token not sent.
const tvLocal = (win) => {
  if (!win) return (i) => i;
  const before = [];
  let sum = 0;
  for (const [a, b] of win) { before.push(sum); sum += b - a; }
  return (i) => {
    let lo = 0, hi = win.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (win[mid][0] > i) hi = mid - 1;
      else if (win[mid][1] <= i) lo = mid + 1;
      else return before[mid] + i - win[mid][0];
    }
    return -1;
  };
};
// Per-token arrays (of the tokens sent) from the runs in data-meta, made once per view.
const tvData = (view) => {
  if (view._rsData) return view._rsData;
  const m = metaOf(view), n = m.n || 0, sent = (m.ids || []).length;
  const mask = new Uint8Array(sent);
  for (const [a, b] of m.mask || []) mask.fill(1, a, b);
  const dense = (runs) => {
    const out = new Float64Array(sent).fill(NaN);
    for (const [a, values] of runs) out.set(values, a);
    return out;
  };
  const segAt = new Map();
  for (const s of m.seg || []) segAt.set(s[0], s);
  view._rsData = {
    m, n, mask, lp: dense(m.lp || []), diff: m.diff ? dense(m.diff) : null, at: tvLocal(m.win),
    ent: m.ent ? dense(m.ent) : null, alt: new Map((m.alt || []).map((row) => [row[0], row])),
    altText: new Map((m.aid || []).map((id, k) => [id, m.atx[k]])),
    text: m.vtx ? new Map(m.vid.map((id, k) => [id, m.vtx[k]])) : null, over: new Map(m.over || []),
    shown: new Map(), segAt, turnAt: new Map((m.turns || []).map(([t, i]) => [i, t])),
    turnStart: new Map(m.turns || []), starts: new Set(m.starts || []),
  };
  return view._rsData;
};
// The run of `runs` ([start, end, ...], sorted, disjoint) holding token i, or null.
const runAt = (runs, i) => {
  let lo = 0, hi = (runs || []).length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (runs[mid][0] > i) hi = mid - 1;
    else if (runs[mid][1] <= i) lo = mid + 1;
    else return runs[mid];
  }
  return null;
};
const fmt = (x, digits) => (x === null || x === undefined || Number.isNaN(x) ? "n/a" : x.toFixed(digits));
const describe = (d, i) => {
  const m = d.m, seg = runAt(m.seg, i), j = d.at(i);
  let text = `#${i} · id ${m.ids[j]} · logprob ${fmt(d.lp[j], 4)} · mask ${d.mask[j]}`;
  text += seg ? (seg[3] === null ? ` · ${seg[2]}` : ` · turn ${seg[3]} · ${seg[2]}`) : "";
  const ver = runAt(m.ver, j);
  if (ver) text += ` · version ${ver[2]}`;
  if (d.diff && !Number.isNaN(d.diff[j])) {
    text += ` · Δ recomputed−rollout ${d.diff[j] >= 0 ? "+" : ""}${d.diff[j].toFixed(4)}`;
  }
  if (d.ent && !Number.isNaN(d.ent[j])) {
    text += ` · entropy ${d.ent[j].toFixed(3)} nats${m.est ? " (estimate, lower bound)" : ""}`;
  }
  const found = runAt(m.find, i);
  if (found) text += ` · finding: ${found[2]}`;
  return text;
};
// A probability as views/alternatives.py prints it.
const tvPercent = (p) => (p === null || Number.isNaN(p) ? "?" : p >= 0.01 ? `${Math.round(p * 100)}%` : "<1%");
// The top K recorded at token i as [text, class] pieces, the sampled one marked; [] where none were recorded,
// a note where they were not sent (over the display limit).
const tvAlternatives = (d, i) => {
  const m = d.m, row = d.alt.get(i), id = m.ids[d.at(i)];
  const text = (t) => JSON.stringify(d.altText.has(t) ? d.altText.get(t) : (d.text && d.text.get(t)) ?? `id ${t}`);
  if (!row) {
    const known = d.ent && !Number.isNaN(d.ent[d.at(i)]);
    return known && m.altcut ? [[`top K not sent for this token (${m.altcut.toLocaleString("en-US")} tokens' are over `
      + "the display limit: rollscope show --json prints them)", "rs-alt-none"]] : [];
  }
  const [, ids, lps] = row;
  const out = [[`top ${ids.length}:`, "rs-alt-k"]];
  ids.forEach((t, r) => {
    const p = lps[r] === null ? NaN : Math.exp(lps[r]);
    out.push([`${text(t)} ${tvPercent(p)}${t === id ? " ✓ sampled" : ""}`, t === id ? "rs-alt rs-alt-sampled" : "rs-alt"]);
  });
  if (!ids.includes(id)) {
    const lp = d.lp[d.at(i)];
    out.push([`sampled ${text(id)} ${tvPercent(Number.isNaN(lp) ? NaN : Math.exp(lp))}, not in the top ${ids.length}`,
      "rs-alt rs-alt-sampled"]);
  }
  return out;
};
const tvShowAlternatives = (view, d, i) => {
  const box = view.querySelector(".rs-hover-alts");
  if (!box) return "";
  const frag = document.createDocumentFragment();
  const pieces = tvAlternatives(d, i);
  for (const [text, cls] of pieces) {
    const span = document.createElement("span");
    span.className = cls;
    span.textContent = text;
    frag.append(span);
  }
  box.textContent = "";
  box.append(frag);
  return pieces.map(([text]) => text).join(" ");
};
// What a token shows: its text with newlines drawn (↵) and kept, "◦" for a piece of a character, or its id.
const tvShown = (d, i) => {
  const id = d.m.ids[d.at(i)];
  if (!d.text) return String(id);
  const own = d.over.get(i);
  if (own === undefined && d.shown.has(id)) return d.shown.get(id);
  const raw = own === undefined ? d.text.get(id) : own;
  const out = raw ? raw.replace(/\r/g, "␍").replace(/\n/g, "↵\n") : "◦";
  if (own === undefined) d.shown.set(id, out);
  return out;
};
const tvLabel = (seg) => (seg[3] === null ? seg[2] : `T${seg[3]} ${seg[2]}`);
// Playback's marks (see playback.js): turn k's generated tokens, and dimmed what follows its cut.
const tvClass = (d, i, pb, blockStart) => {
  let c = d.m.cls[d.m.c[d.at(i)]];
  if (pb) {
    if (i >= pb.cut && blockStart < pb.cut) c += " pb-after"; // a block wholly after the cut is dimmed whole
    if (i >= pb.gs && i < pb.ge) c += i === pb.gs ? " pb-gen pb-gen-first" : " pb-gen";
  }
  return c;
};
const tvDraw = (view, st, k) => {
  const d = st.d, [a, b] = d.m.blocks[k], div = st.divs[k], pb = view._pbMarks;
  const frag = document.createDocumentFragment();
  for (let i = a; i < b; i++) {
    const seg = d.segAt.get(i);
    if (seg && seg[2] !== "tail") { // a tail is one newline; its label would be clutter
      const mark = document.createElement("span");
      mark.className = `seg-mark seg-${String(seg[2]).toLowerCase().replace(/[^a-z0-9_-]/g, "-")}`;
      mark.dataset.label = tvLabel(seg);
      frag.append(mark);
    }
    if (d.starts.has(i)) { // its own element: a finding may start on a turn's first token
      const anchor = document.createElement("a");
      anchor.className = "tok-anchor";
      anchor.id = `tok-${i}`;
      frag.append(anchor);
    }
    const el = document.createElement("span");
    el.className = tvClass(d, i, pb, a) + (view._rsLinked === i ? " rs-linked" : "");
    el.setAttribute("data-i", i);
    const turn = d.turnAt.get(i);
    if (turn !== undefined) el.id = `turn-${turn}`;
    el.textContent = tvShown(d, i);
    frag.append(el);
  }
  div.textContent = "";
  div.style.height = "";
  div.append(frag);
  st.drawn[k] = 1;
};
const tvEmpty = (st, k, height) => {
  st.h[k] = height;
  st.divs[k].style.height = `${height}px`;
  st.divs[k].textContent = "";
  st.drawn[k] = 0;
};
// Lines the block's tokens take at `cols` characters a line. The view wraps anywhere and keeps white
// space, so a line of L characters takes ceil(L / cols) lines; a segment's label counts as characters too.
const tvLines = (d, a, b, cols) => {
  let lines = 0, cur = 0;
  const wrapped = (n) => Math.max(1, Math.ceil(n / cols));
  for (let i = a; i < b; i++) {
    const seg = d.segAt.get(i);
    if (seg && seg[2] !== "tail") cur += Math.ceil(tvLabel(seg).length * 0.8) + 2;
    const s = tvShown(d, i);
    let nl = s.indexOf("\n");
    if (nl < 0) {
      cur += d.text ? s.length : s.length + 1; // ids stand apart
      continue;
    }
    let from = 0;
    while (nl >= 0) {
      lines += wrapped(cur + nl - from);
      cur = 0;
      from = nl + 1;
      nl = s.indexOf("\n", from);
    }
    cur = s.length - from;
  }
  return cur || !lines ? lines + wrapped(cur) : lines;
};
const tvEstimate = (st, k) => {
  const [a, b] = st.d.m.blocks[k];
  return Math.ceil(tvLines(st.d, a, b, st.cols) * st.lh);
};
// Character width and line height of the view's text, from a probe token.
const tvMetrics = (view, box) => {
  const probe = document.createElement("span");
  probe.className = "tok tok-ctx";
  probe.textContent = "0".repeat(64);
  box.append(probe);
  const ch = probe.getBoundingClientRect().width / 64;
  probe.remove();
  const style = getComputedStyle(box);
  const lh = parseFloat(style.lineHeight) || 1.75 * parseFloat(style.fontSize) || 20;
  return { ch: ch || 8, lh };
};
const tvFoldText = (st, f) => {
  const [a, b, label] = st.d.m.fold[f];
  const count = (b - a).toLocaleString("en-US");
  return st.open[f] ? `▾ fold these ${count} tokens again (${label})` : `▸ unfold ${count} tokens of long context (${label})`;
};
const tvSetFold = (st, f, open) => {
  st.open[f] = open;
  st.controls[f].querySelector("button").textContent = tvFoldText(st, f);
  st.controls[f].classList.toggle("rs-fold-open", open);
  for (let k = 0; k < st.divs.length; k++) {
    if (st.foldOf[k] !== f) continue;
    if (!open && st.drawn[k]) tvEmpty(st, k, st.divs[k].offsetHeight);
    st.divs[k].classList.toggle("rs-folded", !open);
  }
};
// The empty blocks, each as tall as its tokens are estimated to be, and the folds' controls; once the
// view has a width (a view in a hidden tab has none until it is shown).
const tvLayout = (view, st) => {
  const box = view.querySelector(".rs-tokens");
  const width = box ? box.clientWidth : 0;
  if (!width || Math.abs(width - st.width) < 2) return;
  const first = !st.width;
  st.width = width;
  if (first) Object.assign(st, tvMetrics(view, box));
  st.cols = Math.max(8, Math.floor(width / st.ch));
  if (!first) { // a new width: every empty block's height is estimated again
    for (let k = 0; k < st.divs.length; k++) if (!st.drawn[k]) tvEmpty(st, k, tvEstimate(st, k));
    return;
  }
  const m = st.d.m, nb = m.blocks.length;
  st.drawn = new Uint8Array(nb);
  st.h = new Float64Array(nb);
  st.foldOf = new Int32Array(nb).fill(-1);
  st.open = m.fold.map(() => false);
  st.controls = [];
  const frag = document.createDocumentFragment();
  st.gaps = [];
  // A folded view's tokens not sent: a note where they lie, instead of their blocks.
  const gap = (a, b) => {
    const div = document.createElement("div");
    div.className = "rs-tok-gap";
    div.dataset.a = a;
    div.dataset.b = b;
    const what = document.createElement("span");
    what.textContent = `⋯ tokens ${a.toLocaleString("en-US")}–${(b - 1).toLocaleString("en-US")} `
      + `(${(b - a).toLocaleString("en-US")}) folded: not sent to the browser (the note above says how to see them)`;
    const asked = document.createElement("span");
    asked.className = "rs-gap-asked";
    div.append(what, asked);
    st.gaps.push(div);
    frag.append(div);
  };
  let f = 0, end = 0;
  for (let k = 0; k < nb; k++) {
    const [a, b, cont] = m.blocks[k];
    if (m.win && a > end) gap(end, a);
    end = b;
    while (f < m.fold.length && m.fold[f][1] <= a) f++;
    if (f < m.fold.length && m.fold[f][0] <= a && b <= m.fold[f][1]) {
      st.foldOf[k] = f;
      if (m.fold[f][0] === a) {
        const control = document.createElement("div");
        control.className = "rs-fold";
        const button = document.createElement("button");
        button.type = "button";
        button.dataset.fold = f;
        control.append(button);
        st.controls[f] = control;
        frag.append(control);
      }
    }
    const div = document.createElement("div");
    div.className = `rs-tblock${cont ? " rs-cont" : ""}${st.foldOf[k] >= 0 ? " rs-folded" : ""}`;
    if (view._pbMarks && a >= view._pbMarks.cut) div.classList.add("pb-after");
    div.dataset.a = a;
    div.dataset.b = b;
    div._k = k;
    st.h[k] = tvEstimate(st, k);
    div.style.height = `${st.h[k]}px`;
    st.divs.push(div);
    frag.append(div);
  }
  if (m.win && end < st.d.n) gap(end, st.d.n);
  st.controls.forEach((_, g) => { st.controls[g].querySelector("button").textContent = tvFoldText(st, g); });
  box.append(frag);
  st.io = new IntersectionObserver((entries) => tvSeen(view, st, entries), { root: view, rootMargin: TV_MARGIN });
  st.divs.forEach((div) => st.io.observe(div));
};
// Blocks come near the view (drawn) or leave it (emptied, keeping their height). A block drawn wholly
// above the view's top moves what is on screen by the change in its height; the scroll takes it back.
const tvSeen = (view, st, entries) => {
  if (view._rs !== st) return;
  const show = [], hide = [];
  for (const e of entries) {
    const k = e.target._k;
    if (e.isIntersecting && !st.drawn[k] && (st.foldOf[k] < 0 || st.open[st.foldOf[k]])) show.push(k);
    else if (!e.isIntersecting && st.drawn[k]) hide.push(k);
  }
  const heights = hide.map((k) => st.divs[k].offsetHeight);
  hide.forEach((k, j) => tvEmpty(st, k, heights[j]));
  const top = view.getBoundingClientRect().top;
  const above = show.map((k) => st.divs[k].getBoundingClientRect().bottom <= top + 1);
  show.forEach((k) => tvDraw(view, st, k));
  let shift = 0;
  show.forEach((k, j) => { if (above[j]) shift += st.divs[k].offsetHeight - st.h[k]; });
  if (shift) view.scrollTop += shift;
};
// The view's drawing state, made (and laid out, once it has a width) the first time anything asks.
const tvState = (view) => {
  if (!view || !view.dataset.meta) return null;
  if (view._rs) return view._rs;
  const st = { d: tvData(view), divs: [], drawn: new Uint8Array(0), width: 0, settling: 0 };
  view._rs = st;
  tvLayout(view, st);
  const box = view.querySelector(".rs-tokens");
  if (box) {
    st.ro = new ResizeObserver(() => { if (view._rs === st) tvLayout(view, st); });
    st.ro.observe(box);
  }
  return st;
};
const tvForget = (view) => {
  const st = view && view._rs;
  if (!st) return;
  if (st.io) st.io.disconnect();
  if (st.ro) st.ro.disconnect();
  view._rs = null;
};
const tvBlockOf = (st, i) => {
  const blocks = st.d.m.blocks;
  let lo = 0, hi = blocks.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (blocks[mid][0] <= i) lo = mid; else hi = mid - 1;
  }
  return lo;
};
// Scroll the view so token i sits `top` px below its top edge (centered without `top`), drawing its
// block (unfolding it) first; for a few frames, while the blocks around it are drawn, keep it there.
// Returns the token's element, or null.
const tvReveal = (view, i, top) => {
  const st = tvState(view);
  if (st && !st.divs.length) tvLayout(view, st);
  if (!st || !st.divs.length || !(i >= 0 && i < st.d.n)) return null;
  if (st.d.at(i) < 0) return tvRevealGap(view, st, i);
  const k = tvBlockOf(st, i);
  if (st.foldOf[k] >= 0 && !st.open[st.foldOf[k]]) tvSetFold(st, st.foldOf[k], true);
  for (const j of [k - 1, k, k + 1]) {
    if (j >= 0 && j < st.divs.length && !st.drawn[j] && (st.foldOf[j] < 0 || st.open[st.foldOf[j]])) tvDraw(view, st, j);
  }
  const place = () => {
    const tok = st.divs[k].querySelector(`[data-i="${i}"]`);
    if (!tok) return null;
    const v = view.getBoundingClientRect(), r = tok.getBoundingClientRect();
    const want = top === undefined ? (v.height - r.height) / 2 : top;
    const delta = r.top - v.top - want;
    if (Math.abs(delta) > 2) view.scrollTop += delta;
    return tok;
  };
  const settle = ++st.settling;
  const stop = () => { st.settling++; };
  view.addEventListener("wheel", stop, { once: true, passive: true });
  let frames = 0;
  const again = () => {
    if (view._rs !== st || st.settling !== settle) return;
    place();
    if (++frames < TV_SETTLE_FRAMES) requestAnimationFrame(again);
    else view.removeEventListener("wheel", stop);
  };
  requestAnimationFrame(again);
  return place();
};
// A token a folded view did not send: its gap says so, scrolled into the view.
const tvRevealGap = (view, st, i) => {
  const gap = st.gaps.find((g) => Number(g.dataset.a) <= i && i < Number(g.dataset.b));
  if (!gap) return null;
  gap.querySelector(".rs-gap-asked").textContent = ` · token ${i.toLocaleString("en-US")}, asked for here, is `
    + "in this folded part";
  view.scrollTop += gap.getBoundingClientRect().top - view.getBoundingClientRect().top - view.clientHeight / 3;
  return gap;
};
// Playback's marks on the view: {gs, ge, cut} or null. Blocks after the cut are dimmed whole; tokens
// drawn now are restyled, tokens drawn later get the marks as they are drawn.
const tvMark = (view, marks) => {
  view._pbMarks = marks;
  const st = tvState(view);
  if (!st) return;
  st.divs.forEach((div, k) => {
    const a = st.d.m.blocks[k][0];
    div.classList.toggle("pb-after", !!marks && a >= marks.cut);
    if (!st.drawn[k]) return;
    for (const el of div.getElementsByClassName("tok")) {
      const i = Number(el.dataset.i);
      el.className = tvClass(st.d, i, marks, a) + (view._rsLinked === i ? " rs-linked" : "");
    }
  });
};
const tvViewIn = (root) => root.querySelector(".rs-tokview[data-meta]");
// A link to a token (?episode=ID&token=N, the finding links' own) is followed once per page, when that
// episode's view first appears: the token is drawn, scrolled to and marked.
const tvFollowLink = (view) => {
  const q = new URLSearchParams(window.location.search);
  const id = q.get("episode"), want = q.get("token");
  if (!id || want === null || window._rsLinkFollowed || !(view.dataset.episode || "").startsWith(id)) return;
  window._rsLinkFollowed = true;
  const i = Number(want);
  view._rsLinked = i; // kept through redraws and playback's marks
  requestAnimationFrame(() => {
    view.scrollIntoView({ block: "start" });
    const tok = tvReveal(view, i);
    if (tok) { tok.classList.add("rs-linked"); tvFlash(tok); }
  });
};
// A new episode's view: the previous one's observers go, the new one is laid out.
const tvAdopt = () => {
  const view = tvViewIn(element);
  if (view === element._rsView) return;
  tvForget(element._rsView);
  element._rsView = view;
  if (view) { tvState(view); tvFollowLink(view); }
};
new MutationObserver(tvAdopt).observe(element, { childList: true });
tvAdopt();
element.addEventListener("mouseover", (event) => {
  const tok = event.target.closest && event.target.closest(".rs-tokens .tok[data-i]");
  if (!tok) return;
  const view = tok.closest(".rs-tokview");
  if (!view) return;
  const d = tvData(view), i = Number(tok.dataset.i);
  const text = describe(d, i);
  const alts = tvShowAlternatives(view, d, i);
  tok.title = alts ? `${text}\n${alts}` : text;
  const bar = view.querySelector(".rs-hover");
  if (bar) bar.textContent = text;
});
const tvFlash = (el) => {
  el.classList.add("rs-flash");
  setTimeout(() => el.classList.remove("rs-flash"), 1800);
};
element.addEventListener("click", (event) => {
  const fold = event.target.closest && event.target.closest(".rs-fold button[data-fold]");
  if (fold) {
    const st = tvState(fold.closest(".rs-tokview"));
    const f = Number(fold.dataset.fold);
    if (st) tvSetFold(st, f, !st.open[f]);
    return;
  }
  const link = event.target.closest && event.target.closest("a[data-jump]");
  if (!link) return;
  // Following the href would let Gradio's router reload the page.
  event.preventDefault();
  const jump = link.dataset.jump;
  const token = /^(turn|tok)-(\d+)$/.exec(jump);
  const view = link.closest(".rs-tokview") || tvViewIn(document);
  if (token && view) { // a token, or a turn's first: its block may not be drawn
    const st = tvState(view);
    const i = st && (token[1] === "turn" ? st.d.turnStart.get(Number(token[2])) : Number(token[2]));
    if (i !== undefined && i !== null) {
      view.scrollIntoView({ block: "nearest" });
      const tok = tvReveal(view, i);
      if (tok) { tvFlash(tok); return; }
    }
  }
  const target = document.getElementById(jump);
  if (!target) return;
  target.scrollIntoView({ block: "center" });
  tvFlash(target);
});
