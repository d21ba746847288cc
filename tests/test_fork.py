"""Stepping by hand, forking stored episodes, playing the user, and comparing episodes."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from engine.analysis.compare import compare, word_diff
from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.envs.retail import RetailEnv
from engine.errors import ConfigError
from engine.loop import fork as forking
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Status
from tests.toolenv import PriceEnv


def run(make_env, tok, preset, task, mistake_rate=0.0, seed=0, **cfg):
    be = ScriptedBackend(make_env().reference_reply, tok, mistake_rate=mistake_rate, seed=seed)
    return asyncio.run(run_episode(make_env(), be, tok, PRESETS[preset].with_(**cfg), task, preset=preset,
                                   tokenizer_name="smollm2"))


def test_fork_replays_the_prefix_exactly_then_continues(smol_tokenizer):
    parent = run(MathEnv, smol_tokenizer, "areal-math", MathEnv().tasks[2], mistake_rate=0.5, seed=3)
    assert parent.n_turns == 5
    backend = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=0.0, seed=9)

    async def go():
        hand = await forking.fork(parent, 3, backend, smol_tokenizer)
        assert hand.report is not None and hand.report.ok, hand.report.summary()
        assert hand.turn == 3 and not hand.done
        gen = await hand.generate()
        turn = await hand.commit(hand.text_of(gen))
        return hand, turn

    hand, turn = asyncio.run(go())
    assert turn.index == 3 and turn.reward == 1.0  # the mistake-free policy answers right
    ep = hand.to_save()
    assert ep.id != parent.id and ep.parent_id == parent.id and ep.fork_turn == 3
    for mine, theirs in zip(ep.turns[:3], parent.turns[:3]):
        assert mine.generation == theirs.generation and mine.observation == theirs.observation
    prefix = forking._prefix_end(parent, 3)
    assert ep.tokens.ids[:prefix].tolist() == parent.tokens.ids[:prefix].tolist()
    assert ep.tokens.loss_mask[:prefix].tolist() == parent.tokens.loss_mask[:prefix].tolist()
    assert ep.status is Status.INTERRUPTED and "before the end" in ep.reason  # 4 of 5 turns: saved mid-way
    assert not [f for f in ep.findings if f.kind == "fork_replay_diverged"]
    assert ep.source.by_hand


def test_a_fork_whose_env_changed_says_where_it_diverges(tmp_path, smol_tokenizer):
    probs = tmp_path / "p.jsonl"
    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is 2+2?", "solutions": ["4"]}) + "\n")
    parent = run(lambda: MathEnv(probs), smol_tokenizer, "areal-math", "q")
    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is 2+2?", "solutions": ["5"]}) + "\n")
    backend = ScriptedBackend(MathEnv(probs).reference_reply, smol_tokenizer)
    hand = asyncio.run(forking.fork(parent, 2, backend, smol_tokenizer, make_env=lambda: MathEnv(probs)))
    report = hand.report
    assert not report.ok and "DIFFERS" in report.summary() and "turn 0" in report.summary()
    first = report.divergences[0]
    assert (first.turn, first.field) == (0, "observation")
    assert "correct" in first.stored[0]["content"] and "wrong" in first.now[0]["content"]
    kinds = [f.kind for f in hand.to_save().findings]
    assert "fork_replay_diverged" in kinds


def test_edited_text_is_committed_as_a_persons_and_flagged(smol_tokenizer):
    env = PriceEnv()
    backend = ScriptedBackend(PriceEnv().reference_reply, smol_tokenizer)

    async def go():
        hand = forking.start(env, backend, smol_tokenizer, PRESETS["tito"], "fig")
        gen = await hand.generate()
        kept = await hand.commit(hand.text_of(gen))  # unchanged: the generation itself
        assert kept.generation is gen and kept.tool_calls[0].name == "get_price"
        await hand.generate()
        mine = "It costs 11 dollars."
        preview = hand.preview(mine)
        assert preview.respond and not preview.calls
        turn = await hand.commit(mine)
        return hand, turn

    hand, turn = asyncio.run(go())
    assert turn.generation.model == "manual" and turn.generation.logprobs is None
    assert turn.reward == 1.0 and hand.done and hand.episode().status is Status.COMPLETED
    ep = hand.to_save()
    assert ep.parent_id is None and ep.status is Status.COMPLETED
    edited = [f for f in ep.findings if f.kind == "edited_by_hand"]
    assert edited and edited[0].evidence["turns"] == [1]


def test_preview_reports_parse_errors_without_touching_the_env(smol_tokenizer):
    p = forking.preview_action(smol_tokenizer, PRESETS["tito"], PriceEnv.tools, "<tool_call>\n{not json}\n</tool_call>")
    assert p.parse_error and not p.respond
    calls = forking.preview_action(smol_tokenizer, PRESETS["slime-tau"], PriceEnv.tools,
                                   '<tool_call>\n{"name": "get_price", "arguments": {"item": "a"}}\n</tool_call>'
                                   '<tool_call>\n{"name": "get_price", "arguments": {"item": "b"}}\n</tool_call>')
    assert [c.arguments for c in calls.calls] == [{"item": "a"}]  # slime executes the first call only


def test_bad_requests_are_config_errors(smol_tokenizer):
    parent = run(MathEnv, smol_tokenizer, "areal-math", MathEnv().tasks[0])
    backend = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer)
    with pytest.raises(ConfigError, match="cannot fork at turn 9"):
        asyncio.run(forking.fork(parent, 9, backend, smol_tokenizer))
    with pytest.raises(ConfigError, match="no user a person can play"):
        forking.start(MathEnv(), backend, smol_tokenizer, PRESETS["tito"], MathEnv().tasks[0], user="human")
    with pytest.raises(ConfigError, match="no task"):
        forking.start(MathEnv(), backend, smol_tokenizer, PRESETS["tito"], "nope")


def test_forking_at_the_end_of_a_finished_episode_says_it_ended(smol_tokenizer):
    parent = run(PriceEnv, smol_tokenizer, "tito", "kiwi")
    assert parent.status is Status.COMPLETED
    backend = ScriptedBackend(PriceEnv().reference_reply, smol_tokenizer)
    hand = asyncio.run(forking.fork(parent, parent.n_turns, backend, smol_tokenizer, make_env=PriceEnv))
    assert hand.done and hand.report.ended and "ended during the replay" in hand.report.summary()


# -- the retail user, played by a person --------------------------------------------


@pytest.fixture(scope="module")
def retail_parent(smol_tokenizer):
    ep = run(RetailEnv, smol_tokenizer, "slime-tau", RetailEnv().tasks[0])
    assert ep.status is Status.COMPLETED and ep.reward == 1.0
    return ep


def test_a_person_plays_the_retail_user_in_a_fork(retail_parent, smol_tokenizer):
    backend = ScriptedBackend(RetailEnv().reference_reply, smol_tokenizer)

    async def go():
        # Turn 2 of the reference run is a message to the user; the replay feeds it the stored replies.
        hand = await forking.fork(retail_parent, 2, backend, smol_tokenizer, user="human")
        assert hand.report.ok, hand.report.summary()
        assert hand.plays_user
        text = "Which order would you like to cancel?"
        assert hand.needs_user_reply(text)
        with pytest.raises(ConfigError, match="write the user's reply"):
            await hand.commit(text)
        turn = await hand.commit(text, "Never mind, that's all. ###STOP###")
        return hand, turn

    hand, turn = asyncio.run(go())
    assert turn.observation[0].role == "user" and "Never mind" in turn.observation[0].content
    assert hand.done and hand.episode().reward == 0.0  # nothing was cancelled: the database does not match
    ep = hand.to_save()
    assert ep.config.user == "human" and ep.source.user_by_hand
    assert ep.parent_id == retail_parent.id and ep.fork_turn == 2


def test_a_fork_of_a_model_played_user_replays_its_replies(retail_parent, smol_tokenizer):
    info = replace(retail_parent.config.env, user="llm")
    parent = retail_parent.evolve(config=replace(retail_parent.config, env=info))
    backend = ScriptedBackend(RetailEnv().reference_reply, smol_tokenizer)
    hand = asyncio.run(forking.fork(parent, 4, backend, smol_tokenizer, user="human"))
    assert hand.plays_user and hand.report.ok
    assert any("replayed from the record" in n for n in hand.report.notes)
    # By choice, the env's simulated user answers after the fork instead: it heard the replayed turns.
    hand = asyncio.run(forking.fork(parent, 4, backend, smol_tokenizer, user="scripted"))
    assert not hand.plays_user and hand.report.ok
    assert "the env's simulated user answers from the fork on" in hand.report.notes


def test_the_scripted_user_replays_too(retail_parent, smol_tokenizer):
    backend = ScriptedBackend(RetailEnv().reference_reply, smol_tokenizer)
    hand = asyncio.run(forking.fork(retail_parent, 4, backend, smol_tokenizer))
    assert hand.report.ok and not hand.plays_user


# -- compare ----------------------------------------------------------------------


def test_compare_finds_the_fork_turn_as_the_first_divergence(smol_tokenizer):
    parent = run(MathEnv, smol_tokenizer, "areal-math", MathEnv().tasks[1], mistake_rate=1.0, seed=1)
    backend = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=0.0)

    async def go():
        hand = await forking.fork(parent, 2, backend, smol_tokenizer)
        while not hand.done:
            gen = await hand.generate()
            await hand.commit(hand.text_of(gen))
        return hand.to_save()

    child = asyncio.run(go())
    cmp = compare(parent, child)
    assert cmp.relation == "B is a fork of A at turn 2"
    assert cmp.opening_same and cmp.first_divergence == 2
    assert [d.same for d in cmp.turns[:2]] == [True, True]
    assert {"assistant text", "reward"} <= set(cmp.turns[2].differs)
    assert "first diverge at turn 2" in cmp.summary()
    assert compare(parent, parent).first_divergence is None
    other = run(MathEnv, smol_tokenizer, "areal-math", MathEnv().tasks[3])
    assert compare(parent, other).first_divergence == -1 and compare(parent, other).relation == "different tasks"


def test_compare_marks_missing_turns(smol_tokenizer):
    a = run(PriceEnv, smol_tokenizer, "tito", "fig")
    b = a.evolve(id="other", turns=a.turns[:1])
    cmp = compare(a, b)
    assert cmp.first_divergence == 1 and cmp.turns[1].differs == ("missing",)


def test_word_diff_marks_only_what_changed():
    ops = word_diff("The answer is \\boxed{12}.", "The answer is \\boxed{13}.")
    assert ("del", "12") in ops and ("ins", "13") in ops
    assert "".join(t for op, t in ops if op != "ins") == "The answer is \\boxed{12}."
    assert "".join(t for op, t in ops if op != "del") == "The answer is \\boxed{13}."
    assert word_diff("same", "same") == [("same", "same")] and word_diff("", "") == []


def test_a_fork_with_another_tokenizer_says_the_token_prefix_differs(smol_tokenizer, qwen3_tokenizer):
    parent = run(MathEnv, smol_tokenizer, "slime-tau", MathEnv().tasks[0], mistake_rate=1.0, max_turns=3)
    backend = ScriptedBackend(MathEnv().reference_reply, qwen3_tokenizer)
    hand = asyncio.run(forking.fork(parent, 2, backend, qwen3_tokenizer))
    fields = [d.field for d in hand.report.divergences]
    assert fields == ["tokens"] and "the token prefix" in hand.report.summary()
