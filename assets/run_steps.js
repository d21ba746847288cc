// The Runs tab's step table: a row (click or Enter) sends {"step": N}; the app shows that step's
// episodes in Browse.
element.addEventListener("click", (event) => {
  const row = event.target.closest && event.target.closest("tr[data-step]");
  if (!row) return;
  event.preventDefault();
  trigger("click", { step: Number(row.dataset.step) });
});
element.addEventListener("keydown", (event) => {
  const row = event.target.closest && event.target.closest("tr[data-step]");
  if (row && event.key === "Enter") trigger("click", { step: Number(row.dataset.step) });
});
