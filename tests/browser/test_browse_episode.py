"""Browse and Episode in a real browser, on a database of their own.

Real scripted episodes (real tokenizer, special tokens, masks), synthetic
ones (tags, findings, groups, runs) and one 32,000-token, 60-turn episode
whose token view must stay responsive. These tests write (star, tags,
note), so they use their own database and server, not the shared one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.backends.tokenizers import load_tokenizer
from engine.envs import env_factory
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.store import EpisodeFilter, Store
from tests.browser.conftest import _free_port, _run_sync
from tests.synthetic import long_episode, needle, synthetic_episodes

TOKENS = "#rs-episode-tokens"
N_SYNTHETIC = 60


@dataclass(frozen=True)
class BrowseDb:
    path: Path
    real_ids: tuple[str, ...]
    long_id: str
    url: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowseDb]:
    """A database (real, synthetic and one long episode) and the app serving it."""
    from dashboard.app import build_app

    path = tmp_path_factory.mktemp("browse-ui") / "rollscope.db"
    tok = load_tokenizer(None)
    make_env = env_factory("math")
    store = Store(path)
    store.save_episodes(synthetic_episodes(N_SYNTHETIC))
    real: list[str] = []
    for i in range(2):
        env = make_env()
        backend = ScriptedBackend(make_env().reference_reply, tok, mistake_rate=0.5, seed=i, tokenizer_name="smollm2")
        ep = _run_sync(run_episode(env, backend, tok, PRESETS["areal-math"], env.tasks[i], preset="areal-math",
                                   tokenizer_name="smollm2"))
        store.save_episode(ep.evolve(created_at=2e9 + i))  # newest, so first in the table
        real.append(ep.id)
    long = long_episode(tok)
    store.save_episode(long)
    store.close()
    demo = build_app(str(path))
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    try:
        yield BrowseDb(path, tuple(real), long.id, f"http://127.0.0.1:{port}")
    finally:
        demo.close()


def _rows(page: Any) -> Any:
    return page.locator("#rs-episode-table tr[data-id]")


def _row_ids(page: Any) -> list[str]:
    return [r.get_attribute("data-id") for r in _rows(page).all()]


def _type(page: Any, elem_id: str, text: str, enter: bool = True) -> None:
    box = page.locator(f"#{elem_id}").locator("input, textarea").first
    box.fill(text)
    if enter:
        box.press("Enter")


def _wait_info(page: Any, text: str) -> None:
    page.locator("#rs-browse-info", has_text=text).wait_for()


def _open(page: Any, site: BrowseDb, episode_id: str) -> None:
    page.goto(f"{site.url}/?episode={episode_id}")
    page.locator(f"{TOKENS} .rs-tokens .tok").first.wait_for(state="visible", timeout=60_000)


@pytest.mark.browser
def test_filter_sort_and_open_an_episode(page: Any, site: BrowseDb, screenshots: Path) -> None:
    page.goto(site.url + "/")
    _wait_info(page, f"of {N_SYNTHETIC + 3:,} matching")
    assert _row_ids(page)[:2] == [site.real_ids[1], site.real_ids[0]]  # newest first
    # Why each episode ended, in a column of its own.
    store = Store(site.path)
    assert page.locator("#rs-episode-table th.c-reason").inner_text() == "reason"
    for episode_id in site.real_ids:
        cell = page.locator(f"#rs-episode-table tr[data-id='{episode_id}'] td.c-reason")
        assert cell.inner_text() == store.get_episode(episode_id).reason == "reached max_turns=5"
    # The reward distribution: one panel (a trace on its own axis) per env and preset.
    page.locator("#rs-chart-0 .js-plotly-plot").wait_for()
    chart = page.locator("#rs-chart-0 .js-plotly-plot")
    assert chart.evaluate("e => e.data.map(t => t.name).sort()") == sorted(r.label for r in store.stats().rewards)
    assert chart.evaluate("e => new Set(e.data.map(t => t.xaxis)).size") == len(store.stats().rewards) > 1
    # The token lengths (from the maintained aggregates): each bar counts the episodes between its hover's first and
    # last length, all tokens and trainable ones on the same bars.
    lengths = page.locator("#rs-chart-3 .js-plotly-plot")
    lengths.wait_for()
    drawn = lengths.evaluate("e => e.data.map(t => [t.name, Array.from(t.y), t.customdata.map(c => Array.from(c))])")
    rows = store.list_episodes(limit=10_000)
    assert [name for name, _, _ in drawn] == ["all tokens", "trainable"] and len(rows) == N_SYNTHETIC + 3
    for (name, counts, spans), length in zip(drawn, (lambda r: r.n_tokens, lambda r: r.n_trainable), strict=True):
        assert counts == [sum(lo <= length(r) <= hi for r in rows) for lo, hi in spans], name
        assert sum(counts) == len(rows) and spans == drawn[0][2]
    assert "tokens<br>" in lengths.evaluate("e => e.data[0].hovertemplate")
    page.screenshot(path=str(screenshots / "browse_all.png"), full_page=True)

    # Full-text search in message contents.
    _type(page, "rs-filter-text", needle(7))
    _wait_info(page, "Episodes 1–1 of 1 matching")
    assert _row_ids(page) == ["ep0000007"]
    _type(page, "rs-filter-text", "")

    # env dropdown, a reward bound, then sort by reward with a header click.
    page.locator("#rs-filter-env input").click()
    page.get_by_role("option", name="math", exact=True).click()
    _wait_info(page, "of 22 matching")  # 20 synthetic + 2 real math episodes
    page.locator("#rs-browse-more").get_by_text("More filters and columns").click()  # the rest of the filters
    _type(page, "rs-filter-reward-min", "0.5")
    want = store.count(EpisodeFilter(env="math", reward_min=0.5))
    _wait_info(page, f"of {want} matching")
    page.locator("#rs-browse-more", has_text="1 filter set here").wait_for()  # a folded filter says it is set
    page.locator("#rs-episode-table th[data-sort=reward]").click()
    _wait_info(page, "sorted by reward ▼")
    rewards = [float(t) for t in page.locator("#rs-episode-table tbody td.c-reward").all_inner_texts()]
    assert rewards == sorted(rewards, reverse=True) and min(rewards) >= 0.5
    page.locator("#rs-episode-table th[data-sort=reward]").click()
    _wait_info(page, "sorted by reward ▲")
    page.screenshot(path=str(screenshots / "browse_filtered.png"))

    # A row opens the Episode tab, with a shareable link.
    target = _row_ids(page)[0]
    _rows(page).first.locator("td.c-task").click()
    page.locator(f"{TOKENS} .rs-tokens .tok").first.wait_for(state="visible")
    assert page.locator("#rs-tab-episode-button").get_attribute("aria-selected") == "true"
    assert target in page.locator("#rs-episode-header").inner_text()
    page.wait_for_function("() => window.location.search.includes('episode=')")
    assert f"episode={target}" in page.url
    store.close()
    assert not page.errors


@pytest.mark.browser
def test_masked_and_trainable_tokens_toggles_and_hover(page: Any, site: BrowseDb, screenshots: Path) -> None:
    _open(page, site, site.real_ids[0])
    toks = page.locator(f"{TOKENS} .rs-tokens .tok")
    n_train = page.locator(f"{TOKENS} .rs-tokens .tok-train").count()
    n_ctx = page.locator(f"{TOKENS} .rs-tokens .tok-ctx").count()
    assert n_train > 0 and n_ctx > 0 and n_train + n_ctx == toks.count()
    train_bg = page.locator(f"{TOKENS} .tok-train").first.evaluate("e => getComputedStyle(e).backgroundColor")
    ctx_bg = page.locator(f"{TOKENS} .tok-ctx").first.evaluate("e => getComputedStyle(e).backgroundColor")
    assert train_bg != ctx_bg  # colored by loss mask

    token = page.locator(f"{TOKENS} .tok-train").nth(3)
    token.hover()
    hover = page.locator(f"{TOKENS} .rs-hover")
    page.wait_for_function(f"() => document.querySelector('{TOKENS} .rs-hover').textContent.includes(' id ')")
    text = hover.inner_text()
    assert "logprob" in text and "mask 1" in text and "turn " in text
    assert token.get_attribute("title") == text

    special = page.locator(f"{TOKENS} .tok-special").first
    assert special.is_visible()
    page.locator("#rs-token-toggles label", has_text="special tokens").click()
    special.wait_for(state="hidden")
    page.locator("#rs-token-toggles label", has_text="logprob heat map").click()
    page.wait_for_function(f"() => document.querySelector('{TOKENS}').classList.contains('rs-heat')")
    assert page.locator(f"{TOKENS} .rs-heat-legend").is_visible()
    page.screenshot(path=str(screenshots / "episode_heat.png"))
    page.locator("#rs-token-toggles label", has_text="special tokens").click()
    special.wait_for(state="visible")

    # A turn link in the timeline scrolls the token view to that turn.
    page.locator("#rs-episode-conversation .rs-turn-no", has_text="Turn 3").click()
    page.wait_for_function(f"""() => {{
        const t = document.getElementById('turn-3'), box = document.querySelector('{TOKENS} .rs-tokview');
        const a = t.getBoundingClientRect(), b = box.getBoundingClientRect();
        return a.top >= b.top && a.bottom <= b.bottom; }}""")
    assert not page.errors


@pytest.mark.browser
def test_tag_star_and_note_persist(page: Any, site: BrowseDb, screenshots: Path) -> None:
    target = site.real_ids[1]
    _open(page, site, target)
    page.locator("#rs-star").click()
    page.locator("#rs-star", has_text="★ Starred").wait_for()
    page.locator("#rs-annotate-box").get_by_text("Tags and note").click()
    tags = page.locator("#rs-tags input")
    tags.click()
    tags.fill("needs-look")
    tags.press("Enter")
    page.locator("#rs-note").locator("textarea, input").first.fill("turn 2 <b>reward</b> looks off")
    page.locator("#rs-save").click()
    page.locator("#rs-saved", has_text="saved").wait_for()

    page.reload()
    page.locator(f"{TOKENS} .rs-tokens .tok").first.wait_for(state="visible")
    header = page.locator("#rs-episode-header")
    assert header.locator(".rs-star").count() == 1
    assert "needs-look" in header.inner_text() and "turn 2 <b>reward</b> looks off" in header.inner_text()
    page.locator("#rs-star", has_text="★ Starred").wait_for()
    page.locator("#rs-annotate-box").get_by_text("Tags and note").click()
    assert "turn 2 <b>reward</b> looks off" == page.locator("#rs-note").locator("textarea, input").first.input_value()
    page.screenshot(path=str(screenshots / "episode_annotated.png"))

    store = Store(site.path)
    ep = store.get_episode(target)
    assert ep.starred and ep.tags == ("needs-look",) and ep.note == "turn 2 <b>reward</b> looks off"
    assert [r.id for r in store.list_episodes(EpisodeFilter(tags=("needs-look",)))] == [target]
    store.close()

    # Browse filters by the new tag and star.
    page.goto(site.url + "/")
    page.locator("#rs-filter-tags input").click()
    page.get_by_role("option", name="needs-look").click()
    _wait_info(page, "Episodes 1–1 of 1 matching")
    assert _row_ids(page) == [target]
    assert not page.errors


@pytest.mark.browser
def test_findings_listed_linked_and_drawn(page: Any, site: BrowseDb, screenshots: Path) -> None:
    _open(page, site, site.long_id)
    listing = page.locator("#rs-episode-findings")
    assert "logprob_mismatch" in listing.inner_text() and "retokenization_drift" in listing.inner_text()
    assert page.locator("#rs-episode-conversation .rs-turn-flagged").count() >= 6
    assert page.locator(f"{TOKENS} .tok-flag").count() > 0
    # A finding's link scrolls the token view to its first token.
    link = listing.locator("a[data-jump^='tok-']").nth(1)
    anchor = link.get_attribute("data-jump")
    link.click()
    page.wait_for_function(f"""() => {{
        const t = document.getElementById('{anchor}').nextElementSibling;
        const box = document.querySelector('{TOKENS} .rs-tokview');
        const a = t.getBoundingClientRect(), b = box.getBoundingClientRect();
        return t.classList.contains('tok-flag') && a.top >= b.top && a.bottom <= b.bottom; }}""")
    # The mismatch: per-token difference in the hover and as a heat map.
    page.locator("#rs-token-toggles label", has_text="logprob mismatch heat map").click()
    flagged = page.locator(f"{TOKENS} .tok.d4").first
    flagged.scroll_into_view_if_needed()
    flagged.hover()
    page.wait_for_function(f"() => document.querySelector('{TOKENS} .rs-hover').textContent.includes('Δ recomputed')")
    assert "logprob_mismatch" in page.locator(f"{TOKENS} .rs-hover").inner_text()
    bg = flagged.evaluate("e => getComputedStyle(e).backgroundColor")
    assert bg not in ("rgba(0, 0, 0, 0)", "transparent")
    page.screenshot(path=str(screenshots / "episode_findings.png"))
    page.locator("#rs-token-toggles label", has_text="logprob mismatch heat map").click()
    assert not page.errors


@pytest.mark.browser
def test_fork_button_hands_the_turn_to_step(page: Any, site: BrowseDb) -> None:
    _open(page, site, site.real_ids[0])
    page.locator("#rs-episode-conversation a[data-fork='1']").click()
    if page.locator("#rs-tab-step-button").count():
        page.wait_for_function("() => document.querySelector('#rs-tab-step-button').getAttribute('aria-selected') === 'true'")
    assert not page.errors


@pytest.mark.solo
@pytest.mark.browser
def test_long_episode_token_view_is_responsive(page: Any, site: BrowseDb, screenshots: Path) -> None:
    """Figure: the browser's time to show the 32,000-token view after Open (printed; bounded loosely)."""
    page.goto(f"{site.url}/?episode={site.real_ids[0]}")
    page.locator(f"{TOKENS} .rs-tokens .tok").first.wait_for(state="visible", timeout=60_000)
    box = page.locator("#rs-episode-id").locator("input, textarea").first
    timings = []
    for target in (site.long_id, site.real_ids[0], site.long_id):
        box.fill(target)
        start = time.perf_counter()
        page.locator("#rs-episode-open").click()
        page.wait_for_function(
            f"""() => {{ const c = document.querySelector('#rs-episode-header .rs-id code');
                return c && c.textContent === '{target}' &&
                    document.querySelectorAll('{TOKENS} .rs-tokens .tok').length > 0; }}""", timeout=60_000)
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        if target == site.long_id:
            timings.append(time.perf_counter() - start)
    drawn = page.locator(f"{TOKENS} .rs-tokens .tok").count()
    assert 0 < drawn < 8_000  # the blocks near the screen, not all 32,000 tokens
    start = time.perf_counter()
    page.locator(f'{TOKENS} .rs-turnnav a[data-jump="turn-50"]').click()
    tok = page.locator("#turn-50")
    tok.wait_for(state="visible")
    tok.hover()
    i = int(tok.get_attribute("data-i"))
    page.wait_for_function(f"() => document.querySelector('{TOKENS} .rs-hover').textContent.startsWith('#{i} ')")
    hover_s = time.perf_counter() - start
    assert i > 25_000
    start = time.perf_counter()
    page.locator("#rs-token-toggles label", has_text="logprob heat map").click()
    page.wait_for_function(f"() => document.querySelector('{TOKENS}').classList.contains('rs-heat')")
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    toggle_s = time.perf_counter() - start
    print(f"\n[figure] browser: 32,000-token episode view shown {min(timings):.2f} s after Open "
          f"(runs: {', '.join(f'{t:.2f}' for t in timings)}); jump to turn 50 and hover {hover_s:.2f} s; heat toggle {toggle_s:.2f} s")
    page.screenshot(path=str(screenshots / "episode_32k.png"))
    assert min(timings) < 15 and hover_s < 5 and toggle_s < 5
    assert not page.errors


@pytest.mark.browser
def test_the_diagnosis_shows_in_browse_and_the_episode(page: Any, site: BrowseDb, screenshots: Path) -> None:
    store = Store(site.path)
    try:
        long = store.list_episodes(EpisodeFilter(ids=(site.long_id,)))[0]
        shown = next(r for r in store.list_episodes(limit=20) if r.diagnosis)  # on Browse's first page
    finally:
        store.close()
    assert long.diagnosis  # the stored line Browse shows
    page.goto(f"{site.url}/?episode={site.long_id}")
    page.locator(f"{TOKENS} .rs-tokens .tok").first.wait_for(state="visible", timeout=60_000)
    listing = page.locator("#rs-episode-findings")
    assert listing.locator(".rs-diagnosis").inner_text() == f"Diagnosis: {long.diagnosis}"
    assert listing.locator(".rs-root").count() >= 1
    assert page.locator(f"{TOKENS} .tok-root").count() > 0
    page.screenshot(path=str(screenshots / "episode_diagnosis.png"))
    page.goto(site.url + "/")
    cell = page.locator(f"#rs-episode-table tr[data-id='{shown.id}'] td.c-diag")
    cell.wait_for(timeout=60_000)
    assert cell.inner_text().strip() == shown.diagnosis
    assert not page.errors


CONTRAST_JS = """(sel) => {
    const lum = (c) => { const [r, g, b] = c.match(/[\\d.]+/g).map(Number).slice(0, 3).map((v) => {
        v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
    const bg = (e) => { for (; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor;
        if (c && !c.startsWith('rgba(0, 0, 0, 0)') && c !== 'transparent') return c; } return 'rgb(255, 255, 255)'; };
    return [...document.querySelectorAll(sel)].filter((e) => e.textContent.trim()).map((e) => {
        const a = lum(getComputedStyle(e).color), b = lum(bg(e));
        return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); });
}"""


@pytest.mark.browser
def test_the_why_is_on_the_first_screen(page: Any, site: BrowseDb, screenshots: Path) -> None:
    """At 1440x900: Browse's filters fold to one row, the table's header is on the first screen and its key
    columns fit; what explains reads at 4.5:1; an opened episode shows its turn card and tokens at once."""
    page.goto(site.url + "/")
    _wait_info(page, "matching")
    box = page.evaluate("""() => {
        const r = (s) => document.querySelector(s).getBoundingClientRect();
        return {head: r('#rs-episode-table thead').top, table: r('#rs-episode-table table').width,
                wrap: r('#rs-episode-table .rs-table-wrap').width, filters: r('#rs-browse-filters').height,
                text: r('#rs-filter-text').top, tags: r('#rs-filter-tags').top, wide: document.body.scrollWidth}; }""")
    assert box["head"] < 600 and box["table"] <= box["wrap"] and box["wide"] <= 1440
    assert box["filters"] < 130 and abs(box["text"] - box["tags"]) < 2  # one row
    heads = page.locator("#rs-episode-table thead th").all_inner_texts()
    for key in ("id", "env", "task", "status", "reason", "reward", "diagnosis"):
        assert any(h.startswith(key) for h in heads), key
    for name in ("id", "reason", "diag"):
        right = page.locator(f"#rs-episode-table thead th.c-{name}").evaluate("e => e.getBoundingClientRect().right")
        assert right <= 1440 - 24
    for sel in ("#rs-episode-table td.c-reason span", "#rs-episode-table td.c-diag span", ".rs-run-notes li"):
        assert all(c >= 4.5 for c in page.evaluate(CONTRAST_JS, sel)), sel
    cut = page.locator("#rs-episode-table td.c-reason span").first
    assert cut.get_attribute("title") == cut.inner_text()
    page.screenshot(path=str(screenshots / "browse_first_screen.png"))

    short = site.real_ids[0]
    _open(page, site, short)
    page.locator("#rs-pb-card .rs-pb-card").wait_for()
    tops = page.evaluate("""() => ({card: document.querySelector('#rs-pb-card').getBoundingClientRect().top,
        tokens: document.querySelector('#rs-episode-tokens .rs-tokview').getBoundingClientRect().top})""")
    assert tops["card"] < 900 - 150 and tops["tokens"] < 900 - 150
    assert not page.locator("#rs-turn-chart").is_visible()  # folded: five turns or fewer
    page.screenshot(path=str(screenshots / "episode_first_screen.png"))
    assert not page.errors
