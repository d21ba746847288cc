"""The group view's engine side (engine/groups.py): advantages, spread, where samples part ways, from a store."""

from __future__ import annotations

import pytest

from engine import ConfigError, flat_groups, group_view, load_group
from engine.backends.tokenizers import load_tokenizer
from engine.loop.rewards import group_advantages
from engine.store import Store
from tests.groupdata import DIVERGE_AT, group


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(None)


def test_samples_that_leave_the_policy_at_a_known_turn(tok):
    eps = group(tok, "g-div", 0, 3, deviate=(2,))
    g = group_view(eps)
    assert g.diverge_turn == DIVERGE_AT
    assert g.actions_at_divergence[0] == g.actions_at_divergence[1] != g.actions_at_divergence[2]
    assert g.actions_at_divergence[2].startswith("say: Let me think")
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
