"""How the embedded model runs: one worker thread per loaded model, a prefix cache, and batched decoding.

Every generation on a model goes to that model's :class:`ModelWorker`. The
worker owns the model's forward passes. Per request it

1. looks up the longest token prefix of the prompt that the model has
   already seen (:class:`PrefixCache`: earlier prompts and generations of
   this process, least recently used evicted beyond a memory bound) and
   prefills only the rest, in chunks, so a long prompt does not stall the
   requests already decoding;
2. decodes all running requests together: one forward pass a token for the
   whole batch, each request's keys and values right-aligned in a shared
   left-padded cache, each with its own position ids, seed and stop rule.

What the model computes does not change: each request samples from its own
generator with the same logprob convention as before (see ``local``), and
its prefix cache only saves recomputing keys and values that are equal.
``Generation.cached_tokens`` says how many prompt tokens were served from
the cache, so a chat template that rewrites history shows as a miss at the
rewritten token.

A model whose cache layers are not plain growing key/value tensors (sliding
windows, linear attention) is run one request at a time with no reuse.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..records.episode import FinishReason
from .kvcache import DecodeBatch, PrefixCache, make_cache, reusable

if TYPE_CHECKING:
    import torch

PREFILL_CHUNK = 512
"""Prompt tokens prefilled per pass while other requests are decoding."""
DEFAULT_CACHE_MB = 2048

ProgressHook = Callable[[int, str], None]
PrefillHook = Callable[[int, int, int], None]  # (prompt tokens read, of how many, of them from the cache)
"""Called from the worker thread after each generated token: (tokens so far, text so far)."""


def thread_count() -> int:
    """Threads for the model's forward passes: ``$ROLLSCOPE_THREADS``, else the cores this process may use."""
    raw = os.environ.get("ROLLSCOPE_THREADS", "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cache_budget_bytes() -> int:
    """The prefix cache's memory bound: ``$ROLLSCOPE_KV_CACHE_MB`` (0 turns reuse off), else 2048 MB."""
    raw = os.environ.get("ROLLSCOPE_KV_CACHE_MB", "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_CACHE_MB
    except ValueError:
        mb = DEFAULT_CACHE_MB
    return max(0, int(mb * 2**20))


def scaled_logprobs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The logprob convention: log-softmax of the logits over the temperature (unscaled when greedy), before top-p."""
    import torch

    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1)


def entropy_and_top(logprobs: torch.Tensor, k: int) -> tuple[float, list[int], list[float]]:
    """(entropy in nats, the ``k`` most likely ids, their logprobs) of one position's scaled logprobs."""
    import torch

    values, ids = torch.topk(logprobs, min(k, logprobs.shape[-1]))
    # A token of probability 0 (logprob -inf) adds nothing: its 0 * -inf is NaN, which nansum leaves out.
    return float(-torch.nansum(logprobs.exp() * logprobs)), ids.tolist(), values.tolist()


def sample(logprobs: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """One token: the argmax when greedy, else a draw from the top-p head with ``generator``."""
    import torch

    if temperature <= 0:
        return int(torch.argmax(logprobs))
    probs = logprobs.exp()
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        # Keep the smallest head whose mass reaches top_p (always at least one token).
        keep = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        sorted_p = sorted_p * keep
        pick = torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=generator)
        return int(order[pick])
    return int(torch.multinomial(probs, 1, generator=generator))


# -- requests -------------------------------------------------------------------


@dataclass
class Job:
    """One generation request as the worker runs it."""

    prompt: list[int]
    max_new: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int
    decode: Callable[[list[int]], str]
    stop_ids: frozenset[int] = frozenset()
    on_progress: ProgressHook | None = None
    on_prefill: PrefillHook | None = None
    top_k: int = 0
    """Alternatives recorded per generated token (with the exact entropy), 0 for none."""
    future: concurrent.futures.Future[JobResult] = field(default_factory=concurrent.futures.Future)
    # state
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)
    top_logprobs: list[list[float]] = field(default_factory=list)
    cached: int = 0
    done_prefill: int = 0
    kv: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    length: int = 0  # tokens whose keys/values are held (prompt + ids[:-1])
    text_len: int = 0
    generator: Any = None
    cache: Any = None  # the DynamicCache while prefilling
    started: float = 0.0
    first_token_s: float | None = None
    cancelled: bool = False
    result: JobResult | None = None  # set when it ends; handed to its caller once its keys/values are cached

    def cancel(self) -> None:
        """Drop this request at the worker's next step (its caller has stopped waiting)."""
        self.cancelled = True

    @property
    def over(self) -> bool:
        return self.cancelled or self.result is not None or self.future.done()


@dataclass(frozen=True)
class JobResult:
    ids: list[int]
    logprobs: list[float]
    finish: FinishReason
    cached_tokens: int
    latency_s: float
    first_token_s: float | None
    entropy: list[float] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)
    top_logprobs: list[list[float]] = field(default_factory=list)


class ModelWorker:
    """Runs every generation of one loaded model: prefix reuse, chunked prefill, batched decoding."""

    def __init__(self, model: Any, device: str, lock: threading.Lock, *, max_cache_bytes: int | None = None, threads: int | None = None, batched: bool = True) -> None:
        self.model = model
        self.device = device
        self.lock = lock
        self.threads = threads
        self.reuse = reusable(model)
        self.batched = batched and self.reuse
        budget = cache_budget_bytes() if max_cache_bytes is None else max_cache_bytes
        self.cache = PrefixCache(budget if self.reuse else 0)
        self.limit = getattr(model.config, "max_position_embeddings", None)
        self._queue: list[Job] = []
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self.batch_sizes: list[int] = []  # decode batch size per pass (for tests and benches)
        self.seconds: dict[str, float] = {"prefill": 0.0, "decode": 0.0, "batching": 0.0, "cache": 0.0}
        # The decoding batch: its jobs in row order, their right-aligned keys/values and padding mask.
        self._rows: list[Job] = []
        self._batch = DecodeBatch()

    def submit(self, job: Job) -> concurrent.futures.Future[JobResult]:
        limit = self.limit
        if limit is not None:
            job.max_new = min(job.max_new, max(0, int(limit) - len(job.prompt)))
        with self._cv:
            self._queue.append(job)
            if self._closing:
                raise RuntimeError("the model worker has stopped (the process is exiting)")
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="rollscope-model", daemon=True)
                self._thread.start()
                atexit.register(self.close)
            self._cv.notify()
        return job.future

    def close(self, timeout: float = 30.0) -> None:
        """Stop the worker after its current step (at exit: a thread killed inside a forward pass aborts)."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the loop ---------------------------------------------------------------

    def _run(self) -> None:
        import torch

        torch.set_num_threads(self.threads or thread_count())  # per thread under OpenMP: set where forwards run
        prefilling: list[Job] = []
        while True:
            with self._cv:
                while not self._queue and not prefilling and not self._rows and not self._closing:
                    self._cv.wait()
                new, self._queue = self._queue, []
            if self._closing:
                for job in [*new, *prefilling, *self._rows]:
                    self._fail(job, RuntimeError("the model worker stopped (the process is exiting)"))
                return
            for job in new:
                if job.future.set_running_or_notify_cancel():
                    job.started = time.perf_counter()
                    prefilling.append(job)
            prefilling = [j for j in prefilling if not j.over]
            if not self.reuse:
                for job in prefilling:
                    self._guarded([job], self._run_plain, job)
                prefilling.clear()
                continue
            if prefilling:
                job = prefilling[0]
                if self._guarded([job], self._prefill_step, job) is not False:
                    prefilling.pop(0)
            # One request at a time unless batched: decode it to its end before the next prefill.
            while self._rows and not self._closing:
                self._guarded(self._rows, self._decode_step)
                if self.batched:
                    break

    def _guarded(self, jobs: list[Job], step: Callable[..., Any], *args: Any) -> Any:
        """Run one step; an error fails the requests it touched (their callers see it), not the worker."""
        try:
            return step(*args)
        except BaseException as e:
            for job in list(jobs):
                self._fail(job, e)
            if jobs is self._rows or any(j in self._rows for j in jobs):
                self._drop_all()
            return None

    def _fail(self, job: Job, error: BaseException) -> None:
        if not job.future.done():
            job.future.set_exception(error)

    def _prefill_step(self, job: Job) -> bool:
        """Prefill the next chunk of ``job``'s prompt; True once it has its first token (or ended)."""
        import torch

        if job.over:
            return True
        if job.max_new <= 0:
            self._finish(job, "length")
            self._resolve(job)
            return True
        if job.cache is None:
            self._start_prefill(job)
        part = job.prompt[job.done_prefill : job.done_prefill + PREFILL_CHUNK]
        last = job.done_prefill + len(part) == len(job.prompt)
        t0 = time.perf_counter()
        with self.lock, torch.inference_mode():
            x = torch.tensor([part], device=self.device)
            out = self.model(input_ids=x, past_key_values=job.cache, use_cache=True, logits_to_keep=1)
        self.seconds["prefill"] += time.perf_counter() - t0
        job.done_prefill += len(part)
        self._tell_prefill(job)
        if not last:
            return False
        job.kv = [(layer.keys, layer.values) for layer in job.cache.layers]
        job.length = len(job.prompt)
        job.cache = None
        if self.cache.max_bytes:
            t0 = time.perf_counter()
            self.cache.put(np.asarray(job.prompt, dtype=np.int64), [(k.clone(), v.clone()) for k, v in job.kv])
            self.seconds["cache"] += time.perf_counter() - t0
        self._take(job, out.logits[0, -1])
        if not job.over:
            self._join(job)
        self._resolve(job)
        return True

    def _start_prefill(self, job: Job) -> None:
        import torch

        job.generator = torch.Generator(device="cpu").manual_seed(int(job.seed))
        prompt = np.asarray(job.prompt, dtype=np.int64)
        n, entry = self.cache.lookup(prompt) if self.cache.max_bytes else (0, None)
        n = min(n, len(job.prompt) - 1)  # at least one token goes through the model, for its logits
        job.cached = max(0, n)
        if entry is not None and n > 0:
            job.cache = make_cache([(k[:, :, :n], v[:, :, :n]) for k, v in entry.kv], len(job.prompt) - n + job.max_new)
        else:
            from transformers import DynamicCache

            job.cache = DynamicCache(config=self.model.config)
        job.done_prefill = job.cached
        self._tell_prefill(job)

    @staticmethod
    def _tell_prefill(job: Job) -> None:
        if job.on_prefill is not None:
            try:
                job.on_prefill(job.done_prefill, len(job.prompt), job.cached)
            except Exception:  # a watcher's failure must not fail the generation
                job.on_prefill = None

    def _take(self, job: Job, logits: torch.Tensor) -> None:
        """Sample ``job``'s next token from its logits; finish it when a stop rule says so."""
        lp = scaled_logprobs(logits.to("cpu"), job.temperature)
        nxt = sample(lp, job.temperature, job.top_p, job.generator)
        job.ids.append(nxt)
        job.logprobs.append(float(lp[nxt]))
        if job.top_k > 0:
            h, ids, values = entropy_and_top(lp, job.top_k)
            job.entropy.append(h)
            job.top_ids.append(ids)
            job.top_logprobs.append(values)
        if job.first_token_s is None:
            job.first_token_s = time.perf_counter() - job.started
        text: str | None = None
        if job.on_progress is not None or job.stop:
            text = job.decode(job.ids)
        if job.on_progress is not None:
            try:
                job.on_progress(len(job.ids), text or "")
            except Exception:  # a display hook must not end a generation
                job.on_progress = None
        if nxt in job.stop_ids:
            self._finish(job, "stop")
        elif job.stop and text is not None:
            # Only the new text can complete a stop string (allow overlap).
            window = text[max(0, job.text_len - max(len(t) for t in job.stop)) :]
            job.text_len = len(text)
            if any(t and t in window for t in job.stop):
                self._finish(job, "stop")
        if not job.over and len(job.ids) >= job.max_new:
            self._finish(job, "length")

    def _finish(self, job: Job, finish: FinishReason) -> None:
        if job.result is None:
            job.result = JobResult(list(job.ids), list(job.logprobs), finish, job.cached,
                                   time.perf_counter() - job.started, job.first_token_s, list(job.entropy),
                                   list(job.top_ids), list(job.top_logprobs))

    @staticmethod
    def _resolve(job: Job) -> None:
        """Hand an ended job's result to its caller (after its keys/values went to the prefix cache)."""
        if job.result is not None and not job.future.done():
            job.future.set_result(job.result)

    def _run_plain(self, job: Job) -> None:
        """A model whose cache cannot be cut or batched: prefill the whole prompt, decode to the end."""
        import torch
        from transformers import DynamicCache

        job.generator = torch.Generator(device="cpu").manual_seed(int(job.seed))
        if job.max_new <= 0:
            self._finish(job, "length")
            self._resolve(job)
            return
        with self.lock, torch.inference_mode():
            cache = DynamicCache(config=self.model.config)
            x = torch.tensor([job.prompt], device=self.device)
            out = self.model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
            while True:
                self._take(job, out.logits[0, -1])
                if job.over:
                    self._resolve(job)
                    return
                x = torch.tensor([[job.ids[-1]]], device=self.device)
                out = self.model(input_ids=x, past_key_values=cache, use_cache=True)

    # -- the decoding batch -------------------------------------------------------

    def _join(self, job: Job) -> None:
        t0 = time.perf_counter()
        self._batch.add(job.kv, job.length)
        job.kv = []
        self._rows.append(job)
        self.seconds["batching"] += time.perf_counter() - t0

    def _leave(self, i: int) -> None:
        """Row ``i`` leaves the batch; what its model saw goes to the prefix cache."""
        t0 = time.perf_counter()
        job = self._rows[i]
        kv = self._batch.remove(i)
        self._rows[i] = self._rows[-1]
        self._rows.pop()
        self.seconds["batching"] += time.perf_counter() - t0
        seen = job.prompt + job.ids[:-1]
        if self.cache.max_bytes and not job.cancelled and len(seen) == job.length:
            t0 = time.perf_counter()
            self.cache.put(np.asarray(seen, dtype=np.int64), kv)
            self.seconds["cache"] += time.perf_counter() - t0
        self._resolve(job)

    def _drop_all(self) -> None:
        self._rows = []
        self._batch = DecodeBatch()

    def _decode_step(self) -> None:
        import torch

        for i in reversed(range(len(self._rows))):
            if self._rows[i].over:
                self._leave(i)
        if not self._rows:
            return
        rows = list(self._rows)
        x = torch.tensor([[j.ids[-1]] for j in rows], device=self.device)
        self.batch_sizes.append(len(rows))
        t0 = time.perf_counter()
        with self.lock, torch.inference_mode():
            cache, kwargs = self._batch.step_inputs()
            out = self.model(input_ids=x, past_key_values=cache, use_cache=True, **kwargs)
        self._batch.advance()
        self.seconds["decode"] += time.perf_counter() - t0
        for i, job in enumerate(rows):
            job.length += 1
            self._take(job, out.logits[i, -1])
        # Finished rows leave now, before any new request looks the prefix cache up.
        for i in reversed(range(len(self._rows))):
            if self._rows[i].over:
                self._leave(i)
