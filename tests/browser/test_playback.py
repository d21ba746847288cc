"""Playback and re-execution in the Episode tab, in a real browser, on a database of their own.

A retail episode (retokenize: the model was sent text), a math episode run
on a problem file whose answers were changed afterwards (tito: the model
was sent ids), a 60-turn, 32,000-token episode, an imported one that has
no messages, and one whose model wrote hostile HTML. Re-executing writes
replay records, so these tests do not share the session's database.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.backends.tokenizers import load_tokenizer
from engine.envs import env_factory
from engine.formats import import_path
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Episode
from engine.store import Store
from engine.tokens.chat import decode
from tests.browser.conftest import HOSTILE, _free_port, _run_sync
from tests.fakes import FixedReplyBackend
from tests.fixtures_formats import slime_sample, write_slime_dump
from tests.synthetic import long_episode

CARD = "#rs-pb-card .rs-pb-card"
TOKENS = "#rs-episode-tokens"
CONV = "#rs-episode-conversation"


@dataclass(frozen=True)
class Site:
    url: str
    path: Path
    retail: Episode
    math: Episode
    long_id: str
    imported_id: str
    hostile_id: str
    prompts: dict[str, list[str]]  # episode id -> the prompt text the model received at each turn


def _run(make_env: Any, backend: Any, tok: Any, preset: str, task: str, **cfg: Any) -> Episode:
    return _run_sync(run_episode(make_env(), backend, tok, PRESETS[preset].with_(**cfg), task, preset=preset,
                                 tokenizer_name="smollm2"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from dashboard.app import build_app

    root = tmp_path_factory.mktemp("playback-ui")
    tok = load_tokenizer(None)
    store = Store(root / "rollscope.db")
    retail_env = env_factory("retail")
    retail = _run(retail_env, ScriptedBackend(retail_env().reference_reply, tok, mistake_rate=0.3, seed=2), tok, "slime-tau",
                  retail_env().tasks[2])
    probs = root / "problems.jsonl"
    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is 17+25?", "solutions": ["42"]}) + "\n")
    math_env = env_factory("math", str(probs))
    math = _run(math_env, ScriptedBackend(math_env().reference_reply, tok, mistake_rate=0.6, seed=3), tok, "areal-math", "q")
    assert any(t.reward == 1.0 for t in math.turns) and math.n_turns >= 3
    # The env's data changes after the run: the stored answer "42" is no longer the right one.
    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is 17+25?", "solutions": ["43"]}) + "\n")
    hostile_env = env_factory("math")
    hostile = _run(hostile_env, FixedReplyBackend(tok, HOSTILE), tok, "tito", hostile_env().tasks[0], max_turns=2)
    long = long_episode(tok)
    for ep in (retail, math, hostile, long):
        store.save_episode(ep)
    p = math.prompt_len
    sample = slime_sample(math.tokens.ids.tolist(), math.n_tokens - p, prompt="",
                          loss_mask=math.tokens.loss_mask[p:].tolist(), reward=1.0)
    import_path(write_slime_dump(root / "dump.pt", [sample]), "slime", store)
    imported = next(e for e in store.iter_episodes() if e.source.kind == "slime")
    prompts = {
        retail.id: [t.prompt_text for t in retail.turns],
        math.id: [decode(tok, math.tokens.ids[: t.prompt_len].tolist()) for t in math.turns],
    }
    store.close()
    demo = build_app(str(root / "rollscope.db"))
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    try:
        yield Site(f"http://127.0.0.1:{port}", root / "rollscope.db", retail, math, long.id, imported.id,
                   hostile.id, prompts)
    finally:
        demo.close()


TRANSPORT_ERRORS = ("AbortError: signal is aborted without reason", "Unexpected error Connection errored out")


@pytest.fixture
def page(page: Any) -> Any:
    """The shared page fixture, also collecting script errors Gradio only logs (a failing ``js_on_load``)."""
    page.script_errors = []
    page.on("console", lambda m: page.script_errors.append(m.text) if m.type == "error" else None)
    yield page
    # Gradio logs a dropped event stream (a busy machine, a request aborted as the next one starts) as an
    # error too; that is the transport's, not a script of ours failing.
    assert not [e for e in page.script_errors if not e.startswith(TRANSPORT_ERRORS)]


def _open(page: Any, site: Site, episode_id: str, n_turns: int) -> None:
    page.goto(f"{site.url}/?episode={episode_id}")
    page.locator(f"{TOKENS} .rs-tokens .tok").first.wait_for(state="visible", timeout=60_000)
    page.locator(f'{CARD}[data-episode="{episode_id}"][data-k="{n_turns - 1}"]').wait_for()


def _at(page: Any, k: int) -> Any:
    card = page.locator(f'{CARD}[data-k="{k}"]')
    card.wait_for()
    return card


def _prompt(page: Any) -> str:
    return page.locator(f"{CARD} .rs-pb-prompt").text_content()


def _marks(page: Any) -> dict[str, int]:
    return page.evaluate(f"""() => ({{
        gen: document.querySelectorAll('{TOKENS} .tok.pb-gen').length,
        hidden: document.querySelectorAll('{CONV} .rs-turn.pb-hidden').length,
        dimmed: document.querySelectorAll('{TOKENS} .rs-tblock.pb-after, {TOKENS} .tok.pb-after').length,
    }})""")


@pytest.mark.browser
def test_step_through_turns_shows_the_prompt_of_each(page: Any, site: Site, screenshots: Path) -> None:
    ep = site.retail
    n = ep.n_turns
    assert n >= 3
    _open(page, site, ep.id, n)
    assert _marks(page)["hidden"] == 0  # the last turn: the whole conversation
    page.locator("#rs-pb-first").click()
    card = _at(page, 0)
    assert _prompt(page) == site.prompts[ep.id][0]
    assert "Turn 0" in card.locator(".rs-pb-head").inner_text()
    m = _marks(page)
    assert m["hidden"] == n - 1 and m["dimmed"] > 0
    assert m["gen"] == sum(s.end - s.start for s in ep.segments if s.turn == 0 and s.kind == "assistant")
    assert page.locator(f"{CONV} .rs-turn:visible").count() == 1
    page.locator("#rs-pb-next").click()
    _at(page, 1)
    assert _prompt(page) == site.prompts[ep.id][1]
    assert _marks(page)["hidden"] == n - 2
    page.locator("#rs-pb-next").click()
    _at(page, 2)
    assert _prompt(page) == site.prompts[ep.id][2]
    page.evaluate("() => document.getElementById('rs-pb-card').scrollIntoView({block: 'start'})")
    page.screenshot(path=str(screenshots / "playback_retail_turn2.png"))
    # The token view wraps its lines between words: a short token without a space ("instead", "source") is never cut
    # across two lines, as it was when lines broke at any character.
    cut = page.evaluate("""() => [...document.querySelectorAll('.rs-tokens .tok')].filter(t => t.offsetParent !== null
        && /^[A-Za-z0-9_]{2,16}$/.test(t.textContent) && t.getClientRects().length > 1).map(t => t.textContent)""")
    shown = page.evaluate("""() => [...document.querySelectorAll('.rs-tokens .tok')].filter(t =>
        t.offsetParent !== null && /^[A-Za-z0-9_]{2,16}$/.test(t.textContent)).length""")
    assert shown > 100 and cut == [], cut
    page.evaluate(f"() => document.querySelector('{CONV}').scrollIntoView({{block: 'start'}})")
    page.screenshot(path=str(screenshots / "playback_retail_turn2_views.png"))
    page.locator("#rs-pb-prev").click()
    _at(page, 1)
    assert _prompt(page) == site.prompts[ep.id][1]
    # The slider, dragged (set) by the researcher.
    page.locator("#rs-pb-slider input[type=range]").fill(str(n - 2))
    _at(page, n - 2)
    assert _prompt(page) == site.prompts[ep.id][n - 2]
    page.locator("#rs-pb-last").click()
    _at(page, n - 1)
    assert _marks(page)["hidden"] == 0
    assert not page.errors


@pytest.mark.browser
def test_tito_prompts_and_reexecute_reproduced_and_diverged(page: Any, site: Site, screenshots: Path) -> None:
    ep = site.math
    _open(page, site, ep.id, ep.n_turns)
    for k in range(ep.n_turns):
        page.locator("#rs-pb-slider input[type=range]").fill(str(k))
        _at(page, k)
        assert _prompt(page) == site.prompts[ep.id][k]
    # The problem file's answer changed after the run: where the model said "42" (stored: correct),
    # the env now says it is wrong.
    first = next(t.index for t in ep.turns if t.reward == 1.0)
    page.locator("#rs-pb-reexec").click()
    replay = page.locator("#rs-pb-replay")
    replay.locator(".rs-pb-first", has_text="first divergence").wait_for(timeout=30_000)
    # It goes on to the end: the turn's answer and reward differ, the turns after it are as stored, and the
    # episode's reward, made of the env's rewards by the preset's rule, is no longer the recorded one. The answer's
    # change is said as its path, not as two dumps.
    from engine.loop.rewards import episode_rewards

    now = episode_rewards(ep.config.loop, [0.0 if t.index == first else t.reward for t in ep.turns])[2]
    assert now != ep.reward
    assert (f"diverged at turn {first}, observation; 1 more difference after it; the reward does not reproduce "
            f"(recorded {ep.reward:g}, now {now:g})" in replay.inner_text())
    assert replay.locator("tr.rs-pb-div").count() == 2 and replay.locator("tr.rs-pb-ok").count() == ep.n_turns - 1
    change = replay.locator("tr.rs-pb-div .rs-pb-diff li").first
    assert change.get_attribute("data-change") == "changed"
    assert change.inner_text().startswith("`[0].content` changed: 'Congratulations! You are correct!' ->")
    page.locator("#rs-pb-last").click()
    _at(page, ep.n_turns - 1)
    replay.locator(f"a[data-pb-turn='{first}']").first.click()  # the divergent turn plays back
    _at(page, first)
    assert "diverged on observation" in page.locator(f"{CARD} .rs-pb-head").inner_text()
    page.locator("#rs-pb-replay").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "playback_math_diverged.png"))

    # The retail episode's env still has its data: it reproduces, and earlier runs are listed.
    _open(page, site, site.retail.id, site.retail.n_turns)
    for _ in range(2):
        page.locator("#rs-pb-reexec").click()
        page.locator("#rs-pb-replay .rs-pb-vhead", has_text="reproduced").wait_for(timeout=30_000)
    page.locator("#rs-pb-replay summary", has_text="1 earlier re-execution").wait_for()
    page.locator("#rs-pb-reexec").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "playback_retail_reproduced.png"))
    store = Store(site.path)
    assert [r["kind"] for r in store.replays(site.retail.id)] == ["reproduced", "reproduced"]
    assert [r["kind"] for r in store.replays(ep.id)] == ["diverged:observation"]
    store.close()
    assert not page.errors


GEN_SHOWN = f"""() => {{
    const t = document.querySelector('{TOKENS} .tok.pb-gen-first'), v = document.querySelector('{TOKENS} .rs-tokview');
    if (!t) return false;
    const a = t.getBoundingClientRect(), b = v.getBoundingClientRect();
    const head = v.querySelector('.rs-tokhead').getBoundingClientRect();
    return a.top >= head.bottom && a.bottom <= b.bottom && a.top < innerHeight && a.bottom > 0; }}"""


@pytest.mark.solo
@pytest.mark.browser
def test_long_episode_steps_without_rerendering_the_token_view(page: Any, site: Site, screenshots: Path) -> None:
    _open(page, site, site.long_id, 60)
    page.evaluate(f"() => {{ window.__view = document.querySelector('{TOKENS} .rs-tokview'); }}")
    # The researcher watches the token view while stepping: the controls stick to the top of the page.
    # The whole token view in sight: so are the controls, and they stick to the top of the page past their place.
    page.evaluate(f"() => document.querySelector('{TOKENS} .rs-tokview').scrollIntoView({{block: 'end'}})")
    controls = page.locator("#rs-pb-controls").bounding_box()
    assert controls is not None and -1 <= controls["y"] <= 200
    page.evaluate("() => window.scrollBy(0, 600)")
    controls = page.locator("#rs-pb-controls").bounding_box()
    assert controls is not None and -1 <= controls["y"] <= 5
    page.evaluate(f"() => document.querySelector('{TOKENS} .rs-tokview').scrollIntoView({{block: 'end'}})")
    page.locator("#rs-pb-first").click()
    _at(page, 0)
    # Timed in the page, from the click to the new card with the token view and timeline marked.
    page.evaluate("""() => document.getElementById('rs-pb-next').addEventListener(
        'click', () => { window.__clicked = performance.now(); }, true)""")
    times = []
    for k in range(1, 11):
        page.locator("#rs-pb-next").click()
        done = page.wait_for_function(f"""() => document.querySelector('{CARD}[data-k="{k}"]')
            && document.querySelectorAll('{CONV} .rs-turn.pb-hidden').length === {59 - k}
            && document.querySelector('{TOKENS} .tok.pb-gen-first') && performance.now()""", polling="raf")
        times.append(done.json_value() - page.evaluate("() => window.__clicked"))
        page.wait_for_function(GEN_SHOWN)  # turn k's generated tokens scrolled into the token view
    print(f"\nbrowser: next on the 32,000-token episode, click to new card and marked views: "
          f"mean {sum(times) / len(times):.0f} ms, max {max(times):.0f} ms")
    assert max(times) < 1000
    # The same token view element throughout: restyled, not re-rendered.
    assert page.evaluate(f"() => window.__view === document.querySelector('{TOKENS} .rs-tokview')")
    assert page.locator(f"{TOKENS} .tok.pb-gen-first").count() == 1 and _marks(page)["gen"] > 0
    page.screenshot(path=str(screenshots / "playback_long_tokens.png"))

    # A step taken while the token view is off the page scrolls it once it comes into view.
    page.evaluate("() => window.scrollTo(0, 0)")
    page.locator("#rs-pb-slider input[type=range]").fill("41")
    _at(page, 41)
    page.locator(TOKENS).scroll_into_view_if_needed()
    page.wait_for_function(GEN_SHOWN)
    assert page.evaluate(f"() => window.__view === document.querySelector('{TOKENS} .rs-tokview')")
    assert not page.errors


@pytest.mark.browser
def test_imported_and_hostile_episodes(page: Any, site: Site, screenshots: Path) -> None:
    _open(page, site, site.imported_id, site.math.n_turns)
    page.locator("#rs-pb-first").click()
    card = _at(page, 0)
    text = card.inner_text()
    assert "no chat messages stored" in text and "no parsed actions and no env answers stored" in text
    assert _prompt(page) == site.prompts[site.math.id][0]
    page.locator("#rs-pb-reexec").click()
    page.locator("#rs-pb-replay", has_text="imported from slime").wait_for(timeout=30_000)
    page.locator("#rs-pb-controls").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "playback_imported.png"))

    _open(page, site, site.hostile_id, 2)
    assert HOSTILE in page.locator(f"{CARD} .rs-pb-gen").first.text_content()
    page.locator("#rs-pb-first").click()
    _at(page, 0)
    assert page.evaluate("() => window.__xss === undefined")
    assert not page.errors


@pytest.mark.browser
def test_a_link_to_a_turn_and_a_token_opens_there_and_marks_it(page: Any, site: Site, screenshots: Path) -> None:
    """Figure: the time from a link with &turn=K&token=N to the token marked on screen (printed)."""
    store = Store(site.path)
    try:
        ep = store.get_episode(site.long_id)
    finally:
        store.close()
    # A finding link is such a link: the root with a token, in the long episode.
    f = max((f for f in ep.all_findings() if f.token_start is not None and f.turn is not None),
            key=lambda f: f.token_start or 0)  # the farthest in: its block is drawn only when reached
    k, n = f.turn, f.token_start
    start = time.perf_counter()
    page.goto(f"{site.url}/?episode={ep.id}&turn={k}&token={n}")
    page.wait_for_function(f"""() => {{ const t = document.querySelector('{TOKENS} .tok.rs-linked[data-i="{n}"]');
        if (!t) return false; const r = t.getBoundingClientRect();
        return r.top >= 0 && r.bottom <= window.innerHeight; }}""", timeout=60_000)
    took = time.perf_counter() - start
    print(f"\nlink to turn {k}, token {n:,} of {ep.n_tokens:,}: marked on screen in {took:.2f} s")
    page.locator(f'{CARD}[data-episode="{ep.id}"][data-k="{k}"]').wait_for()  # playback at that turn
    assert page.locator(f"{TOKENS} .tok.rs-linked").count() == 1
    page.screenshot(path=str(screenshots / "deep_link_token.png"))
    # The finding's own link is that link.
    href = page.locator(f'#rs-episode-findings a[data-jump="tok-{n}"]').first.get_attribute("href")
    assert href == f"?episode={ep.id}&turn={k}&token={n}"
