// The token view's display toggles are classes on its (long-lived) Gradio element, so they survive
// opening another episode and cost no round trip. Takes the checkbox group's values; HEAT, MISMATCH,
// ENTROPY and SPECIAL are the checkboxes' labels, filled in from tabs/episode.py when the script is loaded.
(values) => {
  const el = document.getElementById("rs-episode-tokens");
  if (el) {
    el.classList.toggle("rs-heat", values.includes(HEAT));
    el.classList.toggle("rs-diffheat", values.includes(MISMATCH));
    el.classList.toggle("rs-entheat", values.includes(ENTROPY));
    el.classList.toggle("rs-nospecial", !values.includes(SPECIAL));
  }
  return [];
}
