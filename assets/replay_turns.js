// The re-execution verdict table: a turn link (data-pb-turn) sends {"pb_turn": N}; playback moves
// to that turn.
element.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a[data-pb-turn]");
  if (!link) return;
  event.preventDefault();
  trigger("click", { pb_turn: Number(link.dataset.pbTurn) });
});
