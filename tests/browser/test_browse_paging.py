"""Browse's pager in a real browser: Next and Prev carry the page's tokens (keyset pages equal to the offset
pages), and a count past its bound shows "N+" until the exact count arrives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.store import Store
from tests.browser.conftest import serve
from tests.synthetic import synthetic_episodes

N = 130


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Store]]:
    path: Path = tmp_path_factory.mktemp("paging-ui") / "rollscope.db"
    store = Store(path)
    store.save_episodes(synthetic_episodes(N))
    with serve(path) as url:
        yield url, store
    store.close()


def _rows(page: Any) -> list[str]:
    return page.eval_on_selector_all("#rs-episode-table tr[data-id]", "rows => rows.map(r => r.dataset.id)")


def _info(page: Any, text: str) -> None:
    page.locator("#rs-browse-info", has_text=text).wait_for(timeout=30_000)


def test_next_and_prev_walk_the_offset_pages_and_the_count_fills_in(page: Any, site: tuple[str, Store],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from dashboard.tabs import browse

    url, store = site
    monkeypatch.setattr(browse, "COUNT_BOUND", 100)  # the server runs in this process
    # Every text the info line shows, recorded from before the page's own scripts run.
    page.add_init_script("""window.__rsInfos = []; new MutationObserver(() => {
        const el = document.querySelector('#rs-browse-info');
        if (el && window.__rsInfos[window.__rsInfos.length - 1] !== el.textContent) window.__rsInfos.push(el.textContent);
    }).observe(document, {subtree: true, childList: true, characterData: true});""")
    page.goto(url)
    _info(page, f"Episodes 1–50 of {N} matching · page 1 of 3")
    seen = page.evaluate("() => window.__rsInfos")
    bounded = [i for i, s in enumerate(seen) if "Episodes 1–50 of 100+ matching (counting…) · page 1 ·" in s]
    exact = [i for i, s in enumerate(seen) if f"of {N} matching · page 1 of 3" in s]
    assert bounded and exact and bounded[0] < exact[0], seen
    want = [[r.id for r in store.list_episodes(limit=50, offset=k)] for k in (0, 50, 100)]
    assert _rows(page) == want[0]
    page.locator("#rs-next").click()
    _info(page, f"Episodes 51–100 of {N} matching · page 2 of 3")
    assert _rows(page) == want[1]
    page.locator("#rs-next").click()
    _info(page, f"Episodes 101–{N} of {N} matching · page 3 of 3")
    assert _rows(page) == want[2]
    page.locator("#rs-prev").click()
    _info(page, f"Episodes 51–100 of {N} matching · page 2 of 3")
    assert _rows(page) == want[1]
    # A new sort starts at page 1; Next follows that sort.
    page.locator('#rs-episode-table th[data-sort="reward"]').click()
    _info(page, "sorted by reward ▼")
    _info(page, f"Episodes 1–50 of {N} matching · page 1 of 3")
    first = _rows(page)
    assert first == [r.id for r in store.list_episodes(order_by="reward", limit=50)]
    # An episode of page 2 moves to the top (a re-check, a re-import): Next continues after the last row shown,
    # where an offset would show that row again.
    moved = store.list_episodes(order_by="reward", limit=1, offset=60)[0].id
    store.db.execute("UPDATE episodes SET reward = 99 WHERE id = ?", [moved])
    store.db.conn.commit()
    now = [r.id for r in store.list_episodes(order_by="reward", limit=N)]
    after = now[now.index(first[-1]) + 1:][:50]
    assert after != now[50:100] and first[-1] == now[50]
    page.locator("#rs-next").click()
    _info(page, f"Episodes 51–100 of {N} matching · page 2 of 3 · sorted by reward")
    assert _rows(page) == after
    assert page.errors == []


def test_the_first_rows_come_before_anything_else_and_the_charts_fill_in_after(page: Any,
                                                                             site: tuple[str, Store]) -> None:
    """One page load, watched from the browser: the Gradio events it asks the server for (in the order they are
    sent: a step that follows another is sent when that one is done) and when the rows and the charts appear."""
    url, _ = site
    joined: list[int] = []
    page.on("request", lambda r: joined.append(r.post_data_json["fn_index"])
            if r.method == "POST" and "/queue/join" in r.url else None)
    page.add_init_script("""window.__rsSeen = {}; new MutationObserver(() => {
        const seen = window.__rsSeen, now = performance.now();
        if (!seen.rows && document.querySelector('#rs-episode-table tr[data-id]')) seen.rows = now;
        if (!seen.chart && document.querySelector('#rs-chart-0 .js-plotly-plot')) seen.chart = now;
    }).observe(document, {subtree: true, childList: true});""")
    page.goto(url)
    page.locator("#rs-chart-0 .js-plotly-plot").first.wait_for(timeout=60_000)
    _info(page, f"of {N} matching · page 1 of 3")
    page.wait_for_function("() => window.__rsSeen.rows && window.__rsSeen.chart")
    seen = page.evaluate("() => window.__rsSeen")
    assert seen["rows"] < seen["chart"], seen
    # Which component each event fills: the table (rs-episode-table), the env filter's choices, the charts.
    fills = page.evaluate("""() => {
        const cfg = window.gradio_config, elem = {};
        for (const c of cfg.components) elem[c.id] = c.props && c.props.elem_id;
        const out = {};
        for (const d of cfg.dependencies) out[d.id] = (d.outputs || []).map(o => elem[o]).filter(Boolean);
        return out;
    }""")

    def first(elem_id: str) -> int:
        return next(k for k, fn in enumerate(joined) if elem_id in fills[str(fn)])

    table = first("rs-episode-table")
    assert table < first("rs-filter-env") and table < first("rs-chart-0"), [fills[str(fn)] for fn in joined]
    # Nothing of Browse's was asked for before its table: every event before it fills other tabs.
    browse = {"rs-episode-table", "rs-filter-env", "rs-chart-0", "rs-browse-info"}
    assert not [fills[str(fn)] for fn in joined[:table] if browse & set(fills[str(fn)])]
    assert not page.errors
