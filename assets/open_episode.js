// Launch, Step, Compare, Export and Group: an element with data-open (a row or a link) sends {"open": id}
// (and {"turn": k} with data-turn); the app shows that episode in the Episode tab, at that turn.
// A row of Group's list of groups (tr.rs-group-row) opens its group, as its link does, wherever it is clicked.
const openGroup = (row) => { window.location.search = `?group=${encodeURIComponent(row.dataset.group)}`; };
element.addEventListener("click", (event) => {
  const group = event.target.closest && event.target.closest("tr.rs-group-row[data-group]");
  if (group && !event.target.closest("a")) { openGroup(group); return; }
  const el = event.target.closest && event.target.closest("[data-open]");
  if (!el) return;
  event.preventDefault();
  const turn = el.dataset.turn === undefined || el.dataset.turn === "" ? undefined : Number(el.dataset.turn);
  trigger("click", turn === undefined ? { open: el.dataset.open } : { open: el.dataset.open, turn });
});
element.addEventListener("keydown", (event) => {
  const group = event.target.closest && event.target.closest("tr.rs-group-row[data-group]");
  if (group && event.key === "Enter" && !event.target.closest("a")) { openGroup(group); return; }
  const el = event.target.closest && event.target.closest("[data-open]");
  if (el && event.key === "Enter") trigger("click", { open: el.dataset.open });
});
