// Launch, Step, Compare and Export: an element with data-open (a row or a link) sends {"open": id};
// the app shows that episode in the Episode tab.
element.addEventListener("click", (event) => {
  const el = event.target.closest && event.target.closest("[data-open]");
  if (!el) return;
  event.preventDefault();
  trigger("click", { open: el.dataset.open });
});
element.addEventListener("keydown", (event) => {
  const el = event.target.closest && event.target.closest("[data-open]");
  if (el && event.key === "Enter") trigger("click", { open: el.dataset.open });
});
