"""The engine queries behind the dashboard's outcome views, on a real SQLite store of planted-mistake retail
episodes run through the real loop: outcome counts per rollout step against a recount, the Browse filter by
kind, and where an unrewarded GRPO sample parts from a rewarded one."""

from __future__ import annotations

from collections import Counter

import pytest

from engine import EpisodeFilter, Store, load_group, reward_partings
from engine.analysis.groups import action_text
from tests.planted_outcomes import GROUP_ID, GROUP_TASK, RUN_ID, outcome_run, write_of


@pytest.fixture(scope="module")
def run(smol_tokenizer):
    return outcome_run(smol_tokenizer)


@pytest.fixture(scope="module")
def store(run, tmp_path_factory):
    s = Store(tmp_path_factory.mktemp("outcomes") / "rollscope.db")
    s.save_episodes([p.episode for p in run])
    yield s
    s.close()


def test_the_planted_kinds_are_what_the_episodes_say(run):
    assert [p.episode.outcome.kind for p in run] == [p.kind for p in run]
    assert all(p.turns for p in run if p.kind in ("wrong_arguments", "not_called", "extra_write", "missing_output"))


def test_outcomes_per_step_are_a_recount_of_the_stored_episodes(store):
    recount: dict[int, Counter[str]] = {}
    for ep in store.iter_episodes(EpisodeFilter(run_id=RUN_ID)):
        recount.setdefault(ep.source.rollout_step, Counter())[ep.outcome.kind] += 1
    assert recount == {0: Counter(success=1, wrong_arguments=1, not_called=1, extra_write=1),
                       1: Counter(wrong_arguments=1, missing_output=1, success=1)}
    stats = store.step_stats(RUN_ID)
    assert {s.step: s.outcomes for s in stats} == recount
    assert store.outcome_counts(EpisodeFilter(run_id=RUN_ID), by="rollout_step") == recount
    assert all(sum(s.outcomes.values()) == s.n for s in stats)


def test_the_browse_filter_by_outcome_selects_exactly_those_kinds(store, run):
    wrong = {p.episode.id for p in run if p.kind == "wrong_arguments"}
    assert {s.id for s in store.list_episodes(EpisodeFilter(outcome=("wrong_arguments",)))} == wrong
    assert [s.outcome for s in store.list_episodes(EpisodeFilter(run_id=RUN_ID), order_by="created_at",
                                                   descending=False)] == [p.kind for p in run]
    assert store.count(EpisodeFilter.from_where(["outcome=wrong_arguments,not_called"])) == 3


def test_each_unrewarded_sample_parts_from_the_rewarded_one_at_its_planted_turn(store, run):
    group = [p for p in run if p.episode.group_id == GROUP_ID]
    g = load_group(store, GROUP_ID)
    assert g.spread == 1.0 and len(g.partings) == 3
    best = group[0].episode
    ref = write_of(GROUP_TASK)
    for parting, p in zip(g.partings, group[1:]):
        assert parting.rewarded.id == best.id and parting.unrewarded.id == p.episode.id
        assert parting.turn == p.turns[0], p.kind  # the turn where the mistake was planted
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
