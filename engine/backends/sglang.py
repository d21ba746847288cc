"""A backend for sglang's native ``/generate`` endpoint.

Request (one prompt, not streamed)::

    POST {url}/generate
    {"input_ids": [...]}  or  {"text": "..."}          # tito sends ids, retokenize text
    "sampling_params": {"temperature", "top_p", "max_new_tokens", "stop",
                        "sampling_seed" (when seeded),
                        "skip_special_tokens": false, "no_stop_trim": true},
    "return_logprob": true, "top_logprobs_num": K     # K when the sampling asks for alternatives

Answer, as sglang's ``TokenizerManager`` builds it::

    {"text": "...", "output_ids": [...],
     "meta_info": {"finish_reason": {"type": "stop", "matched": 2} | {"type": "length", "length": 16}
                                    | {"type": "abort", "message": "..."},
                   "prompt_tokens", "completion_tokens", "cached_tokens",
                   "weight_version", "e2e_latency",
                   "output_token_logprobs": [[logprob, token_id, text_or_null], ...],
                   "output_top_logprobs": [[[logprob, token_id, text_or_null], ...K], ...]}}

Token ids and logprobs come from ``output_token_logprobs`` (one triple per
generated token, the stop token included), else from ``output_ids`` without
logprobs; an answer with neither is a BackendError, since tito mode would
otherwise silently re-encode text.

Text and ids agree. sglang by default drops special tokens from ``text``
and trims the matched stop token or stop string, while the ids keep them; the
loop strips the end-of-turn text itself and, in tito mode, derives the
template tail from the ids. So the request asks for untrimmed text with
special tokens (``no_stop_trim``, ``skip_special_tokens: false``), and when a
tokenizer is given, ``Generation.text`` is ``decode(token_ids)`` outright,
exactly as :class:`~engine.backends.local.LocalBackend` returns it (stop
token and stop string included). Without a tokenizer the server's text is
kept, and a trimmed stop token whose text the triple carries is put back.

``weight_version`` is a string in sglang (``"default"`` until weights are
updated); it is kept when it is an integer and dropped otherwise.
``latency_s`` is the server's ``e2e_latency`` when sent, else the request's
round trip.
"""

from __future__ import annotations

import math
from typing import Any

import httpx

from ..errors import BackendError
from ..records.episode import Generation
from ..tokens.chat import decode
from ..tokens.tokenizer import Tokenizer
from . import topk
from .base import GenerationRequest
from .http import (
    MAX_ANSWER_BYTES,
    Answer,
    JSONClient,
    RetryPolicy,
    as_logprob,
    as_version,
    check_ids,
    check_url,
    finish_reason,
    vocab_size,
)


class SGLangBackend:
    """Generates through an sglang server's native ``/generate`` API.

    ``url``: the server's base URL (``http://host:30000``). ``tokenizer``: the
    model's tokenizer, used to make ``text`` the decoding of the ids (see the
    module docs); optional. ``client``: an ``httpx.AsyncClient`` to use
    instead of one per event loop. ``timeout`` (seconds a request may
    take, the whole answer and every retry included), ``retries`` (after the first try), ``backoff``
    (seconds, doubled per retry) and ``max_bytes`` (the largest answer taken)
    are described in :mod:`engine.backends.http`. ``model`` labels
    the episodes until :meth:`model_info` has asked the server.
    """

    name = "sglang"

    def __init__(
        self,
        url: str,
        tokenizer: Tokenizer | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_bytes: int = MAX_ANSWER_BYTES,
        model: str = "",
    ) -> None:
        self.url = check_url(url, "sglang")
        self.tokenizer = tokenizer
        self._vocab = vocab_size(tokenizer)
        self.model = model
        self.policy = RetryPolicy(timeout=timeout, retries=retries, backoff=backoff, max_bytes=max_bytes)
        self._http = JSONClient(self.name, self.policy, client, health_url=f"{self.url}/health")
        self._info: dict[str, Any] = {}

    @property
    def generate_url(self) -> str:
        return f"{self.url}/generate"

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        s = request.sampling
        sampling: dict[str, Any] = {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_new_tokens": s.max_new_tokens,
            "stop": list(s.stop),
            # Text that decodes the ids exactly: see the module docs.
            "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        if s.seed is not None:
            sampling["sampling_seed"] = s.seed
        body: dict[str, Any] = {"sampling_params": sampling, "return_logprob": True}
        if s.top_logprobs > 0:
            body["top_logprobs_num"] = s.top_logprobs
        if request.prompt_ids is not None:
            body["input_ids"] = [int(x) for x in request.prompt_ids]
        elif request.prompt_text is not None:
            body["text"] = request.prompt_text
        else:
            raise BackendError("sglang: the request has neither prompt_ids nor prompt_text")
        return body

    async def generate(self, request: GenerationRequest) -> Generation:
        """POST the request to ``/generate`` and read the answer (BackendError on any failure)."""
        body = self.payload(request)
        data, elapsed = await self._http.post(self.generate_url, body)
        return self.parse(data, request, elapsed)

    def parse(self, data: dict[str, Any], request: GenerationRequest, elapsed: float = 0.0) -> Generation:
        """Turn a ``/generate`` answer into a Generation (BackendError naming what is missing)."""
        a = Answer(f"{self.name} at {self.generate_url}", data)
        text = a.need("text", str)
        meta = a.need("meta_info", dict)
        triples = a.get("output_token_logprobs", list, obj=meta)
        logprobs: tuple[float, ...] | None
        if triples is not None:
            ids, logprobs, texts = self._read_triples(a, triples)
        else:
            out = a.get("output_ids", list)
            if out is None:
                raise BackendError(
                    f"{a.where}: the answer has neither 'meta_info.output_token_logprobs' nor 'output_ids', "
                    "so the generated token ids are unknown (does the server honour return_logprob?)"
                )
            ids = tuple(self._int(a, x, "output_ids") for x in out)
            logprobs, texts = None, ()
        check_ids(a.where, ids, self._vocab, request.sampling.max_new_tokens)
        raw_finish = meta.get("finish_reason")
        finish = finish_reason(raw_finish, len(ids), request.sampling.max_new_tokens)
        if self.tokenizer is not None and ids:
            text = decode(self.tokenizer, ids)
        else:
            text = self._restore_stop_token(text, ids, texts, raw_finish)
        latency = a.get("e2e_latency", (int, float), obj=meta)
        n_prompt = len(request.prompt_ids) if request.prompt_ids is not None else 0
        return Generation(
            text=text,
            token_ids=ids,
            logprobs=logprobs,
            finish_reason=finish,
            latency_s=float(latency) if latency is not None and 0 <= latency < math.inf else elapsed,
            prompt_tokens=int(a.get("prompt_tokens", int, n_prompt, obj=meta)),
            cached_tokens=int(a.get("cached_tokens", int, 0, obj=meta)),
            weight_version=as_version(meta.get("weight_version")),
            model=self.model_name,
            finish_detail=_detail(raw_finish),
            **topk.fields(self._read_top(a, meta, request), len(ids), request.sampling.top_logprobs),
        )

    def _read_top(self, a: Answer, meta: dict[str, Any], request: GenerationRequest) -> list[topk.Pairs] | None:
        """``meta_info.output_top_logprobs``: per generated token, ``[logprob, token_id, text]`` triples."""
        if request.sampling.top_logprobs <= 0:
            return None
        rows = a.get("output_top_logprobs", list, obj=meta)
        if rows is None:
            return None
        out: list[topk.Pairs] = []
        for i, row in enumerate(rows):
            if not isinstance(row, list):
                raise BackendError(f"{a.where}: 'meta_info.output_top_logprobs[{i}]' is {row!r:.60}, expected a list")
            out.append([(self._int(a, t[1], f"meta_info.output_top_logprobs[{i}][{j}][1]"), as_logprob(t[0]))
                        for j, t in enumerate(row) if isinstance(t, (list, tuple)) and len(t) >= 2])
        return out

    def _read_triples(self, a: Answer, triples: list[Any]) -> tuple[tuple[int, ...], tuple[float, ...], tuple[Any, ...]]:
        ids: list[int] = []
        lps: list[float] = []
        texts: list[Any] = []
        for i, t in enumerate(triples):
            if not isinstance(t, (list, tuple)) or len(t) < 2:
                raise BackendError(
                    f"{a.where}: 'meta_info.output_token_logprobs[{i}]' is {t!r}, expected [logprob, token_id, text]"
                )
            ids.append(self._int(a, t[1], f"meta_info.output_token_logprobs[{i}][1]"))
            lps.append(as_logprob(t[0]))
            texts.append(t[2] if len(t) > 2 else None)
        return tuple(ids), tuple(lps), tuple(texts)

    @staticmethod
    def _int(a: Answer, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BackendError(f"{a.where}: '{where}' is {value!r}, expected a token id")
        return value

    @staticmethod
    def _restore_stop_token(text: str, ids: tuple[int, ...], texts: tuple[Any, ...], raw_finish: Any) -> str:
        # An sglang that ignored no_stop_trim dropped the matched stop token's
        # text; the triple still carries it when return_text_in_logprobs is on.
        if not ids or not texts or not isinstance(raw_finish, dict):
            return text
        matched = raw_finish.get("matched")
        last = texts[-1]
        if isinstance(matched, int) and matched == ids[-1] and isinstance(last, str) and last:
            if not text.endswith(last):
                return text + last
        return text

    @property
    def model_name(self) -> str:
        return self.model or str(self._info.get("model_path") or "")

    async def model_info(self) -> dict[str, Any]:
        """Ask the server's ``/get_model_info`` (model path, weight version...); remembered for :meth:`describe`."""
        data, _ = await self._http.get(f"{self.url}/get_model_info")
        self._info = dict(data)
        return self._info

    def describe(self) -> dict[str, Any]:
        """Backend config recorded on each episode: name, url, model, tokenizer, retry policy."""
        d: dict[str, Any] = {
            "name": self.name,
            "url": self.url,
            "model": self.model_name,
            "timeout": self.policy.timeout,
            "retries": self.policy.retries,
        }
        if self._info.get("weight_version") is not None:
            d["weight_version"] = self._info["weight_version"]
        if self.tokenizer is not None:
            d["tokenizer"] = str(getattr(self.tokenizer, "name_or_path", "") or type(self.tokenizer).__name__)
        return d

    async def aclose(self) -> None:
        """Close the HTTP client this backend created for the running event loop."""
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"SGLangBackend({self.url!r})"


def _detail(raw_finish: Any) -> str:
    """The message sglang attaches to an abort (``{"type": "abort", "message": ...}``)."""
    if isinstance(raw_finish, dict) and raw_finish.get("message"):
        return str(raw_finish["message"])[:500]
    return ""
