"""Where a lower-reward GRPO sample parts from a best-reward one (``engine.reward_partings``), on a real SQLite
store of planted-mistake retail episodes run through the real loop, and on math episodes; and the outcome
kinds' one wording and colours, which every view uses."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine import (
    OUTCOME_COLORS,
    OUTCOME_KINDS,
    OUTCOME_LABELS,
    Episode,
    Outcome,
    Store,
    kind_passed,
    load_group,
    reward_partings,
)
from engine.analysis.groups import action_text
from tests.planted_outcomes import GROUP_ID, GROUP_TASK, math_episode, outcome_run, write_of


@pytest.fixture(scope="module")
def run(smol_tokenizer):
    return outcome_run(smol_tokenizer)


@pytest.fixture(scope="module")
def store(run, tmp_path_factory):
    s = Store(tmp_path_factory.mktemp("outcomes") / "rollscope.db")
    s.save_episodes([p.episode for p in run])
    yield s
    s.close()


def test_each_lower_reward_sample_parts_from_the_best_one_at_its_planted_turn(store, run):
    group = [p for p in run if p.episode.group_id == GROUP_ID]
    g = load_group(store, GROUP_ID)
    assert g.spread == 1.0 and len(g.partings) == 3
    best = group[0].episode
    ref = write_of(GROUP_TASK)
    for parting, p in zip(g.partings, group[1:]):
        assert parting.rewarded.id == best.id and parting.unrewarded.id == p.episode.id
        assert parting.turn == parting.rewarded_turn == p.turns[0], p.kind  # the turn where the mistake was planted
        assert parting.rewarded_action == action_text(best.turns[parting.turn])
        assert parting.unrewarded_action == action_text(p.episode.turns[parting.turn])
        assert parting.rewarded_action != parting.unrewarded_action
    # The wrong reason parts at the cancel itself: both actions are the cancel, with the two reasons.
    wrong = g.partings[0]
    assert wrong.rewarded_action.startswith(f"{ref.name}(") and ref.arguments["reason"] in wrong.rewarded_action
    assert wrong.unrewarded_action.startswith(f"{ref.name}(") and ref.arguments["reason"] not in wrong.unrewarded_action
    # Without spread there is no parting; a sample that never parts from a rewarded one names no turn.
    assert reward_partings([best]) == () and reward_partings([best, best.evolve(id="twin", sample_index=9)]) == ()
    (same,) = reward_partings([best, best.evolve(id="twin", sample_index=9, reward=0.0)])
    assert (same.turn, same.unrewarded.id) == (None, "twin")


def test_the_closest_rewarded_sample_is_the_one_sharing_most_turns(run):
    success, wrong, _, extra = (p.episode for p in run[:4])
    # The extra write parts from the reference late (its last reply), from the wrong reason at the cancel:
    # with both rewarded, the reference is the closer one.
    (p,) = reward_partings([success, wrong.evolve(reward=1.0), extra])
    assert (p.rewarded.id, p.turn) == (success.id, run[3].turns[0]) and run[3].turns[0] > run[1].turns[0]
    # A rewarded sample it never parts from is closest of all.
    (q,) = reward_partings([success, extra.evolve(reward=1.0), extra.evolve(id="copy", sample_index=7, reward=0.0)])
    assert (q.rewarded.id, q.turn, q.rewarded_action) == (extra.id, None, "")


def _reworded(ep: Episode, prefix: str) -> Episode:
    """``ep`` with every reply to the user worded differently (the same calls)."""
    def turn(t):
        if t.tool_calls or t.action is None or not t.action.is_respond:
            return t
        text = f"{prefix} {t.action.text}"
        return replace(t, action=replace(t.action, text=text), generation=replace(t.generation, text=text))
    return ep.evolve(turns=tuple(turn(t) for t in ep.turns))


def test_samples_that_word_their_replies_differently_part_at_the_call_not_at_turn_0(run):
    success, wrong, never, extra = (p for p in run[:4])
    best = _reworded(success.episode, "Sure!")
    assert action_text(best.turns[0]) != action_text(wrong.episode.turns[0])  # they differ from the first reply
    partings = reward_partings([best, _reworded(wrong.episode, "Of course."), _reworded(never.episode, "Hi."),
                                extra.episode])
    assert [(p.turn, p.rewarded_turn) for p in partings] == [(q.turns[0], q.turns[0]) for q in (wrong, never, extra)]
    assert partings[0].unrewarded_action.startswith(write_of(GROUP_TASK).name)
    # The cancel never made: where the best sample cancelled, it said something else instead.
    assert partings[1].rewarded_action.startswith(write_of(GROUP_TASK).name)
    assert partings[1].unrewarded_action.startswith("say: Hi.")
    # The extra write: the best sample had no more calls; it was saying its last reply.
    assert partings[2].unrewarded_action.startswith("modify_user_address(")
    assert partings[2].rewarded_action.startswith("say: Sure!")
    # Worded differently with the same calls, a lower reward parts nowhere.
    (same,) = reward_partings([best, _reworded(success.episode, "Hello.").evolve(id="twin", sample_index=9,
                                                                                  reward=0.0)])
    assert not same.parts and same.turn is None


def test_a_tie_between_best_samples_picks_the_first_that_shares_most(run):
    success, wrong, _, extra = (p.episode for p in run[:4])
    twin = success.evolve(id="twin", sample_index=8)
    (p,) = reward_partings([twin, success, wrong])  # both best samples part from it at the same call
    assert (p.rewarded.id, p.unrewarded.id) == (success.id, wrong.id)  # the first in sample order
    (p,) = reward_partings([twin, wrong.evolve(reward=1.0), success.evolve(reward=0.5)])
    assert p.rewarded.id == twin.id  # the one it never parts from, not an earlier parting
    assert (p.turn, p.rewarded_action) == (None, "")


def test_math_samples_part_at_the_first_answer_that_differs(smol_tokenizer):
    boxed = "{} the answer is \\boxed{{{}}}."
    ans = math_episode(smol_tokenizer, [boxed.format("Hmm,", 7)])[1]
    a, _ = math_episode(smol_tokenizer, [boxed.format("So", int(ans) + 1), boxed.format("Then", ans)])
    b, _ = math_episode(smol_tokenizer, [boxed.format("Well,", int(ans) + 1), boxed.format("Now", int(ans) + 2)])
    assert a.reward > b.reward and action_text(a.turns[0]) != action_text(b.turns[0])
    (p,) = reward_partings([a, b.evolve(id="b", sample_index=1)])
    assert (p.turn, p.rewarded_turn) == (1, 1)
    assert (p.rewarded_action, p.unrewarded_action) == (f"answer: {ans}", f"answer: {int(ans) + 2}")


def test_each_kind_has_one_label_and_its_own_colour_and_says_pass_or_fail():
    assert set(OUTCOME_LABELS) == set(OUTCOME_COLORS) == set(OUTCOME_KINDS)
    assert len(set(OUTCOME_COLORS.values())) == len(OUTCOME_KINDS)
    assert OUTCOME_LABELS["wrong_arguments"] == "wrong arguments"
    assert [kind_passed(k) for k in ("success", "correct", "wrong_answer", "other")] == [True, True, False, None]
    assert Outcome.other("the judge said 1.0").passed is None
