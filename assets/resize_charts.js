// Plotly lays a chart out in a hidden tab at its default 700 px width; once a tab shows, a resize event
// fits its charts to their panels (the charts are responsive to the window).
() => {
  requestAnimationFrame(() => window.dispatchEvent(new Event("resize")));
  return [];
}
