"""Why this reward, in a real browser: retail episodes with mistakes planted at known turns (the real loop,
``tests/planted.py``), a database of their own, and one page that goes through the Episode panel, Browse's
outcome column and filter, the Runs tab's stacked outcomes and the Group tab's partings."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine import kind_label
from engine.backends.tokenizers import load_tokenizer
from engine.store import EpisodeFilter, Store
from tests.browser.conftest import _run_sync, serve
from tests.planted_outcomes import GROUP_ID, RUN_ID, Planted, outcome_run

EPISODE = "#rs-episode-outcome"


@dataclass(frozen=True)
class Site:
    url: str
    db: Path
    run: tuple[Planted, ...]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    path = tmp_path_factory.mktemp("outcomes-ui") / "rollscope.db"
    run = outcome_run(load_tokenizer(None), _run_sync)
    store = Store(path)
    store.save_episodes([p.episode for p in run])
    store.close()
    with serve(path) as url:
        yield Site(url, path, tuple(run))


def _tab(page: Any, name: str) -> None:
    page.locator(f"#rs-tab-{name}-button").click()
    page.wait_for_function(
        f"() => document.querySelector('#rs-tab-{name}-button')?.getAttribute('aria-selected') === 'true'")


def _in_view(page: Any, selector: str) -> bool:
    return bool(page.locator(selector).first.evaluate(
        "e => { const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight && r.height > 0; }"))


@pytest.mark.browser
def test_outcomes_in_episode_browse_runs_and_group(page: Any, site: Site, screenshots: Path) -> None:
    address = next(p for p in site.run if p.episode.task_id == "modify_order_address-00")
    ep, o = address.episode, address.episode.outcome
    assert o.kind == "wrong_arguments" and o.differing_arguments == ("address1", "zip")

    # -- Episode: the panel on the first screen, the differing values marked, the link to the turn.
    page.goto(f"{site.url}/?episode={ep.id}")
    panel = page.locator(f"{EPISODE} .rs-outcome[data-kind='wrong_arguments']")
    panel.wait_for()
    page.locator("#rs-episode-tokens .rs-tokens .tok").first.wait_for(state="visible", timeout=60_000)
    assert _in_view(page, f"{EPISODE} .rs-oc-kind") and _in_view(page, f"{EPISODE} .rs-oc-calls")
    assert panel.locator(".rs-oc-kind").inner_text() == "wrong arguments"
    assert panel.get_attribute("data-turn") == str(o.turn) == str(address.turns[0])
    # The sentence repeats the table: folded under it, as `rollscope explain` words it.
    assert page.locator(f"{EPISODE} .rs-oc-words .rs-oc-text").text_content() == o.text
    assert not page.locator(f"{EPISODE} .rs-oc-text").is_visible()
    rows = page.locator(f"{EPISODE} .rs-oc-calls tr.rs-oc-differs")
    assert [r.get_attribute("data-arg") for r in rows.all()] == ["address1", "zip"]
    for key in ("address1", "zip"):
        expected, taken = page.locator(f"{EPISODE} tr[data-arg='{key}'] td").all_inner_texts()
        assert (expected, taken) == (f'"{o.expected.arguments[key]}"', f'"{o.taken.arguments[key]}"')
    # The arguments both calls share are folded under the differing ones, unmarked.
    same = page.locator(f"{EPISODE} .rs-oc-same")
    assert same.locator("summary").inner_text() == f"{len(o.expected.arguments) - 2} more arguments, the same in both"
    assert same.locator("[data-arg='city'] mark").count() == 0 and not same.locator("[data-arg='city']").is_visible()
    # The marked values stand out: a filled background, and text that reads on it.
    mark = page.locator(f"{EPISODE} tr[data-arg='zip'] mark.rs-oc-diff").last
    colours = mark.evaluate("e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).color]")
    assert colours == ["rgb(253, 230, 138)", "rgb(120, 53, 15)"]
    db = page.locator(f"{EPISODE} .rs-oc-dbdiff")
    assert db.locator("summary").text_content() == f"The database vs the reference's: {len(o.db_diff)} differences"
    assert db.locator("summary").evaluate("e => getComputedStyle(e).textTransform") == "none"
    # One tool, named once above both columns; no argument name is cut.
    assert page.locator(f"{EPISODE} .rs-oc-tool").inner_text() == f"call {o.expected.name}"
    assert page.locator(f"{EPISODE} .rs-oc-calls .rs-call-name").count() == 0
    assert page.locator(f"{EPISODE} .rs-oc-calls tbody th").evaluate_all(
        "ths => ths.every(t => t.scrollWidth <= t.clientWidth && getComputedStyle(t).textOverflow !== 'ellipsis')")
    assert db.locator(".rs-oc-db tr", has_text=o.db_diff[0].field).count() == 1
    page.screenshot(path=str(screenshots / "outcome_panel.png"))
    # In dark mode (Gradio's .dark on the body) math's right and wrong verdicts read: 4.5:1 or more.
    ratios = page.evaluate("""() => {
        const lum = c => { const v = c.match(/\\d+/g).slice(0, 3).map(x => x / 255)
            .map(x => x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4);
            return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
        document.body.classList.add('dark');
        const box = document.querySelector('#rs-episode-outcome');
        const out = ['rs-oc-yes', 'rs-oc-no'].map(cls => {
            const s = document.createElement('span'); s.className = cls; s.textContent = 'x'; box.appendChild(s);
            let e = s;  // the colour behind it: the nearest box with a background
            while (e.parentElement && getComputedStyle(e).backgroundColor.replace(/\\s/g, '').endsWith(',0)')) {
                e = e.parentElement; }
            const fg = lum(getComputedStyle(s).color), bg = lum(getComputedStyle(e).backgroundColor);
            s.remove(); return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05); });
        document.body.classList.remove('dark');
        return out;
    }""")
    assert min(ratios) >= 4.5, ratios
    print(f"dark-mode contrast of right / wrong: {ratios[0]:.1f}:1 / {ratios[1]:.1f}:1")
    link = page.locator(f"{EPISODE} a.rs-oc-turn")
    assert link.get_attribute("href") == f"?episode={ep.id}&turn={o.turn}"
    link.click()
    turn = page.locator(f"#conv-turn-{o.turn}")
    page.wait_for_function(f"() => document.getElementById('conv-turn-{o.turn}').classList.contains('rs-flash')")
    assert turn.evaluate("e => { const r = e.getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight; }")
    assert o.taken.arguments["zip"] in turn.inner_text()

    # -- Browse: the outcome column by default, and the filter to one kind.
    _tab(page, "browse")
    table = page.locator("#rs-episode-table")
    table.locator("th.c-outcome").wait_for()
    store = Store(site.db)
    for p in site.run:
        assert table.locator(f"tr[data-id='{p.episode.id}'] td.c-outcome .rs-oc-kind").get_attribute("data-kind") == p.kind
    page.screenshot(path=str(screenshots / "outcome_browse.png"))
    page.locator("#rs-filter-outcome input").click()
    assert [t.split("\n")[-1] for t in page.locator("#rs-filter-outcome").get_by_role("option").all_inner_texts()] == [
        "any", *(f"{kind_label(k)} ({n})" for k, n in store.outcome_counts()[None].items())]
    page.get_by_role("option", name="wrong arguments (2)", exact=True).click()
    page.locator("#rs-browse-info", has_text="of 2 matching").wait_for()
    shown = {r.get_attribute("data-id") for r in table.locator("tr[data-id]").all()}
    assert shown == {s.id for s in store.list_episodes(EpisodeFilter.from_where(["outcome=wrong_arguments"]))}
    assert shown == {p.episode.id for p in site.run if p.kind == "wrong_arguments"}
    page.keyboard.press("Escape")
    assert page.locator("#rs-browse-filters").evaluate("e => e.getBoundingClientRect().height") < 130  # one row
    page.screenshot(path=str(screenshots / "outcome_browse_filtered.png"))

    # -- Runs: one stacked trace per kind; its counts per step are the store's.
    _tab(page, "runs")
    chart = page.locator("#rs-run-outcomes .js-plotly-plot")
    chart.wait_for()
    traces = chart.evaluate("e => e.data.map(t => [t.meta, t.type, Array.from(t.x), Array.from(t.y)])")
    layout = chart.evaluate("e => e._fullLayout.barmode")
    want = store.outcome_counts(EpisodeFilter(run_id=RUN_ID), by="rollout_step")
    assert layout == "stack" and {t[1] for t in traces} == {"bar"}
    got: dict[int, dict[str, int]] = {}
    for name, _, xs, ys in traces:
        for x, y in zip(xs, ys):
            if y:
                got.setdefault(int(x), {})[name] = int(y)
    assert got == want and set(want) == {0, 1}
    chart.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "outcome_runs.png"))

    # -- Group: each unrewarded sample beside the rewarded one; a link opens its episode at the parting turn.
    _tab(page, "group")
    page.locator("#rs-group-id textarea, #rs-group-id input").first.fill(GROUP_ID)
    page.locator("#rs-group-show").click()
    partings = page.locator("#rs-group-view tr.rs-parting")
    partings.first.wait_for()
    group = [p for p in site.run if p.episode.group_id == GROUP_ID]
    assert [(r.get_attribute("data-unrewarded"), r.get_attribute("data-turn")) for r in partings.all()] == [
        (p.episode.id, str(p.turns[0])) for p in group[1:]]
    wrong = partings.first
    assert wrong.locator("a.rs-part-link").all_inner_texts() == [
        f"open #{group[0].episode.sample_index} at turn {group[1].turns[0]} ↗",
        f"open #{group[1].episode.sample_index} at turn {group[1].turns[0]} ↗"]
    assert wrong.locator(".rs-part-r mark.rs-oc-want").count() >= 1 and wrong.locator(".rs-part-u mark.rs-oc-diff").count() >= 1
    page.screenshot(path=str(screenshots / "outcome_group.png"), full_page=True)
    k = group[1].turns[0]
    wrong.locator(f"a.rs-part-link[data-open='{group[1].episode.id}']").click()
    page.locator(f"#rs-pb-card .rs-pb-card[data-episode='{group[1].episode.id}'][data-k='{k}']").wait_for()
    page.locator(f"{EPISODE} .rs-outcome[data-kind='wrong_arguments'][data-turn='{k}']").wait_for()
    store.close()
    assert not page.errors
