"""The Episode tab's views of the entropy and the top K (no browser): the token view's entropy classes and the
alternatives it sends (bounded), the turn card's forks, the per-turn chart's mean entropy; all from the engine's
numbers. An episode our own loop built, with the real SmolLM2 tokenizer, given distributions whose entropy and top
K are known (``tests/alternatives.py``)."""

from __future__ import annotations

import html
import json
import math
import re
from typing import Any

import numpy as np
import pytest

from dashboard.views import alternatives as alt_view
from dashboard.views import charts
from dashboard.views.playback import render_turn
from dashboard.views.tokens import token_view
from engine import PromptView, turn_entropy
from tests.alternatives import with_alternatives

K = 5


@pytest.fixture(scope="module")
def recorded(recorded_math):
    return recorded_math[0]


def _meta(page: str) -> dict[str, Any]:
    m = re.search(r'data-meta="([^"]*)"', page)
    assert m
    out: dict[str, Any] = json.loads(html.unescape(m.group(1)))
    return out


def test_each_generated_token_gets_its_entropy_bucket_and_the_hover_its_top_k(recorded, smol_tokenizer):
    page = token_view(recorded)
    meta = _meta(page)
    t = recorded.tokens
    assert 'data-entropy="1"' in page and meta["est"] == 0
    for i, c in enumerate(meta["c"]):
        buckets = re.findall(r"\be(\d)\b", meta["cls"][c])
        if math.isfinite(float(t.entropy[i])):
            expected = sum(float(t.entropy[i]) >= b for b in alt_view.ENTROPY_BOUNDS)
            assert buckets == [str(expected)], (i, meta["cls"][c])
        else:
            assert buckets == []
    seen = {re.search(r"\be(\d)\b", s).group(1) for s in meta["cls"] if re.search(r"\be(\d)\b", s)}
    assert len(seen) >= 4
    # Every generated token's top K, exactly as recorded (4 decimals), their texts decoded alone.
    generated = np.flatnonzero(t.top_ids[:, 0] >= 0).tolist()
    assert [row[0] for row in meta["alt"]] == generated and meta["altcut"] == 0
    for p, ids, lps in meta["alt"]:
        assert ids == t.top_ids[p].tolist()
        assert lps == pytest.approx(t.top_logprobs[p].tolist(), abs=6e-5)
    texts = dict(zip(meta["aid"], meta["atx"], strict=True))
    for i in {i for row in meta["alt"] for i in row[1]}:
        assert texts[i] == smol_tokenizer.decode([i], skip_special_tokens=False)
    # The entropy runs hold each known entropy at its position.
    dense = np.full(len(t), np.nan)
    for a, values in meta["ent"]:
        dense[a:a + len(values)] = values
    assert np.allclose(dense, t.entropy, atol=6e-5, equal_nan=True)
    legend = re.search(r'<span class="rs-ent-legend">(.*?)</span></span>', page)
    assert legend and "&lt; 0.1" in legend.group(1) and "≥ 3" in legend.group(1)


def test_an_estimated_entropy_says_it_is_a_lower_bound(plain_math):
    estimated, _ = with_alternatives(plain_math, k=K, seed=4, estimated=True)
    page = token_view(estimated)
    assert _meta(page)["est"] == 1 and "(estimates from the top K: lower bounds)" in page
    te = turn_entropy(estimated)[0]
    block = alt_view.forks_block(estimated, te, {})
    assert "estimates from the top K: lower bounds" in block
    assert "lower bound" not in alt_view.forks_block(plain_math.evolve(tokens=estimated.tokens.evolve(
        entropy_estimated=False)), te, {})


def test_past_the_limit_only_the_highest_entropy_tokens_alternatives_are_sent(recorded, monkeypatch):
    monkeypatch.setattr(alt_view, "ALTERNATIVES_SENT", 20 * K)
    meta = _meta(token_view(recorded))
    t = recorded.tokens
    generated = np.flatnonzero(t.top_ids[:, 0] >= 0)
    sent = [row[0] for row in meta["alt"]]
    assert len(sent) == 20 and meta["altcut"] == len(generated) - 20
    assert sent == sorted(sent)
    # The turns' forks first (the turn card links to them: their hover has their alternatives), then the
    # highest-entropy tokens.
    forks = {f.position for te in turn_entropy(recorded) for f in te.forks}
    assert len(forks) < 20 and forks <= set(sent)
    rest = [p for p in sent if p not in forks]
    lowest_sent = min(float(t.entropy[p]) for p in rest)
    assert all(float(t.entropy[p]) <= lowest_sent for p in generated if p not in sent)
    assert min(float(t.entropy[p]) for p in forks) < lowest_sent  # a fork kept for being one


def test_an_episode_without_entropy_sends_none_and_says_so(plain_math):
    page = token_view(plain_math)
    meta = _meta(page)
    assert 'data-entropy="0"' in page
    assert not {"ent", "alt", "aid", "atx", "est"} & set(meta)
    assert not any(re.search(r"\be\d\b", s) for s in meta["cls"])
    assert "entropy: none recorded in this episode" in page and "rs-hover-alts" not in page
    assert charts.turn_series(plain_math).entropy_mean == ()
    assert "mean entropy" not in [tr.name for tr in charts.turn_chart(plain_math).data]


def test_the_turn_card_names_its_forks_each_linked_to_its_token(recorded, smol_tokenizer):
    per_turn = turn_entropy(recorded)
    k = 1
    te = per_turn[k]
    ids = alt_view.fork_ids(te)
    texts = {i: smol_tokenizer.decode([i], skip_special_tokens=False) for i in ids}
    card = render_turn(recorded, k, PromptView(None, "none", 0, "no prompt"), entropy=te, texts=texts)
    block = re.search(r'<div class="rs-pb-forks" data-turn="1">(.*?)</ul></div>', card, re.S)
    assert block
    links = re.findall(r'<a class="rs-jump rs-forktok-link" href="([^"]*)" data-jump="([^"]*)">([^<]*)</a>',
                       block.group(1))
    assert [(h, j) for h, j, _ in links] == [(f"?episode={recorded.id}&amp;turn={k}&amp;token={f.position}",
                                              f"tok-{f.position}") for f in te.forks]
    for (_, _, label), f in zip(links, te.forks, strict=True):
        assert html.unescape(label) == f"#{f.position} {json.dumps(texts[f.token_id], ensure_ascii=False)}"
    assert f"mean entropy {te.mean:.3f} nats over {te.known} of {te.generated} generated tokens" in block.group(1)
    sampled = re.findall(r'<span class="rs-alt rs-alt-sampled"[^>]*>([^<]*)</span>', block.group(1))
    assert len(sampled) == len(te.forks)
    for said, f in zip(sampled, te.forks, strict=True):
        word = json.dumps(texts[f.token_id], ensure_ascii=False)
        if f.sampled_rank is None:
            assert html.unescape(said).startswith(f"sampled {word} ") and said.endswith(f"not in the top {K}")
        else:
            prob = f.alternatives[f.sampled_rank].prob
            assert html.unescape(said) == f"{word} {alt_view.percent(prob)} ✓"
    # An episode without entropy: no forks block.
    plain_card = render_turn(recorded.evolve(tokens=recorded.tokens.evolve(entropy=None)), k,
                             PromptView(None, "none", 0, "no prompt"), entropy=te, texts=texts)
    assert "rs-pb-forks" not in plain_card


def test_the_per_turn_chart_draws_the_engines_mean_entropy_on_a_second_axis(recorded):
    means = [te.mean for te in turn_entropy(recorded)]
    assert charts.turn_series(recorded).entropy_mean == pytest.approx(means)
    fig = charts.turn_chart(recorded)
    (trace,) = [tr for tr in fig.data if tr.name == "mean entropy"]
    (logprob,) = [tr for tr in fig.data if tr.name == "mean logprob"]
    assert list(trace.y) == pytest.approx(means)
    assert trace.yaxis != logprob.yaxis and trace.xaxis == logprob.xaxis
