// The timeline: a "fork here" link (data-fork) sends {"fork_turn": N} to the server. Loaded after
// tokens.js, on the same element.
element.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a[data-fork]");
  if (!link) return;
  event.preventDefault();
  trigger("click", { fork_turn: Number(link.dataset.fork) });
});
