"""The Episode tab's views of the entropy and the top K alternatives, in a real browser: the entropy heat (a colour
per bucket, the legend's bounds), the hover's alternatives with their probabilities, the turn card's forks (each a
link that lands on its token), the per-turn chart's mean entropy; and an episode without entropy, whose toggle
is greyed."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dashboard.views.alternatives import ENTROPY_BOUNDS
from engine import Episode, turn_entropy
from engine.backends.tokenizers import load_tokenizer
from engine.envs.math import MathEnv
from engine.store import Store
from tests.alternatives import with_alternatives
from tests.browser.conftest import serve
from tests.planted import play

TOKENS = "#rs-episode-tokens"
VIEW = f"{TOKENS} .rs-tokview"
K = 5


@dataclass(frozen=True)
class Site:
    url: str
    episode: Episode  # top K and entropy recorded
    estimated: Episode  # top K, and the entropy estimated from them
    plain: Episode  # neither
    texts: dict[int, str]  # each id of the vocabulary the test reads, decoded alone


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    db = tmp_path_factory.mktemp("entropy") / "rollscope.db"

    def seed() -> tuple[Episode, Episode, Episode, dict[int, str]]:
        tok = load_tokenizer(None)
        plain = play(MathEnv, tok, "areal-math", task=1, mistake_rate=0.5, seed=2, tokenizer_name="smollm2")
        ep, _ = with_alternatives(plain.evolve(id="topk-" + plain.id), k=K, seed=4)
        estimated, _ = with_alternatives(plain.evolve(id="estimated-" + plain.id), k=K, seed=4, estimated=True)
        store = Store(db)
        store.save_episode(ep)
        store.save_episode(estimated)
        store.save_episode(plain)
        store.close()
        ids = sorted({int(i) for i in ep.tokens.top_ids.ravel() if i >= 0} | set(ep.tokens.ids.tolist()))
        texts = tok.batch_decode([[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return ep, estimated, plain, dict(zip(ids, texts, strict=True))

    with ThreadPoolExecutor(max_workers=1) as pool:  # Playwright may run a loop in this thread
        ep, estimated, plain, texts = pool.submit(seed).result()
    with serve(db) as url:
        yield Site(url, ep, estimated, plain, texts)


def _open(page: Any, url: str) -> None:
    page.goto(url)
    page.locator(f"{TOKENS} .rs-tokens .tok").first.wait_for(state="visible", timeout=60_000)


def _bucket(entropy: float) -> int:
    return int(np.digitize(entropy, ENTROPY_BOUNDS))


def _percent(p: float) -> float:
    return p * 100


def _hover(page: Any, i: int) -> None:
    """Hover token ``i`` once it sits in the middle of the view (the view draws blocks as it scrolls), and wait
    for the hover to name it."""
    page.evaluate(f"""() => document.querySelector('{TOKENS} .tok[data-i="{i}"]').scrollIntoView({{block: 'center'}})""")
    page.wait_for_timeout(300)
    page.locator(f'{TOKENS} .tok[data-i="{i}"]').hover()
    page.wait_for_function(f"() => document.querySelector('{TOKENS} .rs-hover').textContent.startsWith('#{i} ')")


@pytest.mark.browser
def test_entropy_heat_hover_alternatives_and_fork_links(page: Any, site: Site, screenshots: Path) -> None:
    ep = site.episode
    t = ep.tokens
    _open(page, f"{site.url}/?episode={ep.id}")
    toggle = page.locator("#rs-token-toggles label", has_text="entropy heat map")
    assert float(toggle.evaluate("e => getComputedStyle(e).opacity")) == 1
    assert not page.locator(f"{TOKENS} .rs-ent-legend").is_visible()

    # The heat: every generated token drawn in its bucket's colour, one colour per bucket, the legend's too.
    toggle.click()
    page.wait_for_function(f"() => document.querySelector('{TOKENS}').classList.contains('rs-entheat')")
    legend = page.locator(f"{TOKENS} .rs-ent-legend")
    assert legend.is_visible()
    assert legend.inner_text().split() == ["entropy,", "nats", "<", "0.1", "<", "0.5", "<", "1", "<", "2", "<", "3",
                                           "≥", "3"]
    drawn = page.evaluate(f"""() => [...document.querySelectorAll('{TOKENS} .rs-tokens .tok')].map(e => [
        Number(e.dataset.i), getComputedStyle(e).backgroundColor])""")
    colour: dict[int, set[str]] = {}
    for i, bg in drawn:
        if math.isfinite(float(t.entropy[i])):
            colour.setdefault(_bucket(float(t.entropy[i])), set()).add(bg)
    assert len(colour) >= 4, colour  # the episode spans several buckets
    assert all(len(c) == 1 for c in colour.values()), colour
    by_bucket = {b: next(iter(c)) for b, c in colour.items()}
    assert len(set(by_bucket.values())) == len(by_bucket)  # a different colour per bucket
    swatches = page.evaluate(f"""() => [...document.querySelectorAll('{TOKENS} .rs-ent-legend .rs-swatch')]
        .map(e => getComputedStyle(e).backgroundColor)""")
    assert all(swatches[b] == bg for b, bg in by_bucket.items())
    context = {bg for i, bg in drawn if not math.isfinite(float(t.entropy[i]))}
    assert context == {"rgba(0, 0, 0, 0)"}  # no entropy, no heat
    page.screenshot(path=str(screenshots / "episode_entropy_heat.png"))

    # Hover a fork: its entropy, and the top K with their texts and probabilities, the sampled one marked.
    per_turn = turn_entropy(ep)
    fork = next(f for te in per_turn for f in te.forks if f.sampled_rank is not None and f.sampled_rank > 0)
    _hover(page, fork.position)
    hover = page.locator(f"{TOKENS} .rs-hover").inner_text()
    assert f"entropy {fork.entropy:.3f} nats" in hover and "estimate" not in hover
    shown = page.locator(f"{TOKENS} .rs-hover-alts .rs-alt").all_inner_texts()
    assert len(shown) == K
    for said, choice in zip(shown, fork.alternatives, strict=True):
        m = re.fullmatch(r'(".*") (\d+)%( ✓ sampled)?', said, re.S)
        assert m, said
        assert json.loads(m.group(1)) == site.texts[choice.token_id]
        assert abs(int(m.group(2)) - _percent(choice.prob)) <= 0.5 + 1e-6
        assert bool(m.group(3)) == choice.sampled
    assert page.locator(f"{TOKENS} .rs-hover-alts .rs-alt-sampled").count() == 1
    page.screenshot(path=str(screenshots / "episode_entropy_hover.png"))

    # A token sampled outside the top K says so, with its own probability.
    outside = next(f for te in per_turn for f in te.forks if f.sampled_rank is None)
    _hover(page, outside.position)
    last = page.locator(f"{TOKENS} .rs-hover-alts .rs-alt-sampled").inner_text()
    assert last.startswith(f"sampled {json.dumps(site.texts[outside.token_id], ensure_ascii=False)} ")
    assert last.endswith(f"not in the top {K}")

    # The turn card names its forks, each a link to its token.
    card = page.locator("#rs-pb-card .rs-pb-card")
    card.wait_for()
    k = int(card.get_attribute("data-k"))
    te = per_turn[k]
    links = page.locator("#rs-pb-card .rs-pb-forks a[data-jump]")
    assert [a.get_attribute("data-jump") for a in links.all()] == [f"tok-{f.position}" for f in te.forks]
    assert [a.get_attribute("href") for a in links.all()] == [f"?episode={ep.id}&turn={k}&token={f.position}"
                                                              for f in te.forks]
    assert f"mean entropy {te.mean:.3f} nats" in page.locator("#rs-pb-card .rs-pb-forks").inner_text()
    page.evaluate(f"() => {{ document.querySelector('{VIEW}').scrollTop = 0; }}")
    target = te.forks[-1].position
    links.last.click()
    page.wait_for_function(f"""() => {{
        const t = document.querySelector('{TOKENS} .tok[data-i="{target}"]');
        const v = document.querySelector('{VIEW}');
        if (!t) return false;
        const a = t.getBoundingClientRect(), b = v.getBoundingClientRect();
        return t.classList.contains('rs-flash') && a.top >= b.top && a.bottom <= b.bottom; }}""")
    page.screenshot(path=str(screenshots / "episode_entropy_fork_link.png"))

    # The per-turn chart: mean entropy per turn, on a second axis.
    page.locator("#rs-turn-chart-box").get_by_text("Per turn").first.click()
    chart = page.locator("#rs-turn-chart .js-plotly-plot")
    chart.wait_for()
    series = chart.evaluate("e => e.data.filter(t => t.name === 'mean entropy').map(t => [t.y, t.yaxis])")
    assert len(series) == 1
    ys, axis = series[0]
    assert axis != "y3" and [round(y, 5) for y in ys] == [round(x.mean, 5) for x in per_turn]
    assert not page.errors


@pytest.mark.browser
def test_an_episode_without_entropy_greys_its_toggle_and_says_why(page: Any, site: Site, screenshots: Path) -> None:
    _open(page, f"{site.url}/?episode={site.plain.id}")
    toggle = page.locator("#rs-token-toggles label", has_text="entropy heat map")
    assert float(toggle.evaluate("e => getComputedStyle(e).opacity")) < 0.5  # greyed
    others = page.locator("#rs-token-toggles label", has_text="logprob heat map")
    assert float(others.evaluate("e => getComputedStyle(e).opacity")) == 1
    toggle.click()
    page.wait_for_function(f"() => document.querySelector('{TOKENS}').classList.contains('rs-entheat')")
    said = page.locator(f"{TOKENS} .rs-ent-legend").inner_text()
    assert said.startswith("entropy: none recorded in this episode")
    assert page.locator("#rs-pb-card .rs-pb-forks").count() == 0
    page.locator(f"{TOKENS} .tok-train").nth(2).hover()
    page.wait_for_function(f"() => document.querySelector('{TOKENS} .rs-hover').textContent.includes(' id ')")
    assert "entropy" not in page.locator(f"{TOKENS} .rs-hover").inner_text()
    assert page.locator(f"{TOKENS} .rs-hover-alts span").count() == 0
    page.screenshot(path=str(screenshots / "episode_without_entropy.png"))
    # An entropy estimated from a server's top K says it is a lower bound, in the hover and the legend.
    est = site.estimated
    _open(page, f"{site.url}/?episode={est.id}")
    fork = turn_entropy(est)[0].forks[0]
    _hover(page, fork.position)
    assert f"entropy {fork.entropy:.3f} nats (estimate, lower bound)" in page.locator(f"{TOKENS} .rs-hover").inner_text()
    assert "lower bounds" in (page.locator(f"{TOKENS} .rs-ent-legend").text_content() or "")
    # Opening the episode with entropy takes the grey away.
    _open(page, f"{site.url}/?episode={site.episode.id}")
    page.wait_for_function("""() => getComputedStyle([...document.querySelectorAll('#rs-token-toggles label')]
        .find(e => e.textContent.includes('entropy'))).opacity === '1'""")
    assert not page.errors
