"""Real HTTP servers that speak sglang's and OpenAI's protocols, for tests and benches.

:class:`ProtocolServer` runs uvicorn on 127.0.0.1 (a free port) in a
background thread and serves

    POST /generate               sglang's native API
    POST /v1/completions         OpenAI / vLLM completions
    POST /v1/chat/completions    OpenAI / vLLM chat completions
    GET  /get_model_info, /v1/models, /health

answering from a real :class:`~engine.backends.local.LocalBackend` (the
embedded SmolLM2), with the servers' own text conventions: sglang trims the
matched stop token or string and skips special tokens unless told
``no_stop_trim`` / ``skip_special_tokens: false``; vLLM returns text without
special tokens and stop strings, and ids only with ``return_token_ids``.
Requests are checked the way the real servers check them (unknown sampling
parameters, a missing prompt or an unknown model name are 4xx), so a client
that passes here is not just passing a lenient fake.

Fault modes, one per server instance (``fault=``):

    none       answer from the model
    error500   always HTTP 500
    flaky500   HTTP 500 for the first ``fail_times`` requests, then answer
    slow       sleep ``slow_s`` (longer than the client's timeout), then a fixed reply
    malformed  HTTP 200 with a truncated JSON body
    abort      finish reason ``abort`` after a few tokens
    drop       start the answer, then close the connection
    fixed      sleep ``fixed_delay_s`` (50 ms), then a fixed short reply; no model (benchmarks)

``python -m tests.servers --fault fixed`` serves one from the command line
and prints its URL (the benchmark runs it in its own process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from engine.backends.base import GenerationRequest, SamplingParams
from engine.tokens.chat import end_of_turn_ids, end_of_turn_texts
from engine.tokens.toolcalls import parse_hermes

FAULTS = ("none", "error500", "flaky500", "slow", "malformed", "abort", "drop", "fixed")
NEEDS_MODEL = ("none", "flaky500")
MODEL_NAME = "smollm2"
# Never a correct math answer (no \boxed{}), so a math episode runs all its turns.
FIXED_REPLY = "I am not sure."
ABORTED_REPLY = "Let me th"

# sglang's SamplingParams fields; anything else is a TypeError (HTTP 400) there.
SGLANG_SAMPLING = frozenset(
    {
        "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
        "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema",
        "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
        "no_stop_trim", "custom_params", "stream_interval", "logit_bias", "sampling_seed",
    }
)


class BadRequest(Exception):
    """A request the real server would refuse (answered as HTTP 400 or 404)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Sampled:
    """What the model (or a scripted fault) produced for one prompt."""

    prompt: list[int]
    ids: list[int]
    logprobs: list[float]
    finish: str  # stop | length | abort
    matched: int | str | None
    latency: float
    cached: int
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    """Per generated token, its most likely (id, logprob), most likely first, as many as were asked for."""


class ThreadedServer:
    """An ASGI app (``self._asgi``) served by uvicorn on 127.0.0.1, a free port, in a background thread;
    ``with Server(...) as s: s.url``."""

    log_level = "critical"
    port = 0
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    async def _asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> Any:
        # proto must say TCP: asyncio sets TCP_NODELAY only on sockets that do,
        # and without it every reused connection waits out a delayed ACK (~40 ms).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._asgi,
            log_config=None,
            log_level=self.log_level,
            access_log=False,
            interface="asgi3",
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"{type(self).__name__}:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the test server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ProtocolServer(ThreadedServer):
    """One HTTP server in a background thread; ``with ProtocolServer(...) as s: s.url``.

    ``backend``: the LocalBackend answering (needed for ``none`` and
    ``flaky500``). ``tokenizer``: for the scripted replies when there is no
    backend. ``calls`` counts requests per path; ``bodies`` keeps the JSON
    bodies received, for tests that check what a client sent.
    """

    def __init__(
        self,
        backend: Any = None,
        *,
        tokenizer: Any = None,
        fault: str = "none",
        fail_times: int = 2,
        slow_s: float = 3.0,
        fixed_delay_s: float = 0.05,
        weight_version: str = "default",
        model_name: str = MODEL_NAME,
        keep_bodies: bool = True,
        log_level: str = "critical",
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {', '.join(FAULTS)}, not {fault!r}")
        if fault in NEEDS_MODEL and backend is None:
            raise ValueError(f"fault {fault!r} answers from the model: give backend=LocalBackend(...)")
        self.backend = backend
        self.tok = tokenizer if tokenizer is not None else backend.tokenizer
        self.fault = fault
        self.fail_times = fail_times
        self.slow_s = slow_s
        self.fixed_delay_s = fixed_delay_s
        self.weight_version = weight_version
        self.model_name = model_name
        self.keep_bodies = keep_bodies
        # critical by default: the drop fault makes uvicorn log an error on purpose.
        self.log_level = log_level
        self.calls: Counter[str] = Counter()
        self.bodies: list[tuple[str, Any]] = []
        self.answers: list[Sampled] = []  # what the model produced for each request, kept with the bodies
        self._stop_ids = end_of_turn_ids(self.tok)
        eot_texts = end_of_turn_texts(self.tok)
        self._eot = self.tok.convert_tokens_to_ids(eot_texts[0]) if eot_texts else None
        self._seen: list[list[int]] = []  # recent sequences, for cached_tokens
        self._fixed = self._scripted(FIXED_REPLY, end=True)
        self._aborted = self._scripted(ABORTED_REPLY, end=False)
        self.app = self._build_app()

    # -- ASGI ----------------------------------------------------------------

    async def _asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and self.fault == "drop":
            self.calls[scope["path"]] += 1
            more = True
            while more:  # read the whole request first: the drop comes mid-answer
                more = (await receive()).get("more_body", False)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"text": "The answ', "more_body": True})
            return  # uvicorn closes the connection of a response left incomplete
        await self.app(scope, receive, send)

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/health")
        async def health() -> dict[str, Any]:
            return {}

        @app.get("/get_model_info")
        async def model_info() -> dict[str, Any]:
            return {"model_path": self.model_name, "tokenizer_path": self.model_name, "is_generation": True,
                    "weight_version": self.weight_version}

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "rollscope"}]}

        @app.post("/generate")
        async def generate(request: Request) -> Response:
            return await self._handle(request, self._sglang)

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            return await self._handle(request, self._completions)

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await self._handle(request, self._chat)

        return app

    async def _handle(self, request: Request, protocol: Any) -> Response:
        path = request.url.path
        self.calls[path] += 1
        n = self.calls[path]
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "the body is not JSON")
        if self.keep_bodies:
            self.bodies.append((path, body))
        if self.fault == "error500" or (self.fault == "flaky500" and n <= self.fail_times):
            return _error(500, f"injected failure {n}")
        if self.fault == "malformed":
            return Response(b'{"text": "The answer is", "meta_info": {"finish_reason": ', media_type="application/json")
        try:
            return JSONResponse(await protocol(body))
        except BadRequest as e:
            return _error(e.status, str(e))

    # -- sampling --------------------------------------------------------------

    def _scripted(self, text: str, end: bool) -> list[int]:
        ids = list(self.tok.encode(text, add_special_tokens=False))
        return ids + [self._eot] if end and self._eot is not None else ids

    async def _sample(self, prompt: list[int], sampling: SamplingParams) -> Sampled:
        if not prompt:
            raise BadRequest("the prompt is empty")
        cached = self._cached(prompt)
        if self.fault in ("fixed", "slow"):
            await asyncio.sleep(self.fixed_delay_s if self.fault == "fixed" else self.slow_s)
            ids = self._fixed[: max(0, sampling.max_new_tokens)]
            finish = "stop" if ids == self._fixed else "length"
            return Sampled(prompt, ids, [-0.1] * len(ids), finish, ids[-1] if finish == "stop" else None, 0.0, cached)
        if self.fault == "abort":
            ids = self._aborted
            return Sampled(prompt, ids, [-0.5] * len(ids), "abort", None, 0.0, cached)
        t0 = time.perf_counter()
        gen = await self.backend.generate(GenerationRequest(prompt_text=None, prompt_ids=tuple(prompt), sampling=sampling))
        ids = list(gen.token_ids)
        matched: int | str | None = None
        if gen.finish_reason == "stop":
            if ids and ids[-1] in self._stop_ids:
                matched = ids[-1]
            else:
                text = self.tok.decode(ids, skip_special_tokens=False)
                matched = next((s for s in sampling.stop if s and s in text), None)
        self._seen = ([prompt + ids] + self._seen)[:64]
        top = [list(zip(i, lp)) for i, lp in zip(gen.top_ids, gen.top_logprobs)]
        out = Sampled(prompt, ids, list(gen.logprobs or ()), gen.finish_reason, matched, time.perf_counter() - t0,
                      cached, top)
        if self.keep_bodies:
            self.answers.append(out)
        return out

    def _cached(self, prompt: list[int]) -> int:
        # A radix cache in miniature: the longest prefix shared with a recent sequence.
        best = 0
        for seq in self._seen:
            n = 0
            for a, b in zip(prompt, seq):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best

    def _text(self, s: Sampled, skip_special: bool, trim: bool) -> str:
        ids = s.ids
        if trim and isinstance(s.matched, int) and ids and ids[-1] == s.matched:
            ids = ids[:-1]
        text = self.tok.decode(ids, skip_special_tokens=skip_special)
        if trim and isinstance(s.matched, str) and s.matched in text:
            text = text[: text.index(s.matched)]
        return text

    # -- sglang /generate --------------------------------------------------------

    async def _sglang(self, body: dict[str, Any]) -> dict[str, Any]:
        if ("text" in body) == ("input_ids" in body):
            raise BadRequest("Either text or input_ids should be provided.")
        sp = body.get("sampling_params") or {}
        unknown = sorted(set(sp) - SGLANG_SAMPLING)
        if unknown:
            raise BadRequest(f"SamplingParams.__init__() got an unexpected keyword argument {unknown[0]!r}")
        prompt = list(body["input_ids"]) if "input_ids" in body else self.tok.encode(body["text"], add_special_tokens=False)
        stop = sp.get("stop") or ()
        sampling = SamplingParams(
            temperature=float(sp.get("temperature", 1.0)),
            top_p=float(sp.get("top_p", 1.0)),
            max_new_tokens=int(sp.get("max_new_tokens", 128)),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            seed=sp.get("sampling_seed"),
            top_logprobs=int(body.get("top_logprobs_num") or 0) if body.get("return_logprob") else 0,
        )
        s = await self._sample(prompt, sampling)
        if s.finish == "abort":
            finish: dict[str, Any] = {"type": "abort", "message": "injected abort", "status_code": 503}
        elif s.finish == "stop":
            finish = {"type": "stop", "matched": s.matched}
        else:
            finish = {"type": "length", "length": len(s.ids)}
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": finish,
            "prompt_tokens": len(s.prompt),
            "weight_version": self.weight_version,
            "completion_tokens": len(s.ids),
            "cached_tokens": s.cached,
            "e2e_latency": s.latency,
        }
        if body.get("return_logprob"):
            with_text = bool(body.get("return_text_in_logprobs"))
            meta["output_token_logprobs"] = [
                [lp, t, self.tok.decode([t]) if with_text else None] for lp, t in zip(s.logprobs, s.ids)
            ]
            if sampling.top_logprobs:
                meta["output_top_logprobs"] = [
                    [[lp, t, self.tok.decode([t]) if with_text else None] for t, lp in row] for row in s.top]
        text = self._text(s, skip_special=sp.get("skip_special_tokens", True), trim=not sp.get("no_stop_trim", False))
        return {"text": text, "output_ids": s.ids, "meta_info": meta}

    # -- OpenAI ----------------------------------------------------------------------

    def _openai_sampling(self, body: dict[str, Any]) -> SamplingParams:
        if body.get("model") != self.model_name:
            raise BadRequest(f"The model `{body.get('model')}` does not exist.", status=404)
        stop = body.get("stop") or ()
        temperature = float(body.get("temperature", 1.0))
        top_p = float(body.get("top_p", 1.0))
        if temperature < 0 or not 0 < top_p <= 1:
            raise BadRequest("temperature must be >= 0 and top_p in (0, 1]")
        return SamplingParams(
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=int(body.get("max_tokens") or 16),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            seed=body.get("seed"),
        )

    @staticmethod
    def _top_n(body: dict[str, Any], chat: bool) -> int:
        """How many alternatives a request asks for: chat's ``top_logprobs`` (with ``logprobs: true``), or
        completions' ``logprobs`` (an integer); each 0 to 20, as OpenAI's API allows."""
        n = body.get("top_logprobs") if chat else body.get("logprobs")
        if chat and n is not None and not body.get("logprobs"):
            raise BadRequest("top_logprobs needs logprobs: true")
        if n is None or isinstance(n, bool):
            return 0
        if not isinstance(n, int) or not 0 <= n <= 20:
            raise BadRequest(f"{'top_logprobs' if chat else 'logprobs'} must be an integer from 0 to 20")
        return n

    def _token_str(self, t: int, as_ids: bool) -> str:
        return f"token_id:{t}" if as_ids else self.tok.decode([t])

    def _finish(self, s: Sampled) -> str:
        return {"stop": "stop", "length": "length"}.get(s.finish, "abort")

    def _usage(self, s: Sampled) -> dict[str, Any]:
        return {
            "prompt_tokens": len(s.prompt),
            "completion_tokens": len(s.ids),
            "total_tokens": len(s.prompt) + len(s.ids),
            "prompt_tokens_details": {"cached_tokens": s.cached},
        }

    async def _completions(self, body: dict[str, Any]) -> dict[str, Any]:
        sampling = self._openai_sampling(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_ids = self.tok.encode(prompt, add_special_tokens=False)
        elif isinstance(prompt, list) and all(isinstance(x, int) for x in prompt):
            prompt_ids = list(prompt)
        else:
            raise BadRequest("prompt must be a string or a list of token ids")
        s = await self._sample(prompt_ids, replace(sampling, top_logprobs=self._top_n(body, chat=False)))
        text = self._text(s, skip_special=body.get("skip_special_tokens", True), trim=True)
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": self._finish(s),
            "stop_reason": s.matched,
        }
        n_logprobs = body.get("logprobs")
        if n_logprobs is not None:
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            tokens = [self._token_str(t, as_ids) for t in s.ids]
            offsets, at = [], len(self.tok.decode(s.prompt))
            for tok_s in tokens:
                offsets.append(at)
                at += len(tok_s)
            choice["logprobs"] = {
                "tokens": tokens,
                "token_logprobs": s.logprobs,
                # The most likely and, when it is not among them, the sampled token (OpenAI's and vLLM's form).
                "top_logprobs": [{**{self._token_str(t, as_ids): a for t, a in row}, tok_s: lp}
                                 for tok_s, lp, row in zip(tokens, s.logprobs, s.top or [[]] * len(tokens))],
                "text_offset": offsets,
            }
        if body.get("return_token_ids"):
            choice["token_ids"] = s.ids
            choice["prompt_token_ids"] = s.prompt
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": self._usage(s),
        }

    async def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        sampling = self._openai_sampling(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        for i, m in enumerate(messages):
            if m.get("role") == "tool" and not m.get("tool_call_id"):
                raise BadRequest(f"messages[{i}]: a tool message needs tool_call_id")
        tools = body.get("tools") or None
        rendered = self.tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        n_top = self._top_n(body, chat=True)
        s = await self._sample(self.tok.encode(rendered, add_special_tokens=False), replace(sampling, top_logprobs=n_top))
        text = self._text(s, skip_special=True, trim=True)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = self._finish(s)
        if tools and "<tool_call>" in text:
            parsed = parse_hermes(text)
            if parsed.error is None and parsed.calls:
                message["content"] = parsed.content or None
                message["tool_calls"] = [
                    {
                        "id": f"call_{uuid.uuid4().hex[:8]}",
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for c in parsed.calls
                ]
                finish = "tool_calls" if finish == "stop" else finish
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        if body.get("logprobs"):
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            entries = []
            for i, (t, lp) in enumerate(zip(s.ids, s.logprobs)):
                tok_s = self._token_str(t, as_ids)
                top = [{"token": self._token_str(a, as_ids), "logprob": b,
                        "bytes": list(self._token_str(a, as_ids).encode("utf-8"))} for a, b in (s.top[i] if s.top else [])]
                entries.append({"token": tok_s, "logprob": lp, "bytes": list(tok_s.encode("utf-8")), "top_logprobs": top})
            choice["logprobs"] = {"content": entries}
        out: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": self._usage(s),
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = s.ids
            out["prompt_token_ids"] = s.prompt
        return out


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"object": "error", "error": {"message": message, "code": status}}, status_code=status)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve sglang/OpenAI protocols for tests and benchmarks.")
    ap.add_argument("--fault", choices=FAULTS, default="fixed")
    ap.add_argument("--delay", type=float, default=0.05, help="seconds before a fixed reply")
    args = ap.parse_args(argv)
    from engine.backends.local import LocalBackend
    from engine.backends.tokenizers import load_tokenizer

    tok = load_tokenizer(None)
    backend = LocalBackend(tokenizer=tok) if args.fault in NEEDS_MODEL else None
    server = ProtocolServer(backend, tokenizer=tok, fault=args.fault, fixed_delay_s=args.delay, keep_bodies=False)
    with server:
        print(server.url, flush=True)
        try:
            sys.stdin.read()  # serve until stdin closes (the parent ends) or Ctrl-C
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
