"""Every alarm the dashboard shows is one the engine raises: a sweep over the demo and a clean run of each preset.

Each episode is opened in the Episode tab, played back at every turn, and compared with another episode. The
findings on the page are exactly the engine's (the same kinds, as many), and a playback warning that the prompt's
tokens differ from what the model was sent, or that a prompt rewrites the previous one, appears exactly where the
engine's own queries (``prompt_at``, ``rewrites_at``) say so.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine import episode_tokenizer, prompt_at, rewrites_at
from engine.backends.scripted import ScriptedBackend
from engine.backends.tokenizers import load_tokenizer
from engine.envs import env_factory
from engine.launch import demo
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Episode
from engine.store import EpisodeFilter, Store
from tests.browser.conftest import serve
from tests.conftest import QWEN3_DIR

CARD = "#rs-pb-card .rs-pb-card"
DIFFERS = "decode to a different text"
REWRITES = "rewrites the previous turn's prompt"
# A clean run of each preset: the env it is made for, two tasks, no mistakes.
CLEAN = (("tito", "math"), ("areal-math", "math"), ("areal-multiturn", "math"), ("tito", "retail"),
         ("slime-tau", "retail"), ("slime-tau-seed", "retail"))


@dataclass(frozen=True)
class Sweep:
    url: str
    episodes: tuple[Episode, ...]


def _build(db: Path) -> tuple[Episode, ...]:
    store = Store(db)
    demo.build_demo(store, qwen3=QWEN3_DIR)
    tok = load_tokenizer(None)
    for preset, env_name in CLEAN:
        make_env = env_factory(env_name)
        for task in make_env().tasks[:2]:
            backend = ScriptedBackend(make_env().reference_reply, tok, mistake_rate=0.0, seed=1, tokenizer_name="smollm2")
            store.save_episode(asyncio.run(run_episode(make_env(), backend, tok, PRESETS[preset], task, preset=preset,
                                                       tokenizer_name="smollm2")))
    episodes = tuple(store.iter_episodes(EpisodeFilter()))
    store.close()
    return episodes


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sweep]:
    if not (QWEN3_DIR / "tokenizer.json").is_file():
        pytest.fail(f"the Qwen3 test tokenizer is missing at {QWEN3_DIR}; run `make test-deps`")
    db = tmp_path_factory.mktemp("sweep") / "rollscope.db"
    # Built in a thread of its own: the browser's event loop runs in this one, and the runs use asyncio.run.
    with ThreadPoolExecutor(max_workers=1) as pool:
        episodes = pool.submit(_build, db).result()
    with serve(db) as url:
        yield Sweep(url, episodes)


def _engine_warnings(ep: Episode) -> list[tuple[int, str]]:
    """(turn, which) for every playback warning the engine's queries call for."""
    tok, why = episode_tokenizer(ep)
    out: list[tuple[int, str]] = []
    previous = None
    for k in range(ep.n_turns):
        p = prompt_at(ep, k, tok, why)
        if p.tokens_differ_at is not None:
            out.append((k, DIFFERS))
        if previous is not None and p.text is not None and rewrites_at(previous, p.text) is not None:
            out.append((k, REWRITES))
        previous = p.text
    return out


def _page_warnings(page: Any, ep: Episode) -> list[tuple[int, str]]:
    out = []
    for k in range(ep.n_turns):
        if ep.n_turns > 1:  # one turn: the slider is off, the card is the turn's
            page.locator("#rs-pb-slider input[type=range]").fill(str(k))
        card = page.locator(f'{CARD}[data-episode="{ep.id}"][data-k="{k}"]')
        card.wait_for()
        notes = " ".join(card.locator(".rs-note.rs-warn, .rs-note.rs-error").all_inner_texts())
        out += [(k, which) for which in (DIFFERS, REWRITES) if which in notes]
    return out


def _open(page: Any, ep: Episode) -> None:
    page.locator("#rs-tab-episode-button").click()
    page.locator("#rs-episode-id input, #rs-episode-id textarea").first.fill(ep.id)
    page.locator("#rs-episode-open").click()
    page.locator(f'{CARD}[data-episode="{ep.id}"]').wait_for(timeout=60_000)
    page.wait_for_function(f"""() => document.querySelector('#rs-episode-header .rs-id code')?.textContent
                                     === '{ep.id}'""")


def _compare(page: Any, a: Episode, b: Episode) -> str:
    page.locator("#rs-tab-compare-button").click()
    page.locator("#rs-compare-a input, #rs-compare-a textarea").first.fill(a.id)
    page.locator("#rs-compare-b input, #rs-compare-b textarea").first.fill(b.id)
    page.locator("#rs-compare-run").click()
    page.wait_for_function(f"""() => {{ const v = document.querySelector('#rs-compare-view');
        return v && v.querySelector('.rs-cmp-verdict') && v.textContent.includes('{a.id}')
            && v.textContent.includes('{b.id}'); }}""", timeout=30_000)
    return page.locator("#rs-compare-view").inner_text()


@pytest.mark.browser
def test_the_page_shows_the_engines_findings_and_no_other_alarm(page: Any, sweep: Sweep, screenshots: Path) -> None:
    assert len(sweep.episodes) >= 28 + 2 * len(CLEAN)
    page.goto(f"{sweep.url}/?episode={sweep.episodes[0].id}")
    page.locator("#rs-episode-header .rs-status").wait_for(timeout=60_000)
    # The page's web font lacks some bold capitals ("AbORTED"): the status pill is set in the system's face.
    family = page.locator("#rs-episode-header .rs-status").evaluate("e => getComputedStyle(e).fontFamily")
    assert "Source Sans" not in family.split(",")[0]
    shown_alarms = 0
    for i, ep in enumerate(sweep.episodes):
        _open(page, ep)
        page.locator("#rs-episode-findings .rs-findings").wait_for()
        kinds = Counter(page.locator("#rs-episode-findings .rs-finding > b").all_text_contents())
        assert kinds == Counter(f.kind for f in ep.all_findings()), (ep.id, ep.preset, ep.tags)
        assert _page_warnings(page, ep) == _engine_warnings(ep), (ep.id, ep.preset, ep.tags)
        shown_alarms += sum(kinds.values())
        # Compared with the next episode: the verdict says where they diverge, nothing about their tokens.
        assert DIFFERS not in _compare(page, ep, sweep.episodes[(i + 1) % len(sweep.episodes)])
        if i == 0:
            # A token diff of this pair is cleared when the next pair is compared: it would describe the wrong one.
            page.locator("#rs-compare-tokens-run").click()
            page.locator("#rs-compare-tokens .rs-tokdiff").first.wait_for(timeout=60_000)
        elif i == 1:
            assert page.locator("#rs-compare-tokens .rs-tokdiff").count() == 0
            assert "press Token diff" in page.locator("#rs-compare-tokens").inner_text()
    assert shown_alarms  # the demo's findings were on the pages
    page.screenshot(path=str(screenshots / "sweep_last_compare.png"))
    assert not page.errors


CONTRAST = """(sel) => [...document.querySelectorAll(sel)].slice(0, 20).map(el => {
  const rgb = c => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
                                      .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  let bg = el, back = [255, 255, 255];
  while (bg) { const c = rgb(getComputedStyle(bg).backgroundColor);
               if (c.length === 3 || (c.length === 4 && c[3] > 0)) { back = c.slice(0, 3); break; } bg = bg.parentElement; }
  const [a, b] = [lum(rgb(getComputedStyle(el).color)), lum(back)];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
})"""


@pytest.mark.browser
def test_browse_text_that_explains_reads_at_four_and_a_half_to_one(page: Any, sweep: Sweep) -> None:
    page.goto(f"{sweep.url}/")
    page.locator("#rs-episode-table tbody td.c-reason").first.wait_for(timeout=60_000)
    for sel in ("#rs-episode-table td.c-reason", "#rs-episode-table td.c-diag"):
        ratios = page.evaluate(CONTRAST, sel)
        assert ratios and min(ratios) >= 4.5, (sel, ratios)
    # A cut reason keeps its whole text in a tooltip.
    cell = page.locator("#rs-episode-table td.c-reason span[title]").first
    assert cell.get_attribute("title") == cell.text_content()
