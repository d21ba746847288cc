"""A backend for OpenAI-compatible servers (vLLM, sglang, and the like).

Two modes:

``completions`` -- ``POST {base}/completions`` with ``prompt`` as token ids
(tito) or text (retokenize), ``max_tokens``, ``temperature``, ``top_p``,
``stop``, ``seed``, ``logprobs: 1`` (K when the sampling asks for K alternatives). Reads ``choices[0].text``,
``choices[0].finish_reason``, ``choices[0].logprobs.tokens`` /
``token_logprobs`` (/ ``top_logprobs``) and ``usage``.

``chat`` -- ``POST {base}/chat/completions`` with ``messages`` (the request's
conversation as OpenAI dicts) and ``tools``, ``logprobs: true`` (and ``top_logprobs: K``). Reads
``choices[0].message.content`` and ``tool_calls``, and
``choices[0].logprobs.content[*].token`` / ``logprob`` (/ ``top_logprobs``). The server renders
the prompt with its own chat template, so the token trace is exact only
when that template is the loop's.

``{base}`` is ``url`` if it ends in ``/v1``, else ``url + "/v1"``.

Token ids. OpenAI's protocol returns token *strings*; the ids the trainer
needs are found, in this order of trust:

1. ``choices[0].token_ids`` -- vLLM sends them when asked with
   ``return_token_ids: true``, which this backend does unless told not to
   (``return_token_ids=False``, for servers that reject unknown fields);
2. tokens spelled ``token_id:123`` (vLLM's ``return_tokens_as_token_ids``,
   which can be passed in ``extra_body``);
3. the tokenizer, when given: each token string (or its ``bytes``, in chat
   mode) is looked up as one vocabulary entry, and the result is kept only if
   decoding the ids gives back the concatenated token strings. This is the
   tokenizer's reading of the strings, not proof of what was sampled: a token
   that is not valid UTF-8 on its own (a piece of a multi-byte character)
   has no faithful string form, and then no ids are returned at all.

When no ids can be had, ``token_ids`` is empty and ``logprobs`` is None
(logprobs that cannot be placed on tokens are worse than none); the loop then
encodes the text itself, and its retokenization check will say so.

Text. With ids and a tokenizer, ``Generation.text`` is ``decode(token_ids)``
(special tokens kept), as the local and sglang backends return it, so text
and ids always agree. Otherwise it is the server's text; in chat mode the
``tool_calls`` are appended to ``content`` in the Hermes form the SmolLM2 and
Qwen templates render (``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``),
so the loop's ``hermes`` parser reads them back. A reasoning parser's
``reasoning_content`` is not part of the text unless the ids are known.

Going the other way, assistant messages whose text holds Hermes tool calls
are sent as structured ``tool_calls`` with generated ids, and the tool
results after them carry the matching ``tool_call_id``, as strict servers
require.

The API key (``api_key``, else ``$OPENAI_API_KEY``) is sent as a bearer
token; it is never part of :meth:`OpenAIBackend.describe`, a repr, or an
error message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ..errors import BackendError, ConfigError
from ..records import jsonbounds
from ..records.episode import Generation, Message
from ..tokens.chat import decode
from ..tokens.tokenizer import Tokenizer
from ..tokens.toolcalls import parse_hermes
from . import topk
from .base import PROMPT_AS_TEXT, PROMPT_IDS, GenerationRequest
from .http import (
    MAX_ANSWER_BYTES,
    Answer,
    JSONClient,
    RetryPolicy,
    as_logprob,
    check_ids,
    check_url,
    finish_reason,
    vocab_size,
)

MODES = ("completions", "chat")
EXTENSIONS = ("return_token_ids",)
_LEARNED: dict[tuple[str, str], dict[str, str]] = {}  # (base URL, model) -> what that server refused
"""Request fields outside OpenAI's API reference that vLLM and sglang understand."""


def _refuses(message: str, field: str) -> bool:
    """Whether a 4xx answer refuses ``field`` (FastAPI's "Unexpected fields", OpenAI's "Unrecognized request
    argument", pydantic's "extra fields not permitted" all name it)."""
    return "HTTP 4" in message and field in message
TOKEN_ID_PREFIX = "token_id:"


class OpenAIBackend:
    """Generates through an OpenAI-compatible ``/v1/completions`` or ``/v1/chat/completions``.

    ``url``: the server (``http://host:8000`` or ``.../v1``). ``model``: the
    served model name sent with every request. ``mode``: ``completions`` or
    ``chat``. ``api_key``: defaults to ``$OPENAI_API_KEY`` (none if unset).
    ``client``, ``timeout``, ``retries``, ``backoff``, ``max_bytes``: see
    :mod:`engine.backends.http`. ``tokenizer``: makes text the decoding of
    the ids and lets token strings be mapped to ids. ``return_token_ids``:
    ask vLLM for the sampled ids. ``extra_body``: more request fields, merged
    last (e.g. ``{"skip_special_tokens": False}`` for vLLM).
    """

    name = "openai"

    def __init__(
        self,
        url: str,
        model: str,
        mode: str = "completions",
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_bytes: int = MAX_ANSWER_BYTES,
        tokenizer: Tokenizer | None = None,
        return_token_ids: bool = True,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"OpenAI backend mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not model:
            raise ConfigError("the OpenAI backend needs the served model's name (model=...)")
        base = check_url(url, "OpenAI-compatible server")
        self.base_url = base if base.endswith("/v1") else f"{base}/v1"
        self.model = model
        self.mode = mode
        self.tokenizer = tokenizer
        self._vocab = vocab_size(tokenizer)
        self.refused: dict[str, str] = _LEARNED.setdefault((self.base_url, model), {})
        """What this server refused (extension fields, a prompt of ids), with its answer: not sent again.
        Shared by every backend of this process that talks to the same server and model."""
        self.return_token_ids = return_token_ids and "return_token_ids" not in self.refused
        self.extra_body = dict(extra_body or {})
        self.policy = RetryPolicy(timeout=timeout, retries=retries, backoff=backoff, max_bytes=max_bytes)
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        # The key lives only in the client's headers, never on this object.
        self._http = JSONClient(self.name, self.policy, client, headers, health_url=f"{self.base_url[: -len('/v1')]}/health")

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/{'chat/completions' if self.mode == 'chat' else 'completions'}"

    # -- request -------------------------------------------------------------

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        s = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": s.max_new_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
        }
        if self.mode == "chat":
            if not request.messages:
                raise BackendError("openai (chat): the request has no messages")
            body["messages"] = openai_messages(request.messages)
            if request.tools:
                body["tools"] = [_as_openai_tool(t) for t in request.tools]
            body["logprobs"] = True
            if s.top_logprobs > 0:
                body["top_logprobs"] = s.top_logprobs
        else:
            if request.prompt_ids is not None and PROMPT_IDS not in self.refused:
                body["prompt"] = [int(x) for x in request.prompt_ids]
            elif request.prompt_ids is not None and request.prompt_text is None and self.tokenizer is not None:
                # A server that takes only text gets the ids' text, and tokenizes it again itself.
                body["prompt"] = decode(self.tokenizer, request.prompt_ids)
            elif request.prompt_text is not None:
                body["prompt"] = request.prompt_text
            else:
                raise BackendError("openai (completions): the request has neither prompt_ids nor prompt_text")
            body["logprobs"] = max(1, s.top_logprobs)
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            body["seed"] = s.seed
        if self.return_token_ids:
            body["return_token_ids"] = True
        body.update(self.extra_body)
        return body

    async def generate(self, request: GenerationRequest) -> Generation:
        """POST the request and read the first choice (BackendError on any failure).

        A strict server (OpenAI's API, ``transformers serve``) refuses fields its API reference does not
        define, and some take a prompt only as text. When it refuses one of the extensions sent here
        (vLLM's and sglang's ``return_token_ids``) or a prompt of token ids, this backend remembers it for
        this server (``refused`` says what and why; ``describe()`` records it on each episode) and sends
        the request again: without the field, or with the prompt's text. Ids then come from the token
        strings, or not at all, and the loop says so (``ids_reencoded``).
        """
        deadline = self._http.deadline()  # one turn's wait, however many times the request goes
        for _ in range(1 + len(EXTENSIONS) + 1):  # each refusal is learned once, then the request goes again
            body = self.payload(request)
            try:
                data, elapsed = await self._http.post(self.endpoint, body, deadline)
                break
            except BackendError as e:
                if not self._learn(str(e), body):
                    raise
        return self.parse(data, request, elapsed)

    def _learn(self, error: str, body: dict[str, Any]) -> bool:
        """Remember what a 4xx answer refuses (an extension field, a prompt of token ids); False if nothing."""
        why = error.split(": ", 1)[-1][:200]
        learned = False
        for f in EXTENSIONS:
            if f in body and _refuses(error, f):
                self.refused[f] = why
                learned = True
                if f == "return_token_ids":
                    self.return_token_ids = False
        prompt = body.get("prompt")
        if isinstance(prompt, list) and self.tokenizer is not None and _refuses(error, "prompt"):
            self.refused[PROMPT_IDS] = why
            learned = True
        return learned

    # -- answer --------------------------------------------------------------

    def parse(self, data: dict[str, Any], request: GenerationRequest, elapsed: float = 0.0) -> Generation:
        """Turn a (chat) completion answer into a Generation (BackendError naming what is missing)."""
        a = Answer(f"{self.name} at {self.endpoint}", data)
        choices = a.need("choices", list)
        if not choices:
            raise BackendError(f"{a.where}: the answer has an empty 'choices' list")
        choice = a.need("choices.0", dict)
        if self.mode == "chat":
            message = a.need("message", dict, obj=choice)
            content = a.get("content", str, "", obj=message)
            calls = a.get("tool_calls", list, [], obj=message)
            server_text = hermes_text(content, calls, a.where)
            entries = a.get("logprobs.content", list, None, obj=choice)
            tokens, lps, raw_bytes = self._chat_logprobs(a, entries)
            top = None if entries is None else [e.get("top_logprobs") for e in entries]
        else:
            server_text = a.need("text", str, obj=choice)
            lp = a.get("logprobs", dict, None, obj=choice)
            tokens = a.get("tokens", list, None, obj=lp) if lp is not None else None
            values = a.get("token_logprobs", list, None, obj=lp) if lp is not None else None
            lps = None if values is None else [as_logprob(v) for v in values]
            raw_bytes = None
            top = a.get("top_logprobs", list, None, obj=lp) if lp is not None else None

        found = self._ids(a, choice, tokens, raw_bytes)
        logprobs = tuple(lps) if found is not None and lps is not None and len(lps) == len(found) else None
        ids: list[int] = list(found or ())
        check_ids(a.where, ids, self._vocab, request.sampling.max_new_tokens)
        if self.tokenizer is not None and ids:
            text = decode(self.tokenizer, ids)
        else:
            text = server_text
        n_out = len(ids) or (len(tokens) if tokens else 0)
        n_prompt = len(request.prompt_ids) if request.prompt_ids is not None else 0
        return Generation(
            text=text,
            token_ids=tuple(ids),
            logprobs=logprobs,
            finish_reason=finish_reason(choice.get("finish_reason"), n_out, request.sampling.max_new_tokens),
            latency_s=elapsed,
            prompt_tokens=int(a.get("usage.prompt_tokens", int, n_prompt)),
            cached_tokens=int(a.get("usage.prompt_tokens_details.cached_tokens", int, 0)),
            model=str(data.get("model") or self.model),
            **topk.fields(self._top(top, request) if logprobs is not None else None, len(ids),
                          request.sampling.top_logprobs),
        )

    def _top(self, top: list[Any] | None, request: GenerationRequest) -> list[topk.Pairs] | None:
        """Per token, (id, logprob) of each alternative whose id can be told: completions give an object of token
        string to logprob, chat a list of ``{token, logprob, bytes}``."""
        if top is None or request.sampling.top_logprobs <= 0:
            return None
        out: list[topk.Pairs] = []
        for row in top:
            if isinstance(row, dict):
                entries = [(k, v, None) for k, v in row.items()]
            elif isinstance(row, list):
                entries = [(e.get("token"), e.get("logprob"), e.get("bytes")) for e in row if isinstance(e, dict)]
            else:
                entries = []
            pairs = []
            for token, lp, raw in entries:
                tid = self._token_id(token, raw)
                if tid is not None:
                    pairs.append((tid, as_logprob(lp)))
            out.append(pairs)
        return out

    def _token_id(self, token: Any, raw: Any) -> int | None:
        spelled = _spelled_id(token)
        if spelled is not None or self.tokenizer is None or not isinstance(token, str):
            return spelled
        text = token
        if isinstance(raw, list) and raw:
            try:
                text = bytes(raw).decode("utf-8")
            except (ValueError, TypeError):
                return None
        return _single_token(self.tokenizer, text)

    def _chat_logprobs(
        self, a: Answer, entries: list[Any] | None
    ) -> tuple[list[Any] | None, list[float] | None, list[Any] | None]:
        if entries is None:
            return None, None, None
        tokens, lps, raw = [], [], []
        for i, e in enumerate(entries):
            if not isinstance(e, dict):
                raise BackendError(f"{a.where}: 'choices.0.logprobs.content.{i}' is {e!r}, expected an object")
            tokens.append(e.get("token"))
            lps.append(as_logprob(e.get("logprob")))
            raw.append(e.get("bytes"))
        return tokens, lps, raw

    def _ids(
        self, a: Answer, choice: dict[str, Any], tokens: list[Any] | None, raw_bytes: list[Any] | None
    ) -> list[int] | None:
        given = choice.get("token_ids")
        if given is not None:
            if not isinstance(given, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in given):
                raise BackendError(f"{a.where}: 'choices.0.token_ids' is not a list of token ids")
            return list(given)
        if not tokens:
            return None
        return ids_from_token_strings(tokens, raw_bytes, self.tokenizer)

    # -- the rest ------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Backend config recorded on each episode (never the API key)."""
        d: dict[str, Any] = {
            "name": self.name,
            "url": self.base_url,
            "mode": self.mode,
            "model": self.model,
            "timeout": self.policy.timeout,
            "retries": self.policy.retries,
        }
        if self.refused:
            d["refused"] = dict(self.refused)  # a copy: what the episode says must not change after it
        if self.mode == "completions" and PROMPT_IDS in self.refused:
            d[PROMPT_AS_TEXT] = self.refused[PROMPT_IDS]
        if self.tokenizer is not None:
            d["tokenizer"] = str(getattr(self.tokenizer, "name_or_path", "") or type(self.tokenizer).__name__)
        return d

    async def aclose(self) -> None:
        """Close the HTTP client this backend created for the running event loop."""
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.base_url!r}, model={self.model!r}, mode={self.mode!r})"


# -- token strings to ids -------------------------------------------------------


def ids_from_token_strings(tokens: Sequence[Any], raw_bytes: Sequence[Any] | None, tokenizer: Tokenizer | None) -> list[int] | None:
    """Token ids for OpenAI logprob token strings, or None when they cannot be trusted.

    Strings spelled ``token_id:N`` (all of them) give N. Otherwise each
    string (or its UTF-8 ``bytes``) must be one token of ``tokenizer``, and
    the decoded ids must give back the concatenated strings.
    """
    spelled = [_spelled_id(t) for t in tokens]
    if all(x is not None for x in spelled):
        return [int(x) for x in spelled if x is not None]
    if tokenizer is None or any(x is not None for x in spelled) or not all(isinstance(t, str) for t in tokens):
        return None
    ids: list[int] = []
    for i, tok in enumerate(tokens):
        text = tok
        b = raw_bytes[i] if raw_bytes is not None and i < len(raw_bytes) else None
        if isinstance(b, list) and b:
            try:
                text = bytes(b).decode("utf-8")
            except (ValueError, TypeError):
                return None  # part of a multi-byte character: no string names it
        tid = _single_token(tokenizer, text)
        if tid is None:
            return None
        ids.append(tid)
    if decode(tokenizer, ids) != "".join(tokens):
        return None
    return ids


def _spelled_id(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith(TOKEN_ID_PREFIX) and token[len(TOKEN_ID_PREFIX) :].isdigit():
        return int(token[len(TOKEN_ID_PREFIX) :])
    return None


def _single_token(tokenizer: Tokenizer, text: str) -> int | None:
    # Special tokens and plain-word entries are vocabulary strings as they are;
    # byte-level entries ("Ġthe") are not, and go through encode.
    tid = tokenizer.convert_tokens_to_ids(text)
    if isinstance(tid, int) and tid != getattr(tokenizer, "unk_token_id", None) and decode(tokenizer, [tid]) == text:
        return tid
    enc = tokenizer.encode(text, add_special_tokens=False)
    return int(enc[0]) if len(enc) == 1 else None


# -- messages and tool calls ----------------------------------------------------


def hermes_text(content: str, tool_calls: Sequence[Any], where: str = "openai") -> str:
    """``content`` followed by each OpenAI tool call as a Hermes ``<tool_call>`` block.

    Arguments that are a JSON string are inserted as the model wrote them;
    a string that is not JSON is inserted as a JSON string, so the loop's
    parser reports it as the model's mistake.
    """
    blocks: list[str] = []
    for i, call in enumerate(tool_calls):
        fn = call.get("function") if isinstance(call, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(fn, dict) or not isinstance(name, str):
            raise BackendError(f"{where}: 'choices.0.message.tool_calls.{i}' has no function name")
        args = fn.get("arguments")
        if args is None:
            args_json = "{}"
        elif isinstance(args, str):
            try:
                jsonbounds.loads(args)
                args_json = args.strip()
            except ValueError:
                args_json = json.dumps(args)
        else:
            args_json = json.dumps(args, ensure_ascii=False)
        blocks.append('<tool_call>\n{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": ' + args_json + "}\n</tool_call>")
    return "\n".join(([content] if content else []) + blocks)


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as OpenAI chat messages.

    Assistant tool calls (structured, or Hermes blocks in the text) become
    ``tool_calls`` with ids ``call_<message>_<k>``; each following ``tool``
    message takes the next unanswered id as its ``tool_call_id``.
    """
    out: list[dict[str, Any]] = []
    unanswered: list[str] = []
    for m_index, m in enumerate(messages):
        if m.role == "assistant":
            calls = m.tool_calls
            content = m.content
            if not calls and "<tool_call>" in content:
                parsed = parse_hermes(content)
                if parsed.error is None and parsed.calls:
                    calls, content = parsed.calls, parsed.content
            d: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                ids = [c.id or f"call_{m_index}_{k}" for k, c in enumerate(calls)]
                d["content"] = content or None
                d["tool_calls"] = [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments_json()},
                    }
                    for cid, c in zip(ids, calls)
                ]
                unanswered = ids
            out.append(d)
        elif m.role == "tool":
            cid = unanswered.pop(0) if unanswered else f"call_{m_index}"
            d = {"role": "tool", "content": m.content, "tool_call_id": cid}
            if m.name is not None:
                d["name"] = m.name
            out.append(d)
        else:
            d = {"role": m.role, "content": m.content}
            if m.name is not None:
                d["name"] = m.name
            out.append(d)
    return out


def _as_openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    # Envs may give bare function schemas; the API wants them wrapped.
    if "type" not in tool and "name" in tool:
        return {"type": "function", "function": dict(tool)}
    return dict(tool)
