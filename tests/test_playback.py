"""Playback and re-execution in the Episode tab: the panel and the HTML, on real episodes.

The central check: the prompt the card shows at turn k is exactly what the
backend received at turn k, recorded by wrapping the backend: its ids
(tito: decoded with the episode's tokenizer) or its text (retokenize). The
engine's answers the card shows (``turn_span``, ``prompt_at``, ``reward_so_far``,
``findings_up_to``) are tested in ``test_episode_queries.py``.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dashboard.tabs import playback
from dashboard.views import playback as rp
from engine import prompt_at, turn_span
from engine.backends.base import GenerationRequest
from engine.backends.scripted import ScriptedBackend
from engine.backends.tokenizers import load_tokenizer
from engine.envs import env_factory
from engine.formats import import_path
from engine.loop.stepper import run_episode
from engine.loop.verdicts import ReplayResult, TurnVerdict
from engine.presets import PRESETS
from engine.records.episode import Episode, Finding, Severity
from engine.store import Store
from engine.tokens.chat import decode
from tests.fakes import Recording
from tests.fixtures_formats import slime_sample, write_slime_dump
from tests.synthetic import long_episode, synthetic_episode

HOSTILE = '<img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>'
PROMPT = re.compile(r'<pre class="rs-pb-prompt">(.*?)</pre>', re.S)


@pytest.fixture(scope="module")
def tok() -> Any:
    return load_tokenizer(None)


def _run(tok: Any, env: str, preset: str, task: int = 0, problems: str | None = None, backend: Any = None,
         **cfg: Any) -> tuple[Episode, list[GenerationRequest]]:
    make_env = env_factory(env, problems)
    first = make_env()
    rec = Recording(backend or ScriptedBackend(make_env().reference_reply, tok, mistake_rate=0.5, seed=task, tokenizer_name="smollm2"))
    ep = asyncio.run(run_episode(first, rec, tok, PRESETS[preset].with_(**cfg), first.tasks[task], preset=preset,
                                 tokenizer_name="smollm2"))
    return ep, rec.requests


@pytest.fixture(scope="module")
def tito(tok: Any) -> tuple[Episode, list[GenerationRequest]]:
    return _run(tok, "math", "areal-math", task=1)


@pytest.fixture(scope="module")
def retok(tok: Any) -> tuple[Episode, list[GenerationRequest]]:
    # A retail task whose scripted solution takes several tool calls.
    return _run(tok, "retail", "slime-tau", task=2)


def _shown_prompt(card: str) -> str:
    m = PROMPT.search(card)
    assert m, "the card shows no prompt text"
    return html.unescape(re.sub(r"<[^>]+>", "", m.group(1)))


def _loaded(ep: Episode, tok: Any) -> playback.Loaded:
    return playback.Loaded(ep, tok, None)


def test_tito_prompt_at_each_turn_is_the_ids_the_backend_received(tito: Any, tok: Any) -> None:
    ep, requests = tito
    assert ep.n_turns >= 3 and len(requests) == ep.n_turns
    loaded = _loaded(ep, tok)
    for k, (t, req) in enumerate(zip(ep.turns, requests, strict=True)):
        assert req.prompt_ids is not None and req.prompt_text is None
        assert list(req.prompt_ids) == ep.tokens.ids[: t.prompt_len].tolist()
        p = prompt_at(ep, k, tok)
        assert p.source == "tokens" and p.n_tokens == t.prompt_len == len(req.prompt_ids)
        assert p.text == decode(tok, list(req.prompt_ids))
        card = playback.turn_card(loaded, k)
        assert _shown_prompt(card) == p.text
        assert f'data-k="{k}"' in card and f"{t.prompt_len:,}" in card


def test_retokenize_prompt_at_each_turn_is_the_text_the_backend_received(retok: Any, tok: Any) -> None:
    ep, requests = retok
    assert ep.n_turns >= 3 and all(t.prompt_text for t in ep.turns)
    loaded = _loaded(ep, tok)
    for k, req in enumerate(requests):
        assert req.prompt_text is not None and req.prompt_ids is None
        p = prompt_at(ep, k, tok)
        assert p.source == "prompt_text" and p.text == req.prompt_text
        # slime's deltas re-encode to the same text here: no drift between the text sent and the trainer's ids.
        assert p.tokens_differ_at is None
        card = playback.turn_card(loaded, k)
        assert _shown_prompt(card) == req.prompt_text
        if k:
            # Only this turn's new text is highlighted; the rest is the previous prompt.
            new = html.unescape(re.search(r'<span class="rs-pb-new">(.*?)</span>', card, re.S).group(1))
            assert requests[k - 1].prompt_text + new == req.prompt_text or not new


def test_retokenize_ids_that_spell_another_text_are_flagged(retok: Any, tok: Any) -> None:
    ep, _ = retok
    turns = list(ep.turns)
    turns[1] = turns[1].__class__(**{**turns[1].__dict__, "prompt_text": turns[1].prompt_text.replace("You", "Yuo", 1)})
    p = prompt_at(ep.evolve(turns=tuple(turns)), 1, tok)
    assert p.tokens_differ_at is not None
    assert "not what the model was sent" in rp.render_turn(ep, 1, p)


def test_the_card_shows_the_findings_up_to_its_turn(tok: Any) -> None:
    ep = synthetic_episode(5)  # six turns, a finding at turn 0 in its token span
    at = lambda turn, **kw: Finding("k", Severity.WARNING, f"at {turn}", turn=turn, **kw)  # noqa: E731
    turns = list(ep.turns)
    turns[2] = turns[2].__class__(**{**turns[2].__dict__, "findings": (at(2),)})
    ep = ep.evolve(turns=tuple(turns), findings=(
        at(1),
        Finding("by_token", Severity.ERROR, "located by token only", token_start=turn_span(ep, 2).gen_start + 1),
        Finding("nowhere", Severity.INFO, "episode-wide"),
    ))
    card = rp.render_turn(ep, 1, prompt_at(ep, 1, tok))
    assert "at 1" in card and "at 2" not in card and "located by token only" not in card
    assert "1 episode-wide finding" in card


def test_hostile_text_is_escaped_in_the_card_and_verdict(tok: Any) -> None:
    from tests.fakes import FixedReplyBackend

    ep, _ = _run(tok, "math", "tito", backend=FixedReplyBackend(tok, HOSTILE), max_turns=2)
    card = playback.turn_card(_loaded(ep, tok), 1)
    assert HOSTILE in _shown_prompt(card)
    for bad in ("<img", "<script"):
        assert bad not in card
    res = ReplayResult(ep.id, True, False, (TurnVerdict(0, False, "observation", [{"content": HOSTILE}], HOSTILE),),
                       TurnVerdict(0, False, "observation", [{"content": HOSTILE}], HOSTILE))
    verdict = rp.render_replays([res.to_dict()])
    assert "<img" not in verdict and "<script" not in verdict and "&lt;img" in verdict


def test_imported_episode_without_messages_plays_back_what_it_has(tmp_path: Path, tito: Any, tok: Any) -> None:
    ep, _ = tito
    n, p = ep.n_tokens, ep.prompt_len
    sample = slime_sample(ep.tokens.ids.tolist(), n - p, prompt="", loss_mask=ep.tokens.loss_mask[p:].tolist(),
                          reward=1.0)
    store = Store(tmp_path / "imp.db")
    import_path(write_slime_dump(tmp_path / "0.pt", [sample]), "slime", store)
    imp = next(store.iter_episodes())
    assert not imp.messages and imp.tokenizer == "" and imp.n_turns == ep.n_turns
    loaded = playback.Episodes(store).get(imp.id)
    for k in range(imp.n_turns):
        card = playback.turn_card(loaded, k)
        # No prompt text in the dump: the prompt is decoded from the imported ids.
        assert _shown_prompt(card) == decode(tok, ep.tokens.ids[: imp.turns[k].prompt_len].tolist())
        assert "no chat messages stored" in card and "no parsed actions and no env answers stored" in card
        assert "decoded from the generated ids" in card
        assert "without a tokenizer name" in card and "no parsed action stored for this turn" in card
        assert "no action reached the env" not in card  # the record does not say: the dump keeps no actions
        assert "none: no fidelity checks ran" in card and "none so far" not in card
    from dashboard.views.episode import render_header

    header = render_header(imp)
    assert "none recorded (texts shown with the embedded SmolLM2)" in header
    assert re.search(r">0</span> · <span class=\"rs-dim\">not checked</span>", header)
    res = asyncio.run(playback.replay_stored(imp))
    assert not res.reproducible and "imported from slime" in rp.render_verdict(res)


def test_no_tokenizer_says_where_the_ids_are(tito: Any) -> None:
    ep, _ = tito
    p = prompt_at(ep, 1, None, "no such tokenizer")
    assert p.text is None and "no such tokenizer" in p.note
    assert "no such tokenizer" in rp.render_turn(ep, 1, p)


def _panel(store: Store) -> playback.PlaybackPanel:
    # The handlers use the store and the episode cache only; no Blocks are needed to call them.
    return playback.PlaybackPanel(*([None] * 8), playback.Episodes(store))  # type: ignore[arg-type]


def test_the_card_follows_a_change_of_episode_once(tmp_path: Path) -> None:
    import gradio as gr

    a, b = synthetic_episode(5), synthetic_episode(9)
    assert a.n_turns > 1 and b.n_turns > 1
    store = Store(tmp_path / "follow.db")
    store.save_episodes([a, b])
    panel = _panel(store)
    _, card, _, drawn = panel.follow(a.id, None, None)
    assert f'data-episode="{a.id}"' in card and f'data-k="{a.n_turns - 1}"' in card and drawn == a.id
    # The researcher stepped to turn 0; the same episode's change arriving again leaves every output alone.
    assert panel.step(a.id, a.n_turns - 1, "first")[0] == 0
    assert panel.follow(a.id, None, a.id) == [gr.skip()] * 4
    # Another episode (at the turn a link asks for), then back to the first, then none: each is drawn.
    _, card, _, drawn = panel.follow(b.id, 1, a.id)
    assert f'data-episode="{b.id}"' in card and 'data-k="1"' in card and drawn == b.id
    _, card, _, drawn = panel.follow(a.id, None, b.id)
    assert f'data-episode="{a.id}"' in card and drawn == a.id
    _, card, _, drawn = panel.follow(None, None, a.id)
    assert "data-episode" not in card and drawn is None
    # An episode that cannot be read: its error card, and the next answer for it is drawn again.
    _, card, _, drawn = panel.follow("no-such-episode", None, None)
    assert "no-such-episode" in card and drawn is None


@pytest.mark.solo
def test_steps_clamp_and_a_step_is_fast_on_a_long_episode(tmp_path: Path, tok: Any) -> None:
    ep = long_episode(tok)
    assert ep.n_turns == 60 and ep.n_tokens >= 32_000
    store = Store(tmp_path / "long.db")
    store.save_episode(ep)
    panel = _panel(store)
    slider, card, _ = panel.open(ep.id)
    assert 'data-k="59"' in card
    assert panel.step(ep.id, 0, "prev")[0] == 0 and panel.step(ep.id, 59, "next")[0] == 59
    assert panel.step(ep.id, 30, "last")[0] == 59 and panel.step(ep.id, 30, "first")[0] == 0
    times = []
    for how, k in [("next", k) for k in range(59)] + [("prev", k) for k in range(59, 0, -1)] + [("at", 7), ("at", 51)]:
        t0 = time.perf_counter()
        target, card = panel.step(ep.id, k, how)
        times.append(time.perf_counter() - t0)
        assert f'data-k="{target}"' in card
    mean, worst = statistics.mean(times), max(times)
    print(f"\nplayback step on a {ep.n_tokens:,}-token, {ep.n_turns}-turn episode: mean {mean * 1e3:.1f} ms, "
          f"median {statistics.median(times) * 1e3:.1f} ms, max {worst * 1e3:.1f} ms over {len(times)} steps")
    assert mean < 0.05 and worst < 0.25
    # The card stays small next to the 32,000-token view: only the prompt text grows with the turn.
    assert len(card) < 2 * len(panel.episodes.get(ep.id).prompt_text(51)) + 20_000


def test_reexecute_stores_the_verdict_and_marks_the_first_divergence(tmp_path: Path, tok: Any) -> None:
    probs = tmp_path / "p.jsonl"
    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is 2+2?", "solutions": ["4"]}) + "\n")
    make = env_factory("math", str(probs))
    env = make()
    ep = asyncio.run(run_episode(env, ScriptedBackend(make().reference_reply, tok, mistake_rate=0.0), tok, PRESETS["areal-math"], "q",
                                 preset="areal-math", tokenizer_name="smollm2"))
    store = Store(tmp_path / "r.db")
    store.save_episode(ep)
    panel = _panel(store)
    panel.open(ep.id)
    view, card = asyncio.run(panel.run_replay(ep.id, 0))
    assert "reproduced" in view and store.replays(ep.id)[0]["kind"] == "reproduced"
    assert "re-executed" in card and "ok" in card

    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is 2+2?", "solutions": ["5"]}) + "\n")
    view, card = asyncio.run(panel.run_replay(ep.id, 0))
    kinds = [r["kind"] for r in store.replays(ep.id)]
    assert kinds == ["diverged:observation", "reproduced"]
    assert "⚑ first divergence" in view and 'data-pb-turn="0"' in view and "1 earlier re-execution" in view
    assert re.search(r'<tr class="rs-pb-div">.*?T0.*?observation', view, re.S)
    assert "diverged on observation" in card
    # Reopening shows the stored verdicts, newest first; the episode itself is untouched.
    _, _, replay_html = panel.open(ep.id)
    assert "⚑ first divergence" in replay_html and store.get_episode(ep.id) == ep


def test_episode_without_turns_and_unknown_id() -> None:
    ep = synthetic_episode(1).evolve(turns=(), segments=())
    assert "no turns" in playback.turn_card(playback.Loaded(ep, None, None), 0)
    assert np.array_equal(ep.tokens.ids, synthetic_episode(1).tokens.ids)


def test_parse_error_turn_shows_the_error_and_the_loops_feedback(tok: Any) -> None:
    from tests.toolenv import PriceEnv

    be = ScriptedBackend(PriceEnv().reference_reply, tok, mistake_rate=1.0, seed=0)
    ep = asyncio.run(run_episode(PriceEnv(), be, tok, PRESETS["tito"].with_(max_turns=3), "fig", preset="tito"))
    k = next(t.index for t in ep.turns if t.parse_error and t.observation)
    card = playback.turn_card(_loaded(ep, tok), k)
    assert "parse error" in card and html.escape(ep.turns[k].parse_error) in card
    assert "Loop&#x27;s feedback (the env was not called)" in card and "Env answered" not in card
    # Imported, the same turn records no action either: what followed is the record's messages, not the loop's.
    from engine.records.provenance import Source

    imported = ep.evolve(source=Source.imported("messages", "chat.jsonl", line=1, index=0))
    card = playback.turn_card(_loaded(imported, tok), k)
    assert "What followed (the record&#x27;s messages)" in card and "Loop&#x27;s feedback" not in card


def test_the_cards_cached_decoding_is_the_prompt_the_engine_reads(retok: tuple[Episode, list[GenerationRequest]],
                                                                  tok: Any) -> None:
    # slime lays each later turn's generation prompt down with its reply: the prompt the model was sent ends after
    # it, and the card's cache must decode that much, or every card from turn 1 on warns of tokens that differ.
    ep, _ = retok
    assert ep.n_turns >= 3 and any(s.kind == "gen_prompt" for t in ep.turns[1:] for s in t.segments)
    loaded = _loaded(ep, tok)
    for k in range(ep.n_turns):
        fresh = prompt_at(ep, k, tok)
        cached = prompt_at(ep, k, tok, decoded=loaded.decoded_prompt(k))
        assert cached == fresh and fresh.tokens_differ_at is None, k
        assert "decode to a different text" not in playback.turn_card(loaded, k)
