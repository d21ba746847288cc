"""Browse's "Build the demo" in a real browser: on an empty database the button builds the demo in the
background and Browse shows its episodes, each run tagged with what it shows.

The build writes to its database, so this module has its own (empty) database and server.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine import DEMO_PARTS
from engine.store import EpisodeFilter, Store
from tests.browser.conftest import _free_port
from tests.conftest import QWEN3_DIR


@dataclass(frozen=True)
class DemoSite:
    url: str
    db: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoSite]:
    """An empty database and the app serving it; the demo finds the Qwen3 test tokenizer where `make test-deps`
    puts it."""
    from dashboard.app import build_app

    if not (QWEN3_DIR / "tokenizer.json").is_file():
        pytest.fail(f"the Qwen3 test tokenizer is missing at {QWEN3_DIR}; run `make test-deps`")
    db = tmp_path_factory.mktemp("demo-ui") / "rollscope.db"
    Store(db).close()
    app = build_app(str(db))
    port = _free_port()
    app.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    try:
        yield DemoSite(f"http://127.0.0.1:{port}", db)
    finally:
        app.close()


def _info(page: Any, text: str, timeout: float = 20_000) -> None:
    page.locator("#rs-browse-info", has_text=text).wait_for(timeout=timeout)


@pytest.mark.browser
def test_the_demo_button_fills_an_empty_database_and_browse_shows_it(page: Any, site: DemoSite,
                                                                     screenshots: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLSCOPE_QWEN3_TOKENIZER", str(QWEN3_DIR))
    page.goto(site.url + "/")
    _info(page, "No episodes in")
    assert "rollscope demo --db" in page.locator("#rs-browse-info").inner_text()
    button = page.locator("#rs-demo-build")
    button.wait_for(state="visible")
    assert "seconds" in page.locator("#rs-demo-message").inner_text()
    page.screenshot(path=str(screenshots / "demo_offer.png"))

    button.click()
    # The build runs in the background; Browse shows the episodes as they are stored, without a reload.
    page.locator("#rs-demo-message [data-state=finished]").wait_for(timeout=120_000)
    store = Store(site.db)
    total = store.count()
    assert total == 28
    _info(page, f"of {total} matching", timeout=30_000)
    assert not button.is_visible()
    message = page.locator("#rs-demo-message").inner_text()
    assert "The demo is built: 28 episodes in 7 runs" in message and "tags filter" in message
    for part in DEMO_PARTS:
        row = page.locator(f"#rs-demo-message tr[data-tag='{part.tag}']")
        assert row.locator("td").nth(1).inner_text() == str(store.count(EpisodeFilter(tags=(part.tag,))))
    tags = page.locator("#rs-episode-table tbody td.c-tags").all_inner_texts()
    assert {t.strip() for t in tags} == {p.tag for p in DEMO_PARTS}
    reasons = page.locator("#rs-episode-table tbody td.c-reason").all_inner_texts()
    assert any("rewrote history" in r for r in reasons) and any(r.startswith("tool call parse error") for r in reasons)
    page.screenshot(path=str(screenshots / "demo_built.png"), full_page=True)
    # At 1440 wide every column fits, the newest-first time at the right end included, and a tag is one line
    # (a long one cut, whole in its title), where they wrapped and ran off the table.
    fit = page.evaluate("""() => { const w = document.querySelector('#rs-episode-table .rs-table-wrap');
        const t = w.querySelector('table'), c = t.querySelector('thead th.c-time').getBoundingClientRect();
        const tags = [...t.querySelectorAll('tbody .rs-tag')];
        return {over: t.scrollWidth - w.clientWidth, time: c.right <= w.getBoundingClientRect().right,
                lines: Math.max(...tags.map(x => x.getClientRects().length)), titled: tags.every(x => x.title)}; }""")
    assert fit == {"over": 0, "time": True, "lines": 1, "titled": True}, fit
    # A run chip in the narrow diagnosis column wraps between words or after an underscore, never inside a word
    # ("generation_prompt_missin" / "g" before).
    breaks = page.evaluate("""() => [...document.querySelectorAll('#rs-episode-table .rs-run-chip')].flatMap(chip => {
        const chars = [], walk = document.createTreeWalker(chip, NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode())
            for (let i = 0; i < n.length; i++) {
                const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
                const box = r.getClientRects()[0];
                if (box) chars.push([n.data[i], box.top]);
            }
        return chars.flatMap(([c, top], i) => i && top > chars[i - 1][1] + 2 ? [chars[i - 1][0] + c] : []); })""")
    assert breaks and all(pair[0] in "_ ," for pair in breaks), breaks

    # Filter by a tag: its episodes alone.
    page.locator("#rs-filter-tags input").click()
    page.get_by_role("option", name="demo:parse-abort", exact=True).click()
    _info(page, "Episodes 1–2 of 2 matching")
    assert set(page.locator("#rs-episode-table tbody td.c-status").all_inner_texts()) == {"aborted"}

    # A reload finds the finished build again.
    page.reload()
    page.locator("#rs-demo-message [data-state=finished]").wait_for()

    # An episode checked in part (checks that could not run, as without a tokenizer): its findings cell says how many
    # under the count, on lines of their own, and the table still keeps to the page.
    from engine.records.episode import Finding, Severity

    base = store.get_episode(store.list_episodes(limit=1)[0].id)
    notes = tuple(Finding("not_checked", Severity.INFO, f"{k}: not checked: no tokenizer with a chat template",
                          evidence={"check": k, "needs": "tokenizer"})
                  for k in ("template_not_prefix_stable", "tokens_not_rendering"))
    store.save_episodes([base.evolve(id="in-part", created_at=2e9, tags=(), findings=notes, checked="4")])
    page.reload()
    cell = page.locator("#rs-episode-table tr[data-id='in-part'] td.c-findings")
    cell.wait_for()
    assert cell.inner_text().split() == ["0", "2", "checks", "not", "run"]
    assert "tokens_not_rendering: not checked" in cell.locator(".rs-not-run").get_attribute("title")
    fit = page.evaluate("""() => { const w = document.querySelector('#rs-episode-table .rs-table-wrap');
        const t = w.querySelector('table'), c = t.querySelector('thead th.c-time').getBoundingClientRect();
        return {over: t.scrollWidth - w.clientWidth, time: c.right <= w.getBoundingClientRect().right}; }""")
    assert fit == {"over": 0, "time": True}, fit
    store.close()
    assert not page.errors
