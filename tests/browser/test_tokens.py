"""The token view of a 128,000-token, 120-turn episode in a real browser: drawn a block at a time, long context
folded, and scrolling, hover and jump-to-turn landing on the right token."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dashboard.views.tokens import decode_token_texts
from engine.backends.tokenizers import load_tokenizer
from engine.records.episode import Episode
from engine.store import Store
from tests.browser.conftest import serve
from tests.synthetic import long_episode

TOKENS = "#rs-episode-tokens"
VIEW = f"{TOKENS} .rs-tokview"


@dataclass(frozen=True)
class Site:
    url: str
    episode: Episode
    texts: list[str]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    db = tmp_path_factory.mktemp("tokens") / "rollscope.db"

    def seed() -> tuple[Episode, list[str]]:
        tok = load_tokenizer(None)
        ep = long_episode(tok, n_tokens=128_000, n_turns=120, tools=40)
        store = Store(db)
        store.save_episode(ep)
        store.close()
        return ep, decode_token_texts(tok, ep.tokens.ids.tolist())

    with ThreadPoolExecutor(max_workers=1) as pool:  # Playwright may run a loop in this thread
        ep, texts = pool.submit(seed).result()
    with serve(db) as url:
        yield Site(url, ep, texts)


def _shown(text: str) -> str:
    """A token's text as the view draws it."""
    return text.replace("\r", "␍").replace("\n", "↵\n") if text else "◦"


# The token drawn nearest the middle of the view (a line there may be short or empty): a few points around it.
_CENTER_JS = f"""() => {{
    const v = document.querySelector('{VIEW}'), r = v.getBoundingClientRect();
    for (const dy of [0, 14, -14, 28, -28, 42, -42, 56, -56]) {{
        for (const dx of [40, 120, 240]) {{
            const el = document.elementFromPoint(r.left + dx, r.top + r.height / 2 + dy);
            const tok = el && el.closest('.tok[data-i]');
            if (tok) {{
                const b = tok.getBoundingClientRect();
                return {{i: Number(tok.dataset.i), text: tok.textContent, x: b.left + b.width / 2, y: b.top + b.height / 2}};
            }}
        }}
    }}
    return null;
}}"""


def _token_at_center(page: Any) -> dict[str, Any]:
    """The token drawn at the middle of the view, once the blocks there are drawn."""
    return dict(page.wait_for_function(_CENTER_JS).json_value())


def _in_view(page: Any, selector: str) -> bool:
    return bool(page.evaluate(f"""() => {{
        const t = document.querySelector('{selector}'), v = document.querySelector('{VIEW}');
        if (!t) return false;
        const a = t.getBoundingClientRect(), b = v.getBoundingClientRect();
        return a.height > 0 && a.top >= b.top - 1 && a.bottom <= b.bottom + 1;
    }}"""))


@pytest.mark.browser
def test_a_128k_token_episode_scrolls_hovers_and_jumps(page: Any, site: Site, screenshots: Path) -> None:
    ep = site.episode
    n = ep.n_tokens
    ids = ep.tokens.ids.tolist()
    page.goto(f"{site.url}/?episode={ep.id}")
    page.locator(f"{TOKENS} .rs-tokens .tok").first.wait_for(state="visible", timeout=60_000)
    assert n >= 128_000

    # Drawn a block at a time: a few thousand spans, not 128,000.
    drawn = page.locator(f"{TOKENS} .rs-tokens .tok").count()
    assert 0 < drawn < 8_000

    # The system prompt's tool schemas are folded behind one control, and unfold with one click.
    summary = page.locator(f"{TOKENS} .rs-tok-summary").inner_text()
    assert "tokens of long context folded" in summary
    fold = page.locator(f"{TOKENS} .rs-fold button").first
    assert fold.inner_text().startswith("▸ unfold")
    hidden = page.evaluate(f"() => document.querySelectorAll('{TOKENS} .rs-tblock.rs-folded').length")
    assert hidden > 0
    fold.click()
    page.wait_for_function(f"() => !document.querySelector('{TOKENS} .rs-tblock.rs-folded')")
    assert fold.inner_text().startswith("▾ fold")
    tools_tok = next(i for i, t in enumerate(site.texts) if "tools" in t and i > 200)
    page.locator(f'{TOKENS} .tok[data-i="{tools_tok}"]').wait_for(state="attached")
    fold.click()
    page.wait_for_function(f"() => document.querySelectorAll('{TOKENS} .rs-tblock.rs-folded').length === {hidden}")

    # Scrolled anywhere, the token in the middle of the view is drawn with its own text, and hovering it
    # names that token.
    height = page.evaluate(f"() => document.querySelector('{VIEW}').scrollHeight")
    for share in (0.37, 0.81, 0.55):
        page.evaluate(f"""() => {{ const v = document.querySelector('{VIEW}');
            v.scrollIntoView({{block: 'nearest'}}); v.scrollTop = v.scrollHeight * {share}; }}""")
        at = _token_at_center(page)
        i = at["i"]
        assert at["text"] == _shown(site.texts[i])
        # Where it is, roughly: the blocks' estimated heights keep a token near its share of the episode.
        assert abs(i / n - share) < 0.1, (i, share)
        # Onto the token itself: a block drawn meanwhile may have moved what lies under a fixed point.
        page.locator(f'{TOKENS} .tok[data-i="{i}"]').hover()
        page.wait_for_function(f"() => document.querySelector('{TOKENS} .rs-hover').textContent.startsWith('#{i} ')")
        hover = page.locator(f"{TOKENS} .rs-hover").inner_text()
        assert hover.startswith(f"#{i} · id {ids[i]} · ")
        seg = next(s for s in ep.segments if s.start <= i < s.end)
        assert f"turn {seg.turn} · {seg.kind}" in hover
        assert f"mask {int(ep.tokens.loss_mask[i])}" in hover
    assert abs(page.evaluate(f"() => document.querySelector('{VIEW}').scrollHeight") - height) < height * 0.2
    # Still a few thousand spans after scrolling through.
    assert page.locator(f"{TOKENS} .rs-tokens .tok").count() < 8_000

    # Jump to turn lands on the turn's first token, far from where the view was.
    for turn in (97, 3, 119):
        page.locator(f'{TOKENS} .rs-turnnav a[data-jump="turn-{turn}"]').click()
        page.wait_for_function(f"() => !!document.getElementById('turn-{turn}')")
        page.wait_for_timeout(300)  # the jump keeps its token in place for a few frames
        assert _in_view(page, f"#turn-{turn}")
        first = min(s.start for s in ep.segments if s.turn == turn)
        assert page.evaluate(f"() => Number(document.getElementById('turn-{turn}').dataset.i)") == first
    page.screenshot(path=str(screenshots / "episode_128k_turn119.png"))

    # The end of the last tool output, scrolled to.
    page.evaluate(f"() => {{ const v = document.querySelector('{VIEW}'); v.scrollTop = v.scrollHeight; }}")
    page.locator(f'{TOKENS} .tok[data-i="{n - 1}"]').wait_for(state="attached")
    page.wait_for_function(f"""() => {{
        const v = document.querySelector('{VIEW}'); v.scrollTop = v.scrollHeight;
        const t = document.querySelector('{TOKENS} .tok[data-i="{n - 1}"]');
        const a = t.getBoundingClientRect(), b = v.getBoundingClientRect();
        return a.bottom <= b.bottom + 1 && a.top >= b.top - 1; }}""")
    page.screenshot(path=str(screenshots / "episode_128k_end.png"))
    assert not page.errors
