// Browse's table. Header click: sort; row click or Enter: open. A click with a modifier (or the
// middle button) on the id link is left to the browser, which opens the ?episode= link in a new tab.
element.addEventListener("click", (event) => {
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
