"""Positions a record gives into its own token array, checked against it.

A record names token positions in two places the exports split on:
``prompt_len`` (where the first prompt ends) and each segment's ``[start,
end)``. ``Episode.from_dict`` reads each as an integer; whether it points
inside the episode's ``tokens`` is a question of the whole record, asked here
by every reader of a file (JSONL, Parquet, ``schema --validate``). A position
outside the array would split prompt from response in the wrong place in every
export (verl's ``prompts``/``responses``, the trained tokens counted), so a
file that gives one is refused with the field named. Episodes already stored
are read as they are: refusing them here would hide what is in the database. A file's record whose ``id`` is
empty or blank is refused here too: it names nothing ``show`` or a link can hold.

A turn's own ``prompt_len`` (where its reply begins) must be 0 or more, but
may lie past the end: a turn whose reply verl's final cut removed whole
(``response_length``) was stored so before it was set to the end, and the
views that use it clamp it to the array.
"""

from __future__ import annotations

from ..errors import FormatError
from .episode import Episode


def out_of_bounds(ep: Episode) -> FormatError | None:
    """The first token position in ``ep`` outside ``0..len(ep.tokens)``, as a FormatError naming its field (None
    when every position is inside)."""
    if not ep.id.strip():  # not a position, but what every link to the episode holds
        return FormatError("must not be empty: it names the episode (ls, show and every link use it)", field="id")
    n = len(ep.tokens)
    within = f"must be 0..{n:,} (the episode has {n:,} tokens)"
    if not 0 <= ep.prompt_len <= n:
        return FormatError(f"{within}, got {ep.prompt_len:,}", field="prompt_len")
    for k, t in enumerate(ep.turns):
        if t.prompt_len < 0:
            return FormatError(f"must be 0 or more, got {t.prompt_len:,}", field=f"turns.{k}.prompt_len")
    for k, s in enumerate(ep.segments):
        if not 0 <= s.start <= s.end <= n:
            return FormatError(f"[start, end) {within} with start <= end, got [{s.start:,}, {s.end:,})",
                               field=f"segments.{k}")
    return None


def within_bounds(ep: Episode) -> Episode:
    """``ep`` itself, or the FormatError of ``out_of_bounds`` raised."""
    e = out_of_bounds(ep)
    if e is not None:
        raise e
    return ep
