"""The engine's questions about one episode at one turn, on episodes made by the real loop and tokenizer.

Where turn k lies in the token array (``turn_span``), what the model was sent
(``prompt_at``: checked against the requests a wrapped backend received), the
rewards and findings up to turn k, and the opening messages.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from engine import (
    CheckOptions,
    Episode,
    Finding,
    GenerationRequest,
    Severity,
    common_prefix,
    decode,
    findings_up_to,
    opening_messages,
    prompt_at,
    reward_so_far,
    turn_span,
    with_checks,
)
from engine.backends.scripted import ScriptedBackend
from engine.backends.tokenizers import load_tokenizer
from engine.envs import env_factory
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from tests.fakes import Recording
from tests.synthetic import synthetic_episode


@pytest.fixture(scope="module")
def tok() -> Any:
    return load_tokenizer(None)


def _run(tok: Any, env: str, preset: str, task: int) -> tuple[Episode, list[GenerationRequest]]:
    make_env = env_factory(env)
    first = make_env()
    rec = Recording(ScriptedBackend(make_env().reference_reply, tok, mistake_rate=0.5, seed=task,
                                    tokenizer_name="smollm2"))
    ep = asyncio.run(run_episode(first, rec, tok, PRESETS[preset], first.tasks[task], preset=preset,
                                 tokenizer_name="smollm2"))
    return ep, rec.requests


@pytest.fixture(scope="module")
def tito(tok: Any) -> tuple[Episode, list[GenerationRequest]]:
    # Token in, token out: the backend gets ids; areal-math shapes its rewards.
    return _run(tok, "math", "areal-math", 1)


@pytest.fixture(scope="module")
def slime(tok: Any) -> tuple[Episode, list[GenerationRequest]]:
    # Text in: slime's loop sends rendered text and lays each later generation prompt down with its reply.
    return _run(tok, "retail", "slime-tau", 2)


def test_turn_span_marks_the_generated_tokens_and_where_later_turns_begin(tito: Any) -> None:
    ep, _ = tito
    assert ep.n_turns >= 3
    for k, t in enumerate(ep.turns):
        s = turn_span(ep, k)
        assert s.prompt_len == t.prompt_len == s.gen_start
        assert ep.tokens.ids[s.gen_start : s.gen_end].tolist() == list(t.generation.token_ids)
        if k + 1 < ep.n_turns:
            # Later turns begin with their generation prompt, before their own prompt_len.
            assert s.gen_end <= s.cut < ep.turns[k + 1].prompt_len
            assert all(seg.turn <= k for seg in ep.segments if seg.end <= s.cut)
        else:
            assert s.cut == ep.n_tokens


def test_turn_span_starts_the_generation_after_a_generation_prompt_laid_with_it(slime: Any) -> None:
    ep, _ = slime
    assert ep.n_turns >= 3
    for k, t in enumerate(ep.turns):
        s = turn_span(ep, k)
        gen_prompt = [seg for seg in t.segments if seg.kind == "gen_prompt"]
        # slime lays turn k's generation prompt down with its reply: the generation starts after it.
        assert s.gen_start == (gen_prompt[0].end if gen_prompt else t.prompt_len)
        # The span holds the generated ids, and the template text slime lays down after them in the same segment.
        gen = list(t.generation.token_ids)
        assert ep.tokens.ids[s.gen_start : s.gen_start + len(gen)].tolist() == gen and s.gen_end >= s.gen_start + len(gen)
        assert s.cut == (ep.turns[k + 1].prompt_len if k + 1 < ep.n_turns else ep.n_tokens)


def test_turn_span_of_a_record_without_segments_follows_the_loops_layout(tito: Any) -> None:
    ep, _ = tito
    bare = ep.evolve(segments=())
    for k, t in enumerate(bare.turns):
        s = turn_span(bare, k)
        assert (s.prompt_len, s.gen_start) == (t.prompt_len, t.prompt_len)
        assert s.gen_end == t.prompt_len + len(t.generation.token_ids)
        assert s.cut == (bare.turns[k + 1].prompt_len if k + 1 < bare.n_turns else bare.n_tokens)


def test_prompt_at_each_turn_is_the_ids_the_backend_received(tito: Any, tok: Any) -> None:
    ep, requests = tito
    assert len(requests) == ep.n_turns
    for k, (t, req) in enumerate(zip(ep.turns, requests, strict=True)):
        assert req.prompt_ids is not None and req.prompt_text is None
        p = prompt_at(ep, k, tok)
        assert p.source == "tokens" and p.n_tokens == t.prompt_len == len(req.prompt_ids)
        assert p.text == decode(tok, list(req.prompt_ids)) and p.tokens_differ_at is None
        assert "token in, token out" in p.note
        # A caller that cached the decoding gets it back as it is.
        assert prompt_at(ep, k, None, decoded="cached").text == "cached"


def test_prompt_at_each_turn_is_the_text_the_backend_received(slime: Any, tok: Any) -> None:
    ep, requests = slime
    for k, (t, req) in enumerate(zip(ep.turns, requests, strict=True)):
        assert req.prompt_text is not None and req.prompt_ids is None
        p = prompt_at(ep, k, tok)
        assert p.source == "prompt_text" and p.text == req.prompt_text
        # The prompt's tokens run through a generation prompt laid down with the reply, and spell the text sent.
        gen_prompt = [seg.end for seg in t.segments if seg.kind == "gen_prompt"]
        assert p.n_tokens == (gen_prompt[0] if gen_prompt else t.prompt_len)
        assert p.tokens_differ_at is None and decode(tok, ep.tokens.ids[: p.n_tokens].tolist()) == req.prompt_text


def test_prompt_at_says_where_the_ids_stop_spelling_the_text_sent(slime: Any, tok: Any) -> None:
    ep, _ = slime
    turns = list(ep.turns)
    sent = turns[1].prompt_text
    at = sent.index("You")
    turns[1] = turns[1].__class__(**{**turns[1].__dict__, "prompt_text": sent.replace("You", "Yuo", 1)})
    p = prompt_at(ep.evolve(turns=tuple(turns)), 1, tok)
    assert p.text == sent.replace("You", "Yuo", 1) and p.tokens_differ_at == at + 1


def test_prompt_at_without_a_tokenizer_says_why(tito: Any) -> None:
    ep, _ = tito
    p = prompt_at(ep, 1, None, "no such tokenizer")
    assert p.text is None and p.source == "none" and p.n_tokens == ep.turns[1].prompt_len
    assert "no such tokenizer" in p.note and f"[0, {p.n_tokens:,})" in p.note


def test_reward_so_far_sums_raw_rewards_and_gives_shaped_ones_and_returns(tito: Any) -> None:
    ep, _ = tito
    raw = [t.reward for t in ep.turns]
    assert ep.turn_rewards != tuple(raw)  # areal-math shapes
    for k in range(ep.n_turns):
        r = reward_so_far(ep, k)
        assert r.turn == raw[k] and r.total == pytest.approx(sum(raw[: k + 1]))
        assert r.shaped_turn == ep.turn_rewards[k] and r.shaped_total == pytest.approx(sum(ep.turn_rewards[: k + 1]))
        assert r.ret == ep.returns[k] and r.final == ep.reward
    plain = synthetic_episode(2)  # unshaped: turn_rewards are the raw rewards
    r = reward_so_far(plain, plain.n_turns - 1)
    assert r.shaped_turn is None and r.shaped_total is None and r.total == sum(t.reward for t in plain.turns)


def test_findings_up_to_k_by_turn_or_by_token() -> None:
    ep = synthetic_episode(5)  # six turns, a finding at turn 0 in its token span
    assert ep.n_turns >= 3
    at = lambda turn, **kw: Finding("k", Severity.WARNING, f"at {turn}", turn=turn, **kw)  # noqa: E731
    t1, t2 = turn_span(ep, 1), turn_span(ep, 2)
    turns = list(ep.turns)
    turns[2] = turns[2].__class__(**{**turns[2].__dict__, "findings": (at(2),)})
    ep = ep.evolve(turns=tuple(turns), findings=(
        at(1),
        Finding("by_token", Severity.ERROR, "located by token only", token_start=t2.gen_start + 1),
        Finding("nowhere", Severity.INFO, "episode-wide"),
    ))
    msgs = lambda fs: [f.message for f in fs]  # noqa: E731
    found0, nowhere = findings_up_to(ep, 0)
    assert msgs(found0) == [ep.turns[0].findings[0].message] and msgs(nowhere) == ["episode-wide"]
    assert msgs(findings_up_to(ep, 1)[0]) == [ep.turns[0].findings[0].message, "at 1"]
    found2 = msgs(findings_up_to(ep, 2)[0])
    # The finding located by token alone counts from turn 2, whose tokens hold it; errors before warnings.
    assert found2[1:] == ["at 1", "located by token only", "at 2"] and t1.cut <= t2.gen_start


def test_findings_up_to_the_last_turn_are_all_of_them(slime: Any, tok: Any) -> None:
    ep = with_checks(slime[0], CheckOptions(tokenizer=tok))
    located, nowhere = findings_up_to(ep, ep.n_turns - 1)
    assert ep.all_findings() and sorted(map(repr, [*located, *nowhere])) == sorted(map(repr, ep.all_findings()))
    # Turn by turn, the findings only grow.
    counts = [len(findings_up_to(ep, k)[0]) for k in range(ep.n_turns)]
    assert counts == sorted(counts)


def test_common_prefix_matches_the_obvious_definition() -> None:
    rng = random.Random(0)
    for _ in range(300):
        a = "".join(rng.choice("ab") for _ in range(rng.randint(0, 12)))
        b = "".join(rng.choice("ab") for _ in range(rng.randint(0, 12)))
        want = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert common_prefix(a, b) == want


def test_opening_messages_are_those_before_the_first_turn(slime: Any) -> None:
    ep, _ = slime
    opening = opening_messages(ep)
    first_reply = next(i for i, m in enumerate(ep.messages) if m.role == "assistant")
    assert opening == tuple(ep.messages[:first_reply]) and [m.role for m in opening][:1] == ["system"]
    assert opening_messages(ep.evolve(turns=())) == tuple(ep.messages)
