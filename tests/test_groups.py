"""The group view's engine side (engine/groups.py): advantages, spread, where samples part ways, from a store."""

from __future__ import annotations

import pytest

from engine import ConfigError, flat_groups, group_view, load_group, reward_partings
from engine.analysis.groups import action_text
from engine.backends.tokenizers import load_tokenizer
from engine.loop.rewards import group_advantages
from engine.store import Store
from tests.groupdata import DIVERGE_AT, WRONG_LOOKUP, group


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(None)


def test_an_extra_reply_to_the_user_is_not_a_parting_and_shifts_no_later_call(tok):
    # Sample 2 stops to think aloud at turn DIVERGE_AT, then makes the same calls one turn later each.
    eps = group(tok, "g-div", 0, 3, deviate=(2,))
    assert eps[2].n_turns == eps[0].n_turns + 1
    assert eps[2].turns[DIVERGE_AT].generation.text.startswith("Let me think")
    g = group_view(eps)
    assert (g.diverge_turn, g.actions_at_divergence) == (None, ())
    lower = eps[2].evolve(reward=0.0)
    (p,) = reward_partings([eps[0], lower])
    assert not p.parts and (p.turn, p.rewarded_turn, p.unrewarded_action) == (None, None, "")
    # A call it leaves out is where it parts, at its own turn and the other's.
    # Where the best sample cancels (two turns after its last read), this one, a turn behind, still talks.
    cut = lower.evolve(turns=lower.turns[:-2])  # ends before its cancel (turn 6)
    (p,) = reward_partings([eps[0], cut])
    assert (p.rewarded_turn, p.turn) == (5, 5) and p.rewarded_action.startswith("cancel_pending_order(")
    assert p.unrewarded_action.startswith("say: Order #")
    (p,) = reward_partings([eps[0], lower.evolve(turns=lower.turns[:-3])])  # ended after its last read
    assert (p.rewarded_turn, p.turn, p.unrewarded_action) == (5, None, "(ended)")


def test_a_call_the_others_do_not_make_is_where_the_samples_part(tok):
    eps = group(tok, "g-call", 0, 3, deviate=(2,), reply=WRONG_LOOKUP)
    g = group_view(eps)
    assert g.diverge_turn == DIVERGE_AT  # the others' next call is a turn later: the earliest turn is named
    assert g.actions_at_divergence[0] == g.actions_at_divergence[1] != g.actions_at_divergence[2]
    assert g.actions_at_divergence[2] == action_text(eps[2].turns[DIVERGE_AT])
    assert g.actions_at_divergence[2].startswith('get_order_details({"order_id": "#W0000000"})')
    rewards = [s.reward for s in g.samples]
    assert [round(s.advantage, 6) for s in g.samples] == [round(a, 6) for a in group_advantages(rewards)]
    if g.spread:
        assert not g.zero_spread and g.samples[2].advantage < 0 < g.samples[0].advantage
    assert "mean" in g.normalization and "std" in g.normalization


def test_a_group_with_zero_spread_and_the_store_side(tok, tmp_path):
    flat = group(tok, "g-flat", 1, 4)
    g = group_view(flat)
    assert g.zero_spread and g.spread == 0 and all(s.advantage == 0 for s in g.samples)
    assert g.diverge_turn is None
    store = Store(tmp_path / "g.db")
    for ep in flat + group(tok, "g-div", 0, 3, deviate=(2,)):
        store.save_episode(ep)
    loaded = load_group(store, "g-flat")
    assert [s.episode.sample_index for s in loaded.samples] == [0, 1, 2, 3]
    found = flat_groups(store, "grouprun")
    assert "g-flat" in [f[0] for f in found]
    assert all(load_group(store, gid).zero_spread for gid, *_ in found)
    assert ("g-div" in [f[0] for f in found]) == load_group(store, "g-div").zero_spread
    with pytest.raises(ConfigError, match="no episodes in group"):
        load_group(store, "nope")
    store.close()


def test_samples_whose_records_hold_no_calls_are_not_said_to_make_the_same_ones(tok, tmp_path):
    """A trainer's dump read off its mask keeps tokens, not parsed calls: the group cannot line its samples up, and
    says so, where "the same calls throughout" would be a guess (these samples do part, at DIVERGE_AT)."""
    from dashboard.views.group import render
    from engine.formats import export, import_path

    eps = group(tok, "g-call", 0, 3, deviate=(2,), reply=WRONG_LOOKUP)
    assert group_view(eps).diverge_turn == DIVERGE_AT and not group_view(eps).uncompared
    dump = tmp_path / "g.pt"
    assert export(eps, "slime", dump) == 3
    for name, tokenizer in (("bare", None), ("decoded", tok)):
        store = Store(tmp_path / f"{name}.db")
        assert import_path(dump, "slime", store, tokenizer=tokenizer).new == 3
        g = group_view(list(store.iter_episodes()))
        assert g.uncompared.startswith("sample #") and (g.diverge_turn, g.partings) == (None, ())
        page = render(g)
        assert "cannot be compared" in page and "same calls throughout" not in page, name
        store.close()
