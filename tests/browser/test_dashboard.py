"""The dashboard in a real browser: browse, open an episode, deep links, hostile text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

TOKENS = "#rs-episode-tokens"


def _episode_tab_selected(page: Any) -> bool:
    return page.locator("#rs-tab-episode-button").get_attribute("aria-selected") == "true"


@pytest.mark.browser
def test_browse_then_open_a_row(page: Any, dashboard_url: str, dashboard_db: Any, screenshots: Path) -> None:
    page.goto(dashboard_url + "/")
    cells = page.locator("#rs-episode-table [role=gridcell]")
    for eid in (*dashboard_db.episode_ids, dashboard_db.hostile_id):
        cells.filter(has_text=eid).first.wait_for(state="visible")
    page.get_by_text(f"of {len(dashboard_db.episode_ids) + 1}", exact=False).first.wait_for()
    page.screenshot(path=str(screenshots / "browse.png"))

    target = dashboard_db.episode_ids[0]
    cells.filter(has_text=target).first.click()
    page.locator(f"{TOKENS} span.tok-train").first.wait_for(state="visible")
    assert _episode_tab_selected(page)
    assert target in page.locator("#rs-episode-header").inner_text()
    n_train = page.locator(f"{TOKENS} span.tok.tok-train").count()
    n_ctx = page.locator(f"{TOKENS} span.tok.tok-ctx").count()
    assert n_train > 0 and n_ctx > 0
    assert page.locator(f"{TOKENS} span.tok-special").count() > 0

    token = page.locator(f"{TOKENS} span.tok.tok-train").first
    token.hover()
    title = token.get_attribute("title") or ""
    assert " id " in title and "mask 1" in title and "turn " in title
    # Selecting a row writes a shareable ?episode= link into the address bar.
    page.wait_for_function("() => window.location.search.includes('episode=')")
    assert f"episode={target}" in page.url
    page.screenshot(path=str(screenshots / "episode.png"))
    page.screenshot(path=str(screenshots / "episode_full.png"), full_page=True)
    assert not page.errors


@pytest.mark.browser
def test_deep_link_opens_the_episode(page: Any, dashboard_url: str, dashboard_db: Any,
                                     screenshots: Path) -> None:
    target = dashboard_db.episode_ids[1]
    page.goto(f"{dashboard_url}/?episode={target}")
    page.locator(f"{TOKENS} span.tok").first.wait_for(state="visible")
    assert _episode_tab_selected(page)
    header = page.locator("#rs-episode-header").inner_text()
    assert target in header and "areal-math" in header
    conversation = page.locator("#rs-episode-conversation")
    assert conversation.locator(".rs-turn").count() == 5
    page.locator(f"{TOKENS} #turn-2").wait_for(state="attached")
    page.screenshot(path=str(screenshots / "deep_link.png"))
    assert not page.errors


@pytest.mark.browser
def test_deep_link_to_a_missing_episode_says_so(page: Any, dashboard_url: str) -> None:
    page.goto(f"{dashboard_url}/?episode=nosuchepisode")
    page.locator("#rs-episode-header .rs-error").wait_for(state="visible")
    assert "no episode 'nosuchepisode'" in page.locator("#rs-episode-header").inner_text()


@pytest.mark.browser
def test_hostile_text_is_shown_not_run(page: Any, dashboard_url: str, dashboard_db: Any,
                                       screenshots: Path) -> None:
    page.goto(f"{dashboard_url}/?episode={dashboard_db.hostile_id}")
    conversation = page.locator("#rs-episode-conversation")
    conversation.locator(".rs-turn").first.wait_for(state="visible")
    page.locator(f"{TOKENS} span.tok").first.wait_for(state="visible")
    assert dashboard_db.hostile_text in conversation.inner_text()
    tokens_text = page.locator(f"{TOKENS} .rs-tokens").inner_text()
    assert "<script>window.__xss=2</script>" in tokens_text
    # Give a would-be onerror handler time to fire before looking for it.
    page.wait_for_timeout(300)
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("#rs-episode-conversation img, #rs-episode-tokens img, #rs-episode-conversation script").count() == 0
    page.screenshot(path=str(screenshots / "hostile.png"), full_page=True)


def test_browse_page_filters_and_clamps(dashboard_db: Any) -> None:
    """The Browse callback itself (no browser): filters go to the store, pages are clamped."""
    from dashboard.tabs import browse
    from engine.store import Store

    store = Store(dashboard_db.path)
    try:
        rows, info, page_no, _ = browse.page(store, "all", "all", 7)
        assert page_no == 0 and len(rows) == len(dashboard_db.episode_ids) + 1
        assert rows[0][0] == dashboard_db.hostile_id  # newest first
        assert list(map(type, rows[0])) == [str, str, str, str, float, int, int, int, str, int]
        rows, info, _, _ = browse.page(store, "math", "truncated", 0)
        assert [r[0] for r in rows] == [dashboard_db.hostile_id]
        rows, info, _, _ = browse.page(store, "nosuchenv", "all", 0)
        assert rows == [] and "No episode matches" in info
    finally:
        store.close()
