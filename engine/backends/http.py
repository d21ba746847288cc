"""What the HTTP backends share: one JSON POST with a timeout, bounded retries
and errors that say where and why.

A request is tried up to ``1 + retries`` times within one deadline: ``timeout`` bounds the whole request, every
try, backoff and health check included, so a server that trickles its answer, or fails slowly again and again,
holds a turn for ``timeout`` seconds at most. It is retried when it could not be
sent or answered (connection refused or reset, the connection dropped
mid-answer, a timeout) or when the server answers 5xx, 408 or 429 (the last
two mean "try again later": a rate-limited server under an RL batch is the
usual case), after ``backoff * 2**(n - 1)`` seconds, or the server's
``Retry-After`` if longer, capped at ``MAX_BACKOFF_S``. Any other 4xx is the
request's fault and is not retried.

A dead or hung server ends a batch in about one timeout. When a try gets
no answer and the backend knows the server's health URL (``/health`` on sglang, vLLM and
``transformers serve``; any answer below 500 counts), that URL is asked (within ``HEALTH_TIMEOUT_S``); a server
that does not answer it either is marked down: the request is not retried,
and every later request of the batch fails at once, without being sent,
until a health check (at most every ``HEALTH_TTL_S``) passes again.
``MAX_CONSECUTIVE`` requests in a row that fail after all their tries mark it
down the same way, even when its health check passes.

Every failure becomes a :class:`~engine.errors.BackendError` whose message
names the server and URL, the HTTP status or the cause, how many tries were
made, and a short excerpt of the body, e.g.::

    sglang at http://127.0.0.1:30000/generate: HTTP 500 after 4 tries: CUDA out of memory

The loop turns a BackendError into an ``aborted`` episode with that message
as its reason, so a dead server never crashes a batch.

Answers are read in chunks against two limits: ``max_bytes`` for one answer (past it the answer is refused, not
retried), and the same number for all the answers this process holds at once (:class:`AnswerBudget`, shared by
every client with that limit; the first ``OWN_BYTES`` of each answer, all an ordinary answer needs, are its own):
sixteen concurrent requests hold 64 MiB between them, plus a MiB each, not 64 MiB each. A request that finds the
budget spent is refused with that reason and retried, within its deadline, after the backoff.

The ``httpx.AsyncClient`` is the seam for tests (inject one with a
``MockTransport``) and for sharing connection pools. Without one, a client is
created per event loop: an AsyncClient's connections belong to the loop that
opened them, and a backend object may outlive one ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import BackendError, ConfigError, InvalidAnswer
from ..records import jsonbounds
from ..records.episode import FinishReason
from ..tokens.tokenizer import Tokenizer

MAX_BACKOFF_S = 30.0
EXCERPT_CHARS = 200
RETRY_STATUSES = frozenset({408, 429})


MAX_ANSWER_BYTES = 64 * 2**20
OWN_BYTES = 2**20
"""The first bytes of every answer are its own; past them, answers draw on the process's shared budget."""
HEALTH_TIMEOUT_S = 5.0
HEALTH_TTL_S = 10.0
MAX_CONSECUTIVE = 3


@dataclass(frozen=True)
class RetryPolicy:
    """Deadline of a whole request (seconds), retries after the first try, base backoff (seconds), answer size
    limit (bytes).

    ``timeout`` bounds the whole request, from sending it to the answer's last byte, retries and the waits
    between them included: a server that trickles its answer a byte at a time, or fails slowly on every try,
    cannot hold a request longer than that. ``max_bytes`` bounds one answer, and all the answers the process
    holds at once (:class:`AnswerBudget`).
    """

    timeout: float = 60.0
    retries: int = 3
    backoff: float = 0.5
    max_bytes: int = MAX_ANSWER_BYTES

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ConfigError(f"timeout must be a positive number of seconds, not {self.timeout}")
        if self.retries < 0:
            raise ConfigError(f"retries must be 0 or more, not {self.retries}")
        if self.backoff < 0:
            raise ConfigError(f"backoff must be 0 or more seconds, not {self.backoff}")
        if self.max_bytes < 1:
            raise ConfigError(f"max_bytes must be 1 or more, not {self.max_bytes}")

    @property
    def tries(self) -> int:
        return 1 + self.retries

    def delay(self, failed_tries: int) -> float:
        """Seconds to wait after the ``failed_tries``-th failed try."""
        return float(min(MAX_BACKOFF_S, self.backoff * 2 ** (failed_tries - 1)))


def check_url(url: str, what: str) -> str:
    """The base URL without a trailing slash; ConfigError when it is not http(s)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise ConfigError(f"{what} URL {url!r} is not a URL: {e}") from e
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"{what} URL must look like http://host:port, not {url!r}")
    return url.rstrip("/")


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """A body shortened to one line: the error message if it is a JSON error, else its start."""
    message = _error_message(text)
    one_line = " ".join((message if message is not None else text).split())
    if not one_line:
        return "(empty body)"
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


def _error_message(text: str) -> str | None:
    # OpenAI, vLLM and sglang wrap errors as {"error": {"message": ...}} or
    # {"error": "..."}; FastAPI as {"detail": ...}; some as {"message": ...}.
    try:
        obj = jsonbounds.loads(text, limit=None)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return str(err["message"])
    for key in ("error", "detail", "message"):
        if isinstance(obj.get(key), str):
            return str(obj[key])
    return None


class TooLarge(Exception):
    """An answer past the size limit (not retried: the same request would get the same answer)."""


class Crowded(Exception):
    """The answers held at once are at the process's limit (retried: the others will be done)."""


class AnswerBudget:
    """Bytes of server answers this process holds at once, shared by every request (any thread, any event loop)
    whose clients have the same limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        """Count ``n`` more bytes as held; False, counting nothing, when that would pass the limit."""
        with self._lock:
            if self.held + n > self.limit:
                return False
            self.held += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.held -= n


_BUDGETS: dict[int, AnswerBudget] = {}
_BUDGETS_LOCK = threading.Lock()


def answer_budget(limit: int) -> AnswerBudget:
    """The process's budget for answers of clients whose one-answer limit is ``limit``."""
    with _BUDGETS_LOCK:
        return _BUDGETS.setdefault(limit, AnswerBudget(limit))


@dataclass
class _Reply:
    status: int
    headers: httpx.Headers
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


@dataclass
class _Held:
    """Bytes of the budget one try holds."""

    n: int = 0


def _cause(e: Exception, timeout: float) -> str:
    if isinstance(e, (httpx.TimeoutException, TimeoutError)):
        return f"no complete answer within {timeout:g}s"
    if isinstance(e, httpx.ConnectError):
        return f"cannot connect ({e or type(e).__name__})"
    if isinstance(e, httpx.RemoteProtocolError):
        return f"the connection was dropped ({e or type(e).__name__})"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _retry_after(response: _Reply) -> float:
    # A 429 or 503 may say when to come back; honour it, within MAX_BACKOFF_S.
    value = response.headers.get("retry-after", "")
    try:
        return min(MAX_BACKOFF_S, max(0.0, float(value)))
    except ValueError:
        return 0.0  # absent, or an HTTP date: the exponential backoff applies


def _tries(n: int) -> str:
    return "1 try" if n == 1 else f"{n} tries"


class JSONClient:
    """POSTs (and GETs) JSON for one backend, with the retry policy above.

    ``name`` prefixes every error message (``sglang``, ``openai``). Headers
    given here are sent with every request and never appear in messages.
    """

    def __init__(
        self,
        name: str,
        policy: RetryPolicy,
        client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        health_url: str | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        self._injected = client
        self._headers = dict(headers or {})
        self._owned: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self.health_url = health_url
        self.down: tuple[float, str] | None = None
        """(when it was found down, why) while the server is taken for down."""
        self.consecutive = 0
        self._probed: tuple[float, str | None] | None = None  # (when, why it is down or None)
        self._probe_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._asking: tuple[asyncio.AbstractEventLoop, asyncio.Task[str | None]] | None = None
        """A health check started when a request's deadline passed without an answer, for the next requests."""

    def __repr__(self) -> str:  # headers may hold an API key: never show them
        return f"JSONClient({self.name!r}, {self.policy})"

    @property
    def budget(self) -> AnswerBudget:
        return answer_budget(self.policy.max_bytes)

    def _client(self) -> httpx.AsyncClient:
        if self._injected is not None:
            return self._injected
        loop = asyncio.get_running_loop()
        client = self._owned.get(loop)
        if client is None or client.is_closed:
            # Forget clients of finished loops (each asyncio.run makes one); their
            # connections cannot be closed politely any more, only dropped.
            self._owned = {lp: c for lp, c in self._owned.items() if not lp.is_closed()}
            client = httpx.AsyncClient()
            self._owned[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the client this object created for the running loop (an injected one is the caller's)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        client = self._owned.pop(loop, None)
        if client is not None:
            await client.aclose()

    def deadline(self) -> float:
        """When a request started now must be done (``time.monotonic``): ``timeout`` from now."""
        return time.monotonic() + self.policy.timeout

    async def post(self, url: str, payload: Any, deadline: float | None = None) -> tuple[dict[str, Any], float]:
        """POST ``payload`` as JSON; (the JSON object answered, seconds the successful try took). ``deadline``
        (``time.monotonic``) bounds the request with its retries; default: ``timeout`` from now. A caller that
        sends a request again (a refused field learned) passes the first one's, so one turn waits ``timeout``."""
        return await self._request("POST", url, payload, deadline)

    async def get(self, url: str) -> tuple[dict[str, Any], float]:
        """GET a JSON object, with the same retries and errors as :meth:`post`."""
        return await self._request("GET", url, None)

    # -- health ------------------------------------------------------------------

    async def probe(self) -> str | None:
        """Ask the health URL once (shared by concurrent callers); None when the server answers, else why not."""
        if self.health_url is None:
            return None
        loop = asyncio.get_running_loop()
        if self._probe_lock is None or self._probe_lock[0] is not loop:
            self._probe_lock = (loop, asyncio.Lock())
        async with self._probe_lock[1]:
            now = time.monotonic()
            if self._probed is not None and now - self._probed[0] < 1.0:
                return self._probed[1]  # a caller that waited for the lock takes the answer just got
            limit = min(self.policy.timeout, HEALTH_TIMEOUT_S)
            why: str | None = None
            try:
                response = await asyncio.wait_for(
                    self._client().get(self.health_url, headers=self._headers, timeout=limit), limit)
                if response.status_code >= 500:
                    why = f"HTTP {response.status_code}"
            except (httpx.HTTPError, TimeoutError) as e:
                why = _cause(e, limit)
            self._probed = (time.monotonic(), why)
            if why is not None:
                self.down = (time.monotonic(), f"its health check (GET {self.health_url}) failed too: {why}")
            return why

    def _ask_soon(self) -> None:
        """Ask the health URL without waiting: a request out of time takes no more, the next ones hear it."""
        if self.health_url is None:
            return
        loop = asyncio.get_running_loop()
        if self._asking is None or self._asking[0] is not loop or self._asking[1].done():
            self._asking = (loop, loop.create_task(self.probe()))

    async def _check_up(self, where: str, end: float) -> None:
        """BackendError, without sending, while the server is taken for down; a health check when that is old.
        A health check under way (an earlier request found no answer) is waited for, within ``end``."""
        asking = self._asking
        if asking is not None and asking[0] is asyncio.get_running_loop() and not asking[1].done():
            try:
                await asyncio.wait_for(asyncio.shield(asking[1]), max(0.0, end - time.monotonic()))
            except TimeoutError:
                raise BackendError(f"{where}: not sent: an earlier request got no answer and the server's health "
                                   "check has not answered either") from None
        down = self.down
        if down is None:
            return
        if time.monotonic() - down[0] >= HEALTH_TTL_S and self.health_url is not None and await self.probe() is None:
            self.down = None  # it answers again: let the request through
            return
        raise BackendError(f"{where}: not sent: the server is taken for down ({(self.down or down)[1]}); it is "
                           f"asked again every {HEALTH_TTL_S:g}s")

    def _failed(self, cause: str) -> None:
        self.consecutive += 1
        if self.consecutive >= MAX_CONSECUTIVE and self.down is None:
            self.down = (time.monotonic(), f"{self.consecutive} requests in a row failed, the last: {cause}")

    async def _request(self, method: str, url: str, payload: Any, deadline: float | None = None
                       ) -> tuple[dict[str, Any], float]:
        policy = self.policy
        where = f"{self.name} at {url}"
        end = self.deadline() if deadline is None else deadline
        await self._check_up(where, end)
        cause, body, earlier = "", "", ""
        tries = 0
        for attempt in range(1, policy.tries + 1):
            left = end - time.monotonic()
            if left <= 0:
                break
            tries = attempt
            t0 = time.perf_counter()
            wait = 0.0
            answered = crowded = False
            held = _Held()
            try:
                try:
                    response = await asyncio.wait_for(self._once(method, url, payload, left, held), left)
                except (httpx.HTTPError, TimeoutError) as e:  # refused, reset, dropped, past the deadline
                    cause, body = _cause(e, policy.timeout), ""
                except TooLarge as e:
                    raise BackendError(f"{where}: {e}") from None
                except Crowded as e:  # this process's limit, not the server's fault
                    answered, crowded, cause, body = True, True, str(e), ""
                else:
                    answered = True
                    elapsed = time.perf_counter() - t0
                    status = response.status
                    if status < 400:
                        self.consecutive = 0
                        return self._json(where, response), elapsed
                    if status < 500 and status not in RETRY_STATUSES:
                        raise BackendError(f"{where}: HTTP {status}: {excerpt(response.text)}")
                    cause, body = f"HTTP {status}", excerpt(response.text)
                    wait = _retry_after(response)
                if answered:
                    earlier = f"{cause}: {body}" if body else cause
            finally:
                self.budget.give(held.n)
            if attempt < policy.tries:
                pause = max(policy.delay(attempt), wait)
                if time.monotonic() + pause >= end:
                    break  # no time for another try
                await asyncio.sleep(pause)
                # No answer at all (refused, dropped, past the deadline): is the server there?
                if not answered:
                    try:
                        why = await asyncio.wait_for(self.probe(), max(0.0, end - time.monotonic()))
                    except TimeoutError:
                        break
                    if why is not None and self.down is not None:
                        self._failed(cause)
                        message = f"{where}: {cause} after {_tries(attempt)}; {self.down[1]}: not retried"
                        raise BackendError(f"{message}: {body}" if body else message)
        if not crowded:
            self._failed(cause)
        if tries and not answered:
            self._ask_soon()  # no answer by the deadline: is the server there? (for the requests after this one)
        message = f"{where}: {cause} after {_tries(tries)}"
        if tries < policy.tries:
            message += f" (the request's {policy.timeout:g}s deadline left no time for another)"
        if body:
            message += f": {body}"
        elif earlier and not answered:  # the last try was cut off by the deadline: what the others got
            message += f"; before that: {earlier}"
        raise BackendError(message)

    async def _once(self, method: str, url: str, payload: Any, timeout: float, held: _Held) -> _Reply:
        """One try: the whole answer, read in chunks so that its size is known before it is all in memory, each
        chunk counted against the process's budget (``held``: what this try holds of it)."""
        limit = self.policy.max_bytes
        budget = self.budget
        async with self._client().stream(
            method, url, json=payload, headers=self._headers, timeout=timeout
        ) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise TooLarge(f"the answer is {int(declared):,} bytes, over the {limit:,}-byte limit")
            chunks, size = [], 0
            try:
                async for chunk in response.aiter_bytes():
                    if size + len(chunk) > limit:
                        raise TooLarge(f"the answer is over the {limit:,}-byte limit (it was still coming)")
                    need = max(0, size + len(chunk) - OWN_BYTES) - held.n  # past its own first bytes: the budget's
                    if need > 0:
                        if not budget.take(need):
                            raise Crowded(f"the answers this process holds at once are at their {limit:,}-byte "
                                          f"limit (this one had {size:,} bytes)")
                        held.n += need
                    size += len(chunk)
                    chunks.append(chunk)
            except BaseException:
                budget.give(held.n)  # now, not once the connection is closed: the other answers go on meanwhile
                held.n = 0
                raise
            return _Reply(response.status_code, response.headers, b"".join(chunks))

    @staticmethod
    def _json(where: str, response: _Reply) -> dict[str, Any]:
        try:
            data = jsonbounds.loads(response.content)
        except ValueError as e:
            detail = f"{e.msg} at character {e.pos}" if isinstance(e, json.JSONDecodeError) else str(e)
            raise BackendError(
                f"{where}: the answer is not valid JSON ({detail}); it starts: {excerpt(response.text, 120)}"
            ) from e
        if not isinstance(data, dict):
            raise BackendError(f"{where}: the answer is a JSON {type(data).__name__}, not an object")
        return data


# -- reading answers ------------------------------------------------------------


class Answer:
    """Typed reads from a JSON answer; a missing or mistyped field is a BackendError naming it."""

    def __init__(self, where: str, data: Mapping[str, Any]) -> None:
        self.where = where
        self.data = data

    def need(self, path: str, kind: type | tuple[type, ...], obj: Any = None) -> Any:
        """The value at dotted ``path`` (in ``obj``, default the whole answer), of type ``kind``."""
        value: Any = self.data if obj is None else obj
        walked: list[str] = []
        for key in path.split("."):
            walked.append(key)
            if isinstance(value, Mapping) and key in value:
                value = value[key]
            elif isinstance(value, Sequence) and not isinstance(value, str) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                raise BackendError(f"{self.where}: the answer has no '{'.'.join(walked)}'{self._keys(value)}")
        self._check(path, value, kind)
        return value

    def get(self, path: str, kind: type | tuple[type, ...], default: Any = None, obj: Any = None) -> Any:
        """Like :meth:`need`, but ``default`` when the field is absent or null."""
        value: Any = self.data if obj is None else obj
        for key in path.split("."):
            if isinstance(value, Mapping) and value.get(key) is not None:
                value = value[key]
            else:
                return default
        self._check(path, value, kind)
        return value

    def _check(self, path: str, value: Any, kind: type | tuple[type, ...]) -> None:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int to Python, not to JSON.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            expected = " or ".join(_json_type(t) for t in kinds)
            raise BackendError(f"{self.where}: '{path}' is {_json_type(type(value))}, expected {expected}")

    @staticmethod
    def _keys(value: Any) -> str:
        if isinstance(value, Mapping):
            keys = ", ".join(sorted(str(k) for k in value)[:12])
            return f" (it has: {keys})" if keys else " (it is an empty object)"
        return ""


_JSON_TYPES = {str: "a string", int: "an integer", float: "a number", list: "an array", dict: "an object",
               bool: "a boolean", type(None): "null"}


def _json_type(t: type) -> str:
    return _JSON_TYPES.get(t, t.__name__)


_STOP = {"stop", "eos", "eos_token", "stop_sequence", "end_turn", "tool_calls", "function_call", "matched"}
_LENGTH = {"length", "max_tokens", "max_length"}


def finish_reason(value: Any, n_tokens: int, max_new_tokens: int) -> FinishReason:
    """``stop``, ``length`` or ``abort`` from what a server says, leniently.

    Takes sglang's ``{"type": ...}`` objects or OpenAI-style strings. A null
    reason (a server that never says) is ``length`` when the token budget was
    used up and ``stop`` otherwise. Anything unknown (``error``,
    ``content_filter``, ``cancelled``...) is ``abort``: the loop then ends the
    episode as aborted instead of training on an answer nobody vouches for.
    """
    if isinstance(value, Mapping):
        value = value.get("type")
    if value is None:
        return "length" if max_new_tokens > 0 and n_tokens >= max_new_tokens else "stop"
    reason = str(value).strip().lower()
    if reason in _STOP:
        return "stop"
    if reason in _LENGTH:
        return "length"
    return "abort"


ID_LIMIT = 2**31
"""Token ids are stored as int32: without a tokenizer to say the vocabulary size, this bounds them."""


def vocab_size(tokenizer: Tokenizer | None) -> int:
    """How many ids the tokenizer knows (added tokens included), or ``ID_LIMIT`` without one."""
    return ID_LIMIT if tokenizer is None else min(ID_LIMIT, len(tokenizer))


def check_ids(where: str, ids: Sequence[int], vocab: int, max_new_tokens: int) -> None:
    """InvalidAnswer when a server's ids are outside ``[0, vocab)`` or more than ``max_new_tokens`` were returned.

    Checked before anything decodes them: a negative or huge id makes a tokenizer raise, and an id past
    the vocabulary decodes to nothing while the trainer would index past its embedding table.
    """
    if max_new_tokens > 0 and len(ids) > max_new_tokens:
        raise InvalidAnswer(f"{where}: the server returned {len(ids):,} tokens for max_new_tokens={max_new_tokens}")
    for i, t in enumerate(ids):
        if not 0 <= t < vocab:
            known = f"the tokenizer's vocabulary (0..{vocab - 1})" if vocab < ID_LIMIT else "any vocabulary"
            raise InvalidAnswer(f"{where}: generated token {i} has id {t}, outside {known}")


def as_logprob(value: Any) -> float:
    """A logprob from JSON: null (unknown) and non-numbers become NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def as_version(value: Any) -> int | None:
    """An integer weight version from what a server reports (sglang sends a string, "default" at start)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, int) and 0 <= value < ID_LIMIT:  # stored per token as int32
        return value
    return None
