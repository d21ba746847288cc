"""The display limits: an episode with a message of megabytes and hundreds of thousands of tokens opens in views
whose HTML is bounded, whatever its size, and says what it left out."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from dashboard.tabs import playback
from dashboard.views import episode as episode_view
from dashboard.views import limits
from dashboard.views.tokens import token_view
from engine.backends.tokenizers import load_tokenizer
from engine.records.episode import Episode
from tests import tokenview as tv
from tests.synthetic import huge_episode, synthetic_episode

MB = 1_000_000


@pytest.fixture(scope="module")
def tok() -> Any:
    return load_tokenizer(None)


@pytest.fixture(scope="module")
def huge() -> Episode:
    return huge_episode(3 * MB, 300_000)


@pytest.fixture(scope="module")
def huger() -> Episode:
    return huge_episode(6 * MB, 600_000)


def _opened(ep: Episode, tok: Any) -> dict[str, str]:
    """What opening ``ep`` in the Episode tab sends: its views, and the playback card of its first and last turn."""
    loaded = playback.Loaded(ep, tok, None)
    return {
        "header": episode_view.render_header(ep),
        "findings": episode_view.render_findings(ep),
        "conversation": episode_view.render_conversation(ep),
        "tokens": token_view(ep),
        "first card": playback.turn_card(loaded, 0),
        "last card": playback.turn_card(loaded, ep.n_turns - 1),
    }


def test_the_views_of_a_huge_episode_are_bounded_whatever_its_size(huge: Episode, huger: Episode, tok: Any) -> None:
    small = {k: len(v.encode()) for k, v in _opened(huge, tok).items()}
    big = {k: len(v.encode()) for k, v in _opened(huger, tok).items()}
    # Each part well under the 3 MB message alone, and a record twice as big sends no more.
    assert small["conversation"] < 2 * limits.VIEW_CHARS
    assert small["tokens"] < MB
    assert small["first card"] < 2 * limits.VIEW_CHARS and small["last card"] < 2 * limits.PROMPT_CHARS
    assert sum(small.values()) < 3 * MB
    for part, size in big.items():
        assert size < small[part] * 1.05 + 2_000, (part, size, small[part])


def test_a_cut_message_says_how_much_it_left_out_and_never_sends_the_rest(huge: Episode) -> None:
    text = huge.turns[0].observation[0].content
    conversation = episode_view.render_conversation(huge)
    more = len(text) - limits.TEXT_CHARS
    assert f"… {more:,} more characters not sent to the browser" in conversation
    assert len(html.unescape(conversation)) < len(text) // 4
    # Said once above the timeline too, with how to see it whole.
    assert f"rollscope show {huge.id}" in conversation and "characters of this episode" in conversation
    # The first characters are there, as they were.
    assert html.escape(text[:500], quote=True) in conversation


def test_a_small_episode_is_not_cut() -> None:
    ep = synthetic_episode(5)
    conversation = episode_view.render_conversation(ep)
    assert "rs-cut" not in conversation and "not sent to the browser" not in conversation
    meta = tv.payload(token_view(ep))
    assert "win" not in meta and len(meta["ids"]) == ep.n_tokens


def test_a_huge_episode_opens_with_its_token_view_folded_around_its_findings(huge: Episode) -> None:
    out = token_view(huge)
    meta = tv.payload(out)
    n = huge.n_tokens
    sent = sum(b - a for a, b in meta["win"])
    assert len(meta["ids"]) == len(meta["c"]) == sent <= limits.TOKENS_FOLDED + 2 * limits.TOKEN_EDGE
    assert meta["n"] == n and meta["win"][0][0] == 0 and meta["win"][-1][1] == n
    note = re.search(r'<div class="rs-note rs-warn rs-tok-folded">(.*?)</div>', out, re.S)
    assert note is not None
    said = html.unescape(re.sub(r"<[^>]+>", "", note.group(1)))
    assert f"{n:,} tokens" in said and f"{n - sent:,} tokens are left out" in said
    assert f"rollscope show {huge.id} --json" in said
    # Every finding's first token is sent, drawn with its own id and marked.
    ids = huge.tokens.ids.tolist()
    for f in huge.all_findings():
        assert f.token_start is not None
        k = next(sum(b - a for a, b in meta["win"][:w]) + f.token_start - a
                 for w, (a, b) in enumerate(meta["win"]) if a <= f.token_start < b)
        assert meta["ids"][k] == ids[f.token_start]
        assert "tok-flag" in meta["cls"][meta["c"][k]]
        assert f.token_start in meta["starts"]
    # Blocks lie inside the windows, in order; no long context is folded in a folded view.
    assert all(any(a <= s and e <= b for a, b in meta["win"]) for s, e, *_ in meta["blocks"])
    assert meta["fold"] == []


def test_token_windows_keep_to_their_budget() -> None:
    n = limits.TOKENS_DRAWN * 10
    assert limits.token_windows(limits.TOKENS_DRAWN, [5]) is None
    starts = list(range(10_000, n, 10_000))  # far more findings than a folded view sends tokens for
    windows = limits.token_windows(n, starts)
    assert windows is not None
    assert sum(b - a for a, b in windows) <= limits.TOKENS_FOLDED + 2 * limits.TOKEN_EDGE
    covered = [s for s in starts if any(a <= s < b for a, b in windows)]
    # The first findings in order get their tokens, the rest do not; windows are sorted and apart.
    assert covered == starts[:len(covered)] and 0 < len(covered) < len(starts)
    assert all(b < c for (_, b), (c, _) in zip(windows, windows[1:], strict=False))


def test_the_last_card_shows_the_end_of_a_huge_prompt(huge: Episode, tok: Any) -> None:
    loaded = playback.Loaded(huge, tok, None)
    k = huge.n_turns - 1
    prompt = loaded.prompt_text(k)
    assert prompt is not None and len(prompt) > limits.PROMPT_CHARS
    card = playback.turn_card(loaded, k)
    shown = html.unescape(re.sub(r"<[^>]+>", "", re.search(r'<pre class="rs-pb-prompt">(.*?)</pre>', card, re.S)
                                 .group(1)))
    skipped = len(prompt) - limits.PROMPT_CHARS
    assert shown.startswith(f"… {skipped:,} earlier characters not sent")
    assert shown.endswith(prompt[-limits.PROMPT_CHARS:])
