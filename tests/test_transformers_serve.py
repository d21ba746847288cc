"""The OpenAI backend against a real third-party server: ``transformers serve`` on the embedded SmolLM2.

That server is strict: it refuses request fields outside OpenAI's API
(``return_token_ids``, HTTP 422), takes a completions prompt only as text
(HTTP 400), and returns neither token ids nor logprobs. The backend learns
each refusal once, records it on the episode, and the loop says where the
trained ids are a re-encoding (``ids_reencoded``) instead of ending the
episode ``aborted``.
"""

from __future__ import annotations

import asyncio

import pytest

from engine import BackendSettings, EpisodeFilter, Store, plan_run, run_batch
from engine.backends.base import GenerationRequest, SamplingParams
from engine.backends.openai import OpenAIBackend

from .hf_serve import TransformersServe

CASES = [(api, mode) for api in ("completions", "chat") for mode in ("tito", "retokenize")]


@pytest.fixture(scope="module")
def tserve(tmp_path_factory):
    with TransformersServe(tmp_path_factory.mktemp("smollm2-serve")) as server:
        yield server


@pytest.mark.parametrize("api,mode", CASES, ids=[f"{a}-{m}" for a, m in CASES])
def test_episodes_run_against_transformers_serve(tserve, tmp_path, api, mode):
    settings = BackendSettings.parse("openai", tserve.model, tserve.url, api, "", 0.0, 1.0, 16, 0, 0, 120, 1)
    plan = plan_run("math", "0:2", 1, "tito", f"max_turns = 2\ntoken_mode = {mode}", 2, settings, preflight=False)
    tok, backend = plan.backend.open(plan.make_env)
    store = Store(tmp_path / "x.db")
    result = asyncio.run(run_batch(plan.spec(), plan.make_env, backend, tok, store))
    eps = list(store.iter_episodes(EpisodeFilter(run_id=result.run_id)))
    assert len(eps) == 2
    for ep in eps:
        assert ep.status.value in ("completed", "truncated"), ep.reason
        assert ep.n_turns == 2 and all(t.generation.text.strip() for t in ep.turns)
        refused = ep.backend.settings["refused"]
        assert "Unexpected fields in the request" in refused["return_token_ids"]
        if api == "completions" and mode == "tito":
            assert "prompt must be a string" in refused["prompt as token ids"]
        reencoded = [f for t in ep.turns for f in t.findings if f.kind == "ids_reencoded"]
        if mode == "tito":
            # Each turn says its reply's ids are ours, not the server's (and, on completions, its prompt's).
            per_turn = 2 if api == "completions" else 1
            assert len(reencoded) == per_turn * ep.n_turns, [f.message for f in reencoded]
            assert all(t.generation.token_ids == () for t in ep.turns)
        else:
            assert reencoded == []  # re-encoding is what retokenize does by design
        # The trained ids are the reply's text as the tokenizer encodes it.
        for t in ep.turns:
            trained = [s for s in t.segments if s.trainable]
            assert trained and tok.decode(list(ep.tokens.ids[trained[0].start:trained[0].end])).startswith(
                t.generation.text[:20])
    # What the server refused is known to every backend of this process that talks to it: not asked again.
    again = OpenAIBackend(tserve.url, tserve.model, tokenizer=tok)
    assert "return_token_ids" in again.refused and not again.return_token_ids
    assert "return_token_ids" not in again.payload(GenerationRequest(None, (1, 2), SamplingParams()))
    store.close()
