"""An export says what its trainer's loader would do otherwise than the records: a batch mixing samples with and
without logprobs (slime and verl keep a batch's only when its first sample has them), a trained token's unknown
logprob (slime writes 0.0, AReaL null), a reply cut by the length limit in a chat record, an episode that trains
nothing. An export of episodes that load as they are says nothing."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.formats import export
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import TokenArrays


@pytest.fixture(scope="module")
def math_eps(smol_tokenizer):
    env = MathEnv()
    return [asyncio.run(run_episode(env, ScriptedBackend(env.reference_reply, smol_tokenizer, seed=i), smol_tokenizer,
                                    PRESETS["areal-math"], env.tasks[i], preset="areal-math", tokenizer_name="smollm2"))
            for i in range(3)]


def _notes(eps, fmt, tmp_path):
    notes: list[str] = []
    export(eps, fmt, tmp_path / f"out.{fmt}", notes)
    return notes


def _without_logprobs(ep):
    t = ep.tokens
    return ep.evolve(id=ep.id + "-nolp", tokens=TokenArrays(t.ids, t.loss_mask, np.full(len(t.ids), np.nan), t.versions))


def test_clean_exports_say_nothing(math_eps, tmp_path):
    assert all(not np.isnan(e.tokens.logprobs[e.tokens.loss_mask == 1]).any() for e in math_eps)
    for fmt in ("slime", "verl", "areal", "areal-realhf", "messages"):
        assert _notes(math_eps, fmt, tmp_path) == [], fmt


def test_a_batch_mixing_logprobs_and_an_unknown_trained_logprob_are_said(math_eps, tmp_path):
    mixed = [math_eps[0], _without_logprobs(math_eps[1])]
    for fmt, field in (("slime", "rollout_log_probs"), ("verl", "response_logprobs")):
        (note,) = _notes(mixed, fmt, tmp_path)
        assert f"1 of 2 exported {fmt} samples hold no {field}" in note and math_eps[1].id[:8] in note
    t = math_eps[0].tokens
    lp = t.logprobs.copy()
    lp[np.flatnonzero(t.loss_mask)[:2]] = np.nan
    holed = math_eps[0].evolve(tokens=TokenArrays(t.ids, t.loss_mask, lp, t.versions))
    (note,) = _notes([holed], "slime", tmp_path)
    assert note.startswith("2 trained tokens in 1 episodes have no rollout logprob") and "written 0.0" in note
    (note,) = _notes([holed], "areal", tmp_path)
    assert "written null, which AReaL's torch.tensor(logprobs) refuses" in note


def test_a_cut_reply_in_a_chat_record_and_an_untrained_episode_are_said(math_eps, tmp_path):
    ep = math_eps[0]
    turns = (replace(ep.turns[0], generation=replace(ep.turns[0].generation, finish_reason="length")), *ep.turns[1:])
    (note,) = _notes([ep.evolve(turns=turns), *math_eps[1:]], "messages", tmp_path)
    assert note.startswith("1 episodes hold a reply cut by the length limit") and ep.id[:8] in note
    t = ep.tokens
    nothing = ep.evolve(tokens=TokenArrays(t.ids, np.zeros_like(t.loss_mask), t.logprobs, t.versions))
    notes = _notes([nothing], "areal", tmp_path)
    assert any(n.startswith("1 exported episodes train no token") for n in notes), notes


def test_a_slime_dump_of_uneven_or_interleaved_groups_is_said(math_eps, tmp_path):
    a, b, c = math_eps
    pair = [a.evolve(group_id="g1"), b.evolve(id=b.id + "x", group_id="g1")]
    (note,) = _notes([*pair, c.evolve(group_id="g2")], "slime", tmp_path)
    assert "groups of 1, 2 samples" in note and "n_samples_per_prompt" in note
    (note,) = _notes([pair[0], c.evolve(group_id="g2"), pair[1], c.evolve(id=c.id + "y", group_id="g2")], "slime",
                     tmp_path)
    assert "a group's samples apart from each other" in note
    assert _notes([*pair, c.evolve(group_id="g2"), c.evolve(id=c.id + "y", group_id="g2")], "slime", tmp_path) == []
