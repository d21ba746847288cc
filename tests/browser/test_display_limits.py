"""An episode over the display limits (a 10 MB tool answer, 600,000 tokens) in a real browser: it opens with the
token view folded and says so, its texts cut, the page small, and links into what was left out say so."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from engine.records.episode import Episode
from engine.store import Store
from tests.browser.conftest import serve
from tests.synthetic import huge_episode

TOKENS = "#rs-episode-tokens"
N_TOKENS = 600_000
MESSAGE_CHARS = 10_000_000


@dataclass(frozen=True)
class Site:
    url: str
    episode_id: str
    deep: int  # where the finding in the middle of the tool answer's tokens starts


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    db = tmp_path_factory.mktemp("huge") / "rollscope.db"

    def seed() -> Episode:
        ep = huge_episode(MESSAGE_CHARS, N_TOKENS)
        store = Store(db)
        store.save_episode(ep)
        store.close()
        return ep

    with ThreadPoolExecutor(max_workers=1) as pool:  # Playwright may run a loop in this thread
        ep = pool.submit(seed).result()
    deep = max(f.token_start for f in ep.all_findings() if f.token_start is not None)
    with serve(db) as url:
        yield Site(url, ep.id, deep)


@pytest.mark.browser
def test_a_huge_episode_opens_folded_and_the_tab_lives(page: Any, site: Site) -> None:
    asked = N_TOKENS // 4  # a token the folded view does not send (the deep finding is at the middle)
    page.goto(f"{site.url}/?episode={site.episode_id}&token={asked}")
    note = page.locator(f"{TOKENS} .rs-tok-folded")
    note.wait_for(timeout=30_000)
    said = note.inner_text()
    assert f"{N_TOKENS:,} tokens" in said and f"rollscope show {site.episode_id} --json" in said

    # The link's token lies in a gap: the gap says the token is folded, and is scrolled into the view.
    gap = page.locator(f"{TOKENS} .rs-tok-gap", has_text=f"token {asked:,}, asked for here")
    gap.wait_for()
    a, b = int(gap.get_attribute("data-a")), int(gap.get_attribute("data-b"))
    assert a <= asked < b and "folded: not sent to the browser" in gap.inner_text()

    # The 10 MB answer is cut in the timeline, saying how much it left out.
    cut = page.locator("#rs-episode-conversation .rs-cut").first
    cut.wait_for(state="attached")
    assert "more characters not sent to the browser" in (cut.text_content() or "")

    # The finding in the middle of the answer's tokens stays reachable: its link draws and marks the token.
    page.locator(f'#rs-episode-findings a[data-jump="tok-{site.deep}"]').first.click()
    page.wait_for_function(f"""() => {{
        const t = document.querySelector('{TOKENS} .tok[data-i="{site.deep}"]');
        return !!t && t.classList.contains('tok-flag'); }}""")

    # The tab lives, its page a few megabytes at most, a few thousand token spans.
    assert page.evaluate("() => 1 + 1") == 2
    assert page.evaluate("() => document.documentElement.outerHTML.length") < 4_000_000
    assert page.locator(f"{TOKENS} .tok").count() < 8_000
    assert not page.errors
