// Browse's table. Header click: sort; row click or Enter: open. A click with a modifier (or the
// middle button) on the id link is left to the browser, which opens the ?episode= link in a new tab.
// Ticked rows (kept across redraws of the table): two of them, and "Compare ticked" opens ?compare=A,B.
// The group column links to ?group=.
const picked = [];
const syncPicks = () => {
  element.querySelectorAll("input.rs-pick").forEach((box) => { box.checked = picked.includes(box.dataset.id); });
  const button = element.querySelector("button.rs-compare-picked");
  if (button) {  // changed only when it differs: the observer below sees this element's own edits too
    const label = `Compare ticked (${picked.length} of 2)`;
    if (button.disabled !== (picked.length !== 2)) button.disabled = picked.length !== 2;
    if (button.textContent !== label) button.textContent = label;
  }
};
new MutationObserver(() => syncPicks()).observe(element, { childList: true, subtree: true });
element.addEventListener("click", (event) => {
  const box = event.target.closest("input.rs-pick");
  if (box) {
    const at = picked.indexOf(box.dataset.id);
    if (at >= 0) picked.splice(at, 1); else picked.push(box.dataset.id);
    while (picked.length > 2) picked.shift();
    syncPicks();
    return;
  }
  if (event.target.closest("button.rs-compare-picked")) {
    if (picked.length === 2) window.location.search = `?compare=${encodeURIComponent(picked[0])},${encodeURIComponent(picked[1])}`;
    return;
  }
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
  const row = event.target.closest && event.target.closest("tr[data-id]");
  if (row && event.key === "Enter") trigger("click", { open: row.dataset.id });
});
