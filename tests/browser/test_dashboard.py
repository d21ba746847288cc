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
    rows = page.locator("#rs-episode-table tr[data-id]")
    for eid in (*dashboard_db.episode_ids, dashboard_db.hostile_id):
        page.locator(f"#rs-episode-table tr[data-id='{eid}']").wait_for(state="visible")
    page.get_by_text(f"of {len(dashboard_db.episode_ids) + 1}", exact=False).first.wait_for()
    assert rows.count() == len(dashboard_db.episode_ids) + 1
    page.screenshot(path=str(screenshots / "browse.png"))

    target = dashboard_db.episode_ids[0]
    page.locator(f"#rs-episode-table tr[data-id='{target}'] td.c-env").click()
    page.locator(f"{TOKENS} span.tok-train").first.wait_for(state="visible")
    assert _episode_tab_selected(page)
    assert target in page.locator("#rs-episode-header").inner_text()
    n_train = page.locator(f"{TOKENS} span.tok.tok-train").count()
    n_ctx = page.locator(f"{TOKENS} span.tok.tok-ctx").count()
    assert n_train > 0 and n_ctx > 0
    assert page.locator(f"{TOKENS} span.tok-special").count() > 0

    token = page.locator(f"{TOKENS} span.tok.tok-train").first
    token.hover()
    page.wait_for_function(f"() => (document.querySelector('{TOKENS} span.tok.tok-train').title || '').includes(' id ')")
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
    # textContent: blocks of the token view off screen are not laid out
    # (content-visibility), and innerText only reads laid-out text.
    tokens_text = page.locator(f"{TOKENS} .rs-tokens").text_content() or ""
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
        table, info, page_no = browse.page(store, browse.episode_filter(), None, 7)
        assert page_no == 1 and table.count("<tr data-id=") == len(dashboard_db.episode_ids) + 1
        assert table.index(dashboard_db.hostile_id) < min(table.index(e) for e in dashboard_db.episode_ids)  # newest first
        flt = browse.episode_filter(env="math", status=["truncated"])
        table, info, _ = browse.page(store, flt, {"by": "reward", "desc": False}, 1)
        assert table.count("<tr data-id=") == 1 and dashboard_db.hostile_id in table and "sorted by reward ▲" in info
        table, info, _ = browse.page(store, browse.episode_filter(env="nosuchenv"), None, 1)
        assert "<tr data-id=" not in table and "No episode matches" in info
        assert browse.episode_filter(reward_min="abc", turns_max="3").reward_min is None
        assert browse.episode_filter(turns_max="3").max_turns == 3
        assert browse.episode_filter(findings=browse.ANY_FINDING).has_findings is True
        assert browse.episode_filter(findings="env_error").finding_kind == "env_error"
    finally:
        store.close()
