"""Entropy in a real browser: the Runs tab's entropy panel over a run whose policy collapses at step 4 (marked as the
other jumps are)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.store import Store
from tests.browser.conftest import serve
from tests.test_runs_view import _collapsing_run


@dataclass(frozen=True)
class EntropySite:
    url: str
    db: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntropySite]:
    db = tmp_path_factory.mktemp("entropy-ui") / "rollscope.db"
    store = Store(db)
    _collapsing_run(store)
    store.close()
    with serve(db) as url:
        yield EntropySite(url, db)


def _tab(page: Any, name: str) -> None:
    page.locator(f"#rs-tab-{name}-button").click()
    page.wait_for_function(
        f"() => document.querySelector('#rs-tab-{name}-button')?.getAttribute('aria-selected') === 'true'")


@pytest.mark.browser
def test_the_runs_chart_draws_the_entropy_and_marks_the_collapse(page: Any, site: EntropySite,
                                                                 screenshots: Path) -> None:
    store = Store(site.db)
    stats = store.step_stats("collapse")
    store.close()
    page.goto(site.url + "/")
    _tab(page, "runs")
    chart = page.locator("#rs-run-chart .js-plotly-plot")
    chart.wait_for()
    page.locator("#rs-run-alerts", has_text="The data changed at step 4").wait_for()
    traces = chart.evaluate("e => Object.fromEntries(e.data.map(t => [t.name, [Array.from(t.x), Array.from(t.y), "
                            "t.yaxis]]))")
    xs, mean, axis = traces["mean entropy"]
    assert xs == [0, 1, 2, 3, 4, 5] and mean == pytest.approx([s.entropy_mean for s in stats], abs=1e-9)
    _, low, low_axis = traces["near-zero entropy"]
    assert low == pytest.approx([100 * s.near_zero_rate for s in stats]) and low_axis != axis
    # The collapse is a dashed line at step 4 on every panel, the entropy panel included.
    lines = chart.evaluate("e => e._fullLayout.shapes.map(s => [s.x0, s.yref])")
    assert {x for x, _ in lines} == {4} and len(lines) == 5
    assert chart.locator("text", has_text="entropy of generated tokens").count() == 1
    alerts = page.locator("#rs-run-alerts").inner_text()
    assert "near-zero-entropy tokens" in alerts and "mean entropy" in alerts and "entropy collapse" in alerts
    row = page.locator('#rs-run-steps tr[data-step="4"].rs-step-alert')
    assert f"{stats[4].entropy_mean:.3g}" in row.inner_text()
    chart.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "runs_entropy.png"))
    page.screenshot(path=str(screenshots / "runs_entropy_full.png"), full_page=True)
    assert not page.errors
