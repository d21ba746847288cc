// Writes ?episode=ID into the address bar without reloading, so the episode on screen can be shared
// or reloaded. Takes the id box's value.
(id) => {
  if (id) {
    const u = new URL(window.location.href);
    u.searchParams.set("episode", id);
    window.history.replaceState(null, "", u);
  }
  return [];
}
