// Browse's table. Header click: sort; row click or Enter: open. A click with a modifier (or the
// middle button) on the id link is left to the browser, which opens the ?episode= link in a new tab.
// Ticked rows are kept across redraws of the table (paging, sorting, refreshes). The bar above the
// table acts on them: two of them, and "Compare ticked" opens ?compare=A,B; Tag, Untag, Star, Unstar
// and Export send {bulk, ids, tag, format} to the server, which does it and draws the table again
// (an export's file is then downloaded: see DOWNLOAD_JS in tabs/browse.py). The group column links to ?group=.
const picked = [];
const syncPicks = () => {
  const boxes = [...element.querySelectorAll("input.rs-pick")];
  boxes.forEach((box) => { if (box.checked !== picked.includes(box.dataset.id)) box.checked = picked.includes(box.dataset.id); });
  const all = element.querySelector("input.rs-pick-all");
  const every = boxes.length > 0 && boxes.every((b) => picked.includes(b.dataset.id));
  if (all && all.checked !== every) all.checked = every;
  // Changed only when it differs: the observer below sees this element's own edits too.
  const set = (el, prop, value) => { if (el && el[prop] !== value) el[prop] = value; };
  set(element.querySelector(".rs-picked-n"), "textContent", `${picked.length} ticked`);
  const compare = element.querySelector("button.rs-compare-picked");
  set(compare, "disabled", picked.length !== 2);
  set(compare, "textContent", picked.length <= 2 ? `Compare ticked (${picked.length} of 2)` : "Compare: tick exactly 2");
  element.querySelectorAll("button[data-bulk], button.rs-unpick").forEach((b) => set(b, "disabled", picked.length === 0));
};
new MutationObserver(() => syncPicks()).observe(element, { childList: true, subtree: true });
element.addEventListener("click", (event) => {
  const all = event.target.closest("input.rs-pick-all");
  if (all) {
    const ids = [...element.querySelectorAll("input.rs-pick")].map((b) => b.dataset.id);
    if (all.checked) ids.forEach((id) => { if (!picked.includes(id)) picked.push(id); });
    else ids.forEach((id) => { const at = picked.indexOf(id); if (at >= 0) picked.splice(at, 1); });
    syncPicks();
    return;
  }
  const box = event.target.closest("input.rs-pick");
  if (box) {
    const at = picked.indexOf(box.dataset.id);
    if (at >= 0) picked.splice(at, 1); else picked.push(box.dataset.id);
    syncPicks();
    return;
  }
  if (event.target.closest("button.rs-compare-picked")) {
    if (picked.length === 2) window.location.search = `?compare=${encodeURIComponent(picked[0])},${encodeURIComponent(picked[1])}`;
    return;
  }
  if (event.target.closest("button.rs-unpick")) { picked.splice(0, picked.length); syncPicks(); return; }
  const action = event.target.closest("button[data-bulk]");
  if (action) {
    const tag = (element.querySelector("input.rs-bulk-tag") || {}).value || "";
    const format = (element.querySelector("select.rs-bulk-format") || {}).value || "jsonl";
    if (action.dataset.bulk === "export") {  // what download_new.js (after the server's answer) compares with
      const old = document.querySelector('#rs-bulk-file a[download], #rs-bulk-file a[href*="file="]');
      const info = document.querySelector("#rs-browse-info");
      window.rsBrowseExport = { href: old ? old.href : null, message: info ? info.innerHTML : "" };
    }
    trigger("click", { bulk: action.dataset.bulk, ids: [...picked], tag, format });
    return;
  }
  if (event.target.closest(".rs-pickbar")) return;  // the tag box and the format menu
  if (event.target.closest("a.rs-group-link")) return;
  const th = event.target.closest("th[data-sort]");
  if (th) { trigger("click", { sort: th.dataset.sort }); return; }
  const row = event.target.closest("tr[data-id]");
  if (!row) return;
  if (event.target.closest("a") && (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0)) return;
  event.preventDefault();
  element.querySelectorAll("tr.rs-selected").forEach((r) => r.classList.remove("rs-selected"));
  row.classList.add("rs-selected");
  trigger("click", { open: row.dataset.id });
});
element.addEventListener("keydown", (event) => {
  if (event.target.closest && event.target.closest("input.rs-bulk-tag")) {
    if (event.key === "Enter") element.querySelector("button[data-bulk=tag]")?.click();
    return;
  }
  const row = event.target.closest && event.target.closest("tr[data-id]");
  if (row && event.key === "Enter") trigger("click", { open: row.dataset.id });
});
