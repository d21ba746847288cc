"""The display limits: how much of one episode the dashboard sends to the browser, in one place.

A record may hold a 50 MB tool answer or a million tokens (the import's one
record limit is ``--max-record-mb``). The views send at most what these
limits allow, so the HTML of the Episode tab, and the server's memory making
it, stay bounded whatever the episode's size; what is left out is said where
it would have been ("… N more characters"), with how to see it whole
(``rollscope show ID``, ``rollscope export --id ID``).

- ``TEXT_CHARS``: characters of one text (a message, a generation, a tool
  call's arguments, env info) sent; the rest is cut.
- ``VIEW_CHARS``: characters of such texts one view (the timeline, a playback
  card) sends in all; once spent, each further text sends ``SPENT_CHARS``.
- ``PROMPT_CHARS``: characters of the prompt a playback card shows (its end,
  where the turn's new text is).
- ``TOKENS_DRAWN``: tokens the token view sends. An episode with more opens
  with the view folded: it sends the first and last ``TOKEN_EDGE`` tokens and
  ``TOKEN_WINDOW`` around each finding's first token (findings in order, while
  ``TOKENS_FOLDED`` lasts), and says what it left out.
- ``ALTERNATIVES_SENT``: top-K alternatives the token view sends for its
  hover (token x K); past it, those of the highest-entropy tokens, and the
  hover of the others says theirs were not sent.
"""

from __future__ import annotations

from dataclasses import dataclass

TEXT_CHARS = 20_000
VIEW_CHARS = 400_000
SPENT_CHARS = 300
PROMPT_CHARS = 400_000
TOKENS_DRAWN = 200_000
TOKENS_FOLDED = 20_000
TOKEN_EDGE = 2_000
TOKEN_WINDOW = 400
ALTERNATIVES_SENT = 60_000


def see_whole(episode_id: str = "", tokens: bool = False) -> str:
    """How to see an episode whole, said where the dashboard leaves part of it out (``tokens``: its tokens)."""
    ep = episode_id or "ID"
    show = f"`rollscope show {ep} --json` prints the whole record" if tokens else f"`rollscope show {ep}` prints every text"
    return f"{show}, `rollscope export --id {ep} -o FILE` writes it to a file"


@dataclass
class Budget:
    """Characters of text a view may still send (``VIEW_CHARS``); each text takes what ``cut`` lets through."""

    left: int = VIEW_CHARS
    cut: int = 0  # characters left out so far

    def allow(self) -> int:
        """Characters the next text may send."""
        return TEXT_CHARS if self.left > 0 else SPENT_CHARS


def cut(text: str, budget: Budget | None = None, limit: int | None = None) -> tuple[str, int]:
    """(the head of ``text`` that is sent, how many characters are left out): at most ``limit`` (by default
    what ``budget`` allows, else ``TEXT_CHARS``); what is sent is taken from ``budget``."""
    if limit is None:
        limit = budget.allow() if budget is not None else TEXT_CHARS
    kept = text if len(text) <= limit else text[:limit]
    if budget is not None:
        budget.left -= len(kept)
        budget.cut += len(text) - len(kept)
    return kept, len(text) - len(kept)


def cut_note(more: int) -> str:
    """What a cut text says at its end (plain text, to be escaped)."""
    return f"… {more:,} more characters not sent to the browser (`rollscope show` prints them)"


def token_windows(n: int, starts: list[int]) -> list[tuple[int, int]] | None:
    """The [start, end) windows of tokens a folded token view sends (see the module's docstring), merged and
    in order; None when the episode's ``n`` tokens are within ``TOKENS_DRAWN`` and all are sent."""
    if n <= TOKENS_DRAWN:
        return None
    wanted = [(0, min(TOKEN_EDGE, n)), (max(n - TOKEN_EDGE, 0), n)]
    spent = sum(b - a for a, b in wanted)
    half = TOKEN_WINDOW // 2
    for s in starts:
        if not 0 <= s < n:
            continue
        a, b = max(0, s - half), min(n, s + half)
        if spent + (b - a) > TOKENS_FOLDED:
            break
        wanted.append((a, b))
        spent += b - a
    merged: list[tuple[int, int]] = []
    for a, b in sorted(wanted):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged
