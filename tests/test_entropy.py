"""Each turn's mean entropy and its forks (its highest-entropy generated tokens with their top K), on episodes our
own loop built with the real SmolLM2 tokenizer and distributions whose entropy and top K are known; and
``rollscope show``'s line per turn."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import FORKS_PER_TURN, alternatives_at, has_entropy, turn_entropy
from engine.cli.main import main
from engine.store import Store
from tests.alternatives import with_alternatives

K = 5


def _generated(ep, turn: int) -> list[int]:
    """The turn's assistant tokens, read off its segments."""
    return [p for s in ep.segments if s.turn == turn and s.kind == "assistant" for p in range(s.start, s.end)]


def test_each_turns_mean_is_the_mean_of_its_generated_tokens_entropies(recorded_math):
    ep, truth = recorded_math
    per_turn = turn_entropy(ep)
    assert len(per_turn) == ep.n_turns >= 3 and has_entropy(ep)
    for te in per_turn:
        positions = _generated(ep, te.turn)
        assert te.generated == te.known == len(positions) > 0
        exact = float(np.mean([truth.entropy(p) for p in positions]))
        assert te.mean == pytest.approx(exact, abs=1e-5)  # float32 storage
    means = [te.mean for te in per_turn]
    assert max(means) - min(means) > 0.1  # the turns differ: a wrong span would show


def test_the_forks_are_the_highest_entropy_tokens_with_their_top_k_and_the_sampled_one_marked(recorded_math):
    ep, truth = recorded_math
    seen_ranks: set[int | None] = set()
    for te in turn_entropy(ep):
        positions = _generated(ep, te.turn)
        best = sorted(positions, key=lambda p: -truth.entropy(p))[:FORKS_PER_TURN]
        assert [f.position for f in te.forks] == best
        for f in te.forks:
            ids, probs = truth.dist[f.position]
            assert f.turn == te.turn and f.token_id == int(ep.tokens.ids[f.position])
            assert f.entropy == pytest.approx(truth.entropy(f.position), abs=1e-5) and not f.estimated
            assert [c.token_id for c in f.alternatives] == ids[:K].tolist()
            assert [c.prob for c in f.alternatives] == pytest.approx(probs[:K].tolist(), abs=1e-6)
            assert [c.sampled for c in f.alternatives] == [int(i) == f.token_id for i in ids[:K]]
            rank = int(np.flatnonzero(ids == f.token_id)[0])
            assert f.sampled_rank == (rank if rank < K else None)
            assert math.exp(f.logprob) == pytest.approx(float(probs[rank]), rel=1e-5)
            seen_ranks.add(f.sampled_rank)
    assert {0, None} <= seen_ranks  # sampled the most likely, and sampled outside the top K
    assert alternatives_at(ep, 0) == () and alternatives_at(ep, len(ep.tokens)) == ()


def test_ties_go_to_the_earlier_token_and_unknown_entropy_counts_for_nothing(plain_math):
    ep = plain_math
    first = _generated(ep, 0)
    assert len(first) >= 6
    entropy = np.full(len(ep.tokens), np.nan, dtype=np.float32)
    values = [0.5, 2.0, np.nan, 2.0, 1.0, 3.0]
    entropy[first[:6]] = values
    entropy[first[6:]] = 0.25
    t = ep.tokens.evolve(entropy=entropy)  # entropy without a top K: forks with no alternatives
    ep = ep.evolve(tokens=t)
    te = turn_entropy(ep)[0]
    assert [f.position for f in te.forks] == [first[5], first[1], first[3]]
    assert te.known == len(first) - 1 and te.generated == len(first)
    expected = (0.5 + 2.0 + 2.0 + 1.0 + 3.0 + 0.25 * (len(first) - 6)) / (len(first) - 1)
    assert te.mean == pytest.approx(expected, rel=1e-6)
    assert all(f.alternatives == () and f.sampled_rank is None for f in te.forks)
    assert [len(x.forks) for x in turn_entropy(ep, forks=1)][0] == 1
    later = turn_entropy(ep)[1]
    assert math.isnan(later.mean) and later.known == 0 and later.forks == ()


def test_an_episode_without_entropy_has_none(plain_math):
    assert not has_entropy(plain_math)
    assert all(math.isnan(te.mean) and te.forks == () and te.known == 0 for te in turn_entropy(plain_math))


def _show(ep, tmp_path, capsys) -> list[str]:
    db = tmp_path / f"{ep.id}.sqlite"
    store = Store(db)
    try:
        store.save_episode(ep)
    finally:
        store.close()
    capsys.readouterr()
    assert main(["show", ep.id, "--db", str(db)]) == 0
    return capsys.readouterr().out.splitlines()


def test_show_names_each_turns_forks_only_when_the_episode_has_entropy(recorded_math, plain_math, smol_tokenizer, tmp_path,
                                                                         capsys):
    ep, _ = recorded_math
    lines = _show(ep, tmp_path, capsys)
    said = [line for line in lines if line.startswith("[entropy]")]
    per_turn = turn_entropy(ep)
    assert len(said) == ep.n_turns
    for line, te in zip(said, per_turn):
        assert line.startswith(f"[entropy] mean {te.mean:.3f} nats over {te.known} tokens; forks: #")
        for f in te.forks:
            text = smol_tokenizer.decode([f.token_id], skip_special_tokens=False)
            assert f"#{f.position} " in line and f"{f.entropy:.2f} nats" in line and text in line
        top = te.forks[0]
        if top.sampled_rank is None:
            assert f"not in the top {K}" in line
        else:
            assert " sampled" in line
    # Each turn's line follows its header.
    heads = [i for i, line in enumerate(lines) if line.startswith("--- turn ")]
    assert [lines[i + 1].startswith("[entropy]") for i in heads] == [True] * ep.n_turns
    assert not [line for line in _show(plain_math, tmp_path, capsys) if line.startswith("[entropy]")]
    estimated, _ = with_alternatives(plain_math, k=K, seed=4, estimated=True)
    out = _show(estimated.evolve(id=plain_math.id + "-est"), tmp_path, capsys)
    assert all("(estimated: a lower bound)" in line for line in out if line.startswith("[entropy] mean"))
