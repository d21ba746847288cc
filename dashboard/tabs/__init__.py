"""One module per dashboard tab; each exposes ``build(store)`` returning its components."""
