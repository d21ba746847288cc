"""The Group tab in a real browser: a group whose samples part ways at a known turn, a group with zero reward
spread, opening a sample and comparing two."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engine.backends.tokenizers import load_tokenizer
from engine.store import Store
from tests.browser.conftest import serve
from tests.groupdata import DIVERGE_AT, WRONG_LOOKUP, group


def _seed(path: Path) -> None:
    tok = load_tokenizer(None)
    store = Store(path)
    for ep in group(tok, "grouprun:div", 0, 3, deviate=(1,), reply=WRONG_LOOKUP) + group(tok, "grouprun:flat", 1, 4) \
            + group(tok, "grouprun:big", 2, 16, deviate=tuple(range(8, 16)), reply=WRONG_LOOKUP):
        store.save_episode(ep)
    store.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("group") / "rollscope.db"
    with ThreadPoolExecutor(max_workers=1) as pool:  # Playwright may run a loop in this thread
        pool.submit(_seed, db).result()
    with serve(db) as url:
        yield url


def _selected(page: Any, name: str) -> None:
    page.wait_for_function(
        f"() => document.querySelector('#rs-tab-{name}-button')?.getAttribute('aria-selected') === 'true'")


@pytest.mark.browser
def test_a_group_that_parts_ways_then_open_and_compare(page: Any, site: str, screenshots: Path) -> None:
    page.goto(f"{site}/?group=grouprun:div")
    _selected(page, "group")
    view = page.locator("#rs-group-view .rs-group[data-group='grouprun:div']")
    view.wait_for()
    assert view.locator("tr.rs-group-sample").count() == 3
    diverge = view.locator(".rs-group-diverge")
    assert diverge.get_attribute("data-turn") == str(DIVERGE_AT)
    assert f"first make different calls at turn {DIVERGE_AT}" in diverge.inner_text()
    assert "std" in view.locator(".rs-group-norm").inner_text()
    # The run's zero-spread group is listed with a link to it.
    assert view.locator("a.rs-flat-group").count() >= 1
    page.screenshot(path=str(screenshots / "group_diverge.png"), full_page=True)
    # Compare two samples.
    page.locator("#rs-group-compare").click()
    _selected(page, "compare")
    page.locator("#rs-compare-view .rs-cmp-verdict").wait_for()
    # Open one sample, from a fresh page: the compare view's own navigation must not abort this one.
    page.goto("about:blank")
    page.goto(f"{site}/?group=grouprun:div")
    first = page.locator("#rs-group-view tr.rs-group-sample").first
    first.wait_for()
    episode_id = first.get_attribute("data-episode")
    first.locator("a[data-open]").click()
    _selected(page, "episode")
    box = page.locator("#rs-episode-id input, #rs-episode-id textarea").first
    page.wait_for_function("([sel, id]) => document.querySelector(sel)?.value === id",
                           arg=["#rs-episode-id input, #rs-episode-id textarea", episode_id])
    assert box.input_value() == episode_id


@pytest.mark.browser
def test_browse_group_column_opens_the_group(page: Any, site: str) -> None:
    page.goto(site + "/")
    page.locator("#rs-episode-table tbody tr[data-id]").first.wait_for()
    assert page.locator("#rs-episode-table th.c-group").count() == 0  # not a key column: chosen
    page.locator("#rs-browse-more").get_by_text("More filters and columns").click()
    page.locator("#rs-columns input").click()
    page.get_by_role("option", name="group", exact=True).click()
    link = page.locator("#rs-episode-table a.rs-group-link").first
    link.wait_for()
    gid = link.inner_text()
    link.click()
    _selected(page, "group")
    page.locator(f"#rs-group-view .rs-group[data-group='{gid}']").wait_for()


@pytest.mark.browser
def test_zero_spread_and_a_sixteen_sample_group(page: Any, site: str, screenshots: Path) -> None:
    page.goto(f"{site}/?group=grouprun:flat")
    view = page.locator("#rs-group-view .rs-group[data-group='grouprun:flat']")
    view.wait_for()
    flat = view.locator(".rs-group-flat")
    assert "no learning signal" in flat.inner_text()
    assert set(view.locator("tr.rs-group-sample").evaluate_all("rs => rs.map(r => r.dataset.advantage)")) == {"+0.000"}
    page.screenshot(path=str(screenshots / "group_flat.png"), full_page=True)
    t0 = time.perf_counter()
    page.goto(f"{site}/?group=grouprun:big")
    page.locator("#rs-group-view .rs-group[data-samples='16']").wait_for()
    print(f"16-sample group: link to painted {time.perf_counter() - t0:.2f} s")
    assert page.locator("#rs-group-view tr.rs-group-sample").count() == 16
    page.screenshot(path=str(screenshots / "group_16.png"), full_page=True)


@pytest.mark.browser
@pytest.mark.parametrize("link", ["group=grouprun:div", "compare=GROUP"])
def test_browse_charts_fit_their_panels_after_a_deep_link(page: Any, site: str, link: str) -> None:
    if link == "compare=GROUP":
        page.goto(f"{site}/?group=grouprun:div")
        first = page.locator("#rs-group-view tr.rs-group-sample").first
        first.wait_for()
        eid = first.get_attribute("data-episode")
        link = f"compare={eid},{eid}"
    page.goto(f"{site}/?{link}")
    _selected(page, link.split("=")[0])
    page.wait_for_timeout(1500)  # the hidden Browse tab draws its charts meanwhile
    page.locator("#rs-tab-browse-button").click()
    page.locator("#rs-tab-browse .js-plotly-plot .main-svg").first.wait_for()
    # Drawn while hidden, a chart took Plotly's default 700 px; shown, it fits its panel.
    page.wait_for_function("""() => [...document.querySelectorAll('#rs-tab-browse .js-plotly-plot')].every(p =>
        p.querySelector('.main-svg').getBoundingClientRect().width <= p.parentElement.getBoundingClientRect().width + 1)""",
                           timeout=10_000)


@pytest.mark.browser
def test_the_group_tab_lists_the_groups_with_their_spread(page: Any, site: str) -> None:
    page.goto(f"{site}/")
    page.locator("#rs-tab-group-button").click()
    rows = page.locator("#rs-group-view tr.rs-group-row")
    rows.first.wait_for()
    groups = {r.get_attribute("data-group") for r in rows.all()}
    assert "grouprun:div" in groups
    flat = page.locator("#rs-group-view tr.rs-group-flat")
    assert flat.count() >= 1 and "zero spread" in flat.first.inner_text()
    assert "zero reward spread in" in page.locator("#rs-group-view .rs-note").first.inner_text()
    page.locator("#rs-group-view tr[data-group='grouprun:div'] a.rs-group-link").click()
    page.locator("#rs-group-view .rs-group[data-group='grouprun:div']").wait_for()
    # A click anywhere on a row of the list opens its group too, as in every other table (its task cell here).
    page.goto(f"{site}/")
    page.locator("#rs-tab-group-button").click()
    other = next(g for g in groups if g != "grouprun:div")
    page.locator(f"#rs-group-view tr[data-group='{other}'] td").nth(1).click()
    page.locator(f"#rs-group-view .rs-group[data-group='{other}']").wait_for()


@pytest.mark.browser
def test_an_unknown_group_says_so_and_the_list_does_not_replace_it(page: Any, site: str) -> None:
    """The list is read when the tab opens, and only while no group id is in the box: a link to a group that is
    not there keeps its error, and opening the tab again later leaves the group shown."""
    page.goto(f"{site}/?group=grouprun:nosuch")
    _selected(page, "group")
    error = page.locator("#rs-group-view .rs-note")
    error.first.wait_for()
    assert "grouprun:nosuch" in error.first.inner_text()
    assert page.locator("#rs-group-id input, #rs-group-id textarea").first.input_value() == "grouprun:nosuch"
    page.locator("#rs-tab-browse-button").click()
    page.locator("#rs-tab-group-button").click()
    time.sleep(1.0)  # a list read on the tab's opening would have landed by now
    assert page.locator("#rs-group-view tr.rs-group-row").count() == 0
    assert "grouprun:nosuch" in page.locator("#rs-group-view .rs-note").first.inner_text()
    # Cleared, the box lets the list come with the next opening of the tab.
    page.locator("#rs-group-id input, #rs-group-id textarea").first.fill("")
    page.locator("#rs-tab-browse-button").click()
    page.locator("#rs-tab-group-button").click()
    page.locator("#rs-group-view tr.rs-group-row").first.wait_for()
    assert page.locator("#rs-group-view tr.rs-group-row").count() == 3
