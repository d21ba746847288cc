"""slime's debug dumps: ``--save-debug-rollout-data`` and ``--dump-details``.

What slime writes (THUDM/slime, ``slime/ray/rollout.py``
``RolloutManager._save_debug_rollout_data`` and ``slime/utils/types.py``)::

    torch.save({"rollout_id": int, "samples": [Sample.to_dict(), ...]}, path)

``Sample.to_dict()`` is the dataclass ``__dict__`` with ``status`` as its
string value: ``group_index, index, prompt`` (text or a list of messages),
``tokens`` (prompt + response ids), ``response, response_length, label,
reward`` (float or dict), ``loss_mask`` (over the response only; ``None``
means all ones, and slime asserts its length equals ``response_length``),
``weight_versions`` (one string per generation call), ``rollout_log_probs``
(over the response), ``status`` (pending / completed / truncated / aborted /
failed) and ``metadata``, among others.

``--dump-details DIR`` sets the rollout path to
``DIR/rollout_data/{rollout_id}.pt``, the train-side path to
``DIR/train_data/{rollout_id}_{rank}.pt`` (``{"rollout_id", "rank",
"rollout_data"}``, ``rollout_data`` a dict of per-sample lists keyed like
``sample_indices, log_probs, ref_log_probs, advantages, returns``) and saves
the tokenizer to ``DIR/tokenizer``. All three are used here.

Import decisions:

* the response is the last ``response_length`` tokens; prompt tokens get
  mask 0 and NaN logprobs;
* a loss mask whose length differs from ``response_length`` is imported,
  laid from the response start (cut or padded with 0), with both lengths in
  ``source`` so ``rollscope check`` reports ``mask_misaligned``: the point
  of a debugger is to show that record, not to drop it;
* ``rollout_log_probs`` of another length than the response (or than its
  trainable tokens) are laid from the response start too (cut, or unknown
  past their end), their length in ``source`` for ``logprobs_misaligned``;
* ``pending`` (never finished) becomes ``interrupted``; the slime status
  is kept in ``source["status"]``;
* ``weight_versions`` become per-token versions when there is one per
  generated run (or one in all);
* train-side values joined on ``sample_indices`` = ``index`` go, as lists,
  to ``source["train"]``.

Export writes the same shape, loadable by ``--load-debug-rollout-data``:
plain ints, floats and strings only (slime's loader and ours use
``weights_only`` loading). NaN logprobs are written as 0.0 (slime would
propagate NaN through masked sums) and their positions kept in
``metadata["rollscope"]``, which the importer reads back, so Rollscope ->
slime -> Rollscope is exact for tokens, mask, logprobs, reward and status.
Per-token policy versions ride along there too (slime keeps one version
per generation call), and each generated run's finish reason (slime keeps
one status a sample), and the tokenizer, which an import given none reads with. ``response`` is a
human-readable join of the turns;
slime trains on ``tokens``. Samples imported from one slime rollout are written back with its ``rollout_id``,
their own ``index`` and ``group_index`` (what its train dumps join on) and a reward model's dict of scores, so such
a dump exported again imports as the same episodes.
"""

from __future__ import annotations

import hashlib
import pickle
import re
import time
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError, RollscopeError
from ..loop.rewards import discounted_returns
from ..records.episode import Episode, Message, Status, TokenArrays
from ..records.marks import unknown_logprobs
from ..records.provenance import Source
from ..records.reading import json_type
from ..tokens import chat
from . import torchstream
from .base import (
    ImportContext,
    UnsafeFileError,
    int_array,
    int_field,
    jsonable,
    logprob_array,
    mask_array,
    reward_value,
    safe_torch_load,
    stable_id,
)
from .limits import over_limit
from .masks import mask_structure, runs
from .sniff import not_torch_save

STATUS_IN = {
    "completed": Status.COMPLETED, "truncated": Status.TRUNCATED, "aborted": Status.ABORTED,
    "failed": Status.FAILED, "pending": Status.INTERRUPTED,
}
STATUS_OUT = {
    Status.COMPLETED: "completed", Status.TRUNCATED: "truncated", Status.ABORTED: "aborted",
    Status.FAILED: "failed", Status.RUNNING: "pending", Status.INTERRUPTED: "pending",
}
# Train-side keys that repeat the rollout dump or are batch bookkeeping.
TRAIN_SKIP = frozenset(
    {"tokens", "loss_masks", "response_lengths", "sample_indices", "rollout_log_probs", "total_lengths",
     "partition", "multimodal_train_inputs", "pixel_values", "metadata", "round_number"}
)
TASK_KEYS = ("task_id", "query_id", "qid", "id", "instance_id")
_EOT_TEXTS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>")
MASK_NOTE = ("samples whose loss mask length differs from response_length were imported with the mask laid "
             "from the response start; `rollscope check` reports them as mask_misaligned")
RESPONSE_NOTE = ("samples whose loss_mask and rollout_log_probs agree on a longer response than response_length says "
                 "(or whose response_length counts the prompt) were imported with the arrays' length as the response; "
                 "`rollscope check` reports them as response_length_mismatch")
LOGPROBS_NOTE = ("samples whose rollout_log_probs length is neither response_length nor the number of trainable "
                 "tokens were imported with the logprobs laid from the response start; `rollscope check` reports "
                 "them as logprobs_misaligned")


def _sort_key(p: Path) -> tuple[bool, int, str]:
    digits = re.sub(r"\D", "", p.stem)
    return (p.stem.startswith("eval"), int(digits) if digits else -1, p.name)


def rollout_files(path: Path) -> list[Path]:
    """A dump file, a ``--dump-details`` folder, or a folder of rollout ``.pt`` files."""
    if path.is_file():
        return [path]
    for base in (path / "rollout_data", path):  # a --dump-details folder's rollout dumps, else the folder's own
        files = sorted((p for p in base.glob("*.pt") if p.is_file()), key=_sort_key) if base.is_dir() else []
        if files:
            return files
    raise FormatError("no slime rollout dumps in this folder: no *.pt file in it, nor in a rollout_data/ folder of it",
                      str(path))


def _dump_root(f: Path) -> Path | None:
    return f.parent.parent if f.parent.name == "rollout_data" else None


def _use_saved_tokenizer(files: list[Path], ctx: ImportContext) -> None:
    if ctx.tokenizer is not None:
        return
    for root in {r for r in (_dump_root(f) for f in files) if r is not None} | {files[0].parent}:
        folder = root / "tokenizer"
        if folder.is_dir():
            from ..backends.tokenizers import load_tokenizer

            try:
                ctx.tokenizer = load_tokenizer(str(folder))
            except RollscopeError as e:
                ctx.note(f"the tokenizer saved beside the dump could not be loaded ({e}); tokens are shown as ids")
                return
            ctx.tokenizer_name = str(folder.resolve())
            ctx.note(f"using the tokenizer saved beside the dump: {folder}")
            return


def _train_index(f: Path, rollout_id: Any, ctx: ImportContext) -> dict[int, dict[str, Any]]:
    """Train-side values per sample index, from ``DIR/train_data/{rollout_id}_{rank}.pt``."""
    root = _dump_root(f)
    if root is None or not (root / "train_data").is_dir() or rollout_id is None or f.stem.startswith("eval"):
        return {}  # eval rollouts share ids with train rollouts but are never trained on
    out: dict[int, dict[str, Any]] = {}
    for tf in sorted((root / "train_data").glob(f"{rollout_id}_*.pt")):
        try:
            pack = safe_torch_load(tf, ctx.max_record)
        except UnsafeFileError:
            raise
        except FormatError as e:
            ctx.skip(e)
            continue
        ctx.opened(tf)
        data = pack.get("rollout_data") if isinstance(pack, dict) else None
        if isinstance(data, dict) and isinstance(data.get("sample_indices"), (list, tuple)):
            idx = list(data["sample_indices"])
            cols = {k: v for k, v in data.items() if k not in TRAIN_SKIP and isinstance(v, (list, tuple)) and len(v) == len(idx)}
            rows = [(i, {k: v[j] for k, v in cols.items()}) for j, i in enumerate(idx)]
        elif isinstance(data, list):
            rows = [(d.get("sample_index"), {k: v for k, v in d.items() if k not in TRAIN_SKIP and k != "sample_index"})
                    for d in data if isinstance(d, dict)]
        else:
            ctx.skip(FormatError("not a slime train dump: expected 'rollout_data' with 'sample_indices'", str(tf)))
            continue
        for i, row in rows:
            if isinstance(i, (int, np.integer)) or hasattr(i, "item"):
                out.setdefault(int(i), {}).update(jsonable(row))
    return out


def read(path: Path, ctx: ImportContext) -> Iterator[Episode]:
    """Stream episodes from slime rollout dumps, one sample at a time.

    A dump of the shape slime writes is read sample by sample (``torchstream``): memory holds one
    sample, not the file's. Any other (tensors inside, another pickle protocol) is loaded whole, safely.
    """
    files = rollout_files(path)
    _use_saved_tokenizer(files, ctx)
    for f in files:
        yield from _noting_repeats(f, _read_file(f, ctx), ctx)


def _noting_repeats(f: Path, episodes: Iterator[Episode], ctx: ImportContext) -> Iterator[Episode]:
    """``episodes`` of ``f``, a note when two samples of it share an ``index`` (each is its own episode: their ids
    hold their tokens): slime's train dumps join on it, so a train-side value of that index is either's."""
    first: dict[int, Any] = {}
    said = False  # once a file: the first pair named
    for ep in episodes:
        i = ep.source.index
        if i is not None and i in first and not said:
            said = True
            ctx.note(f"{f}: samples share an index (first: index {i}, at samples {first[i]} and "
                     f"{ep.source.details.get('position')}); slime's train dumps join on index, so their train-side "
                     "values cannot be told apart")
        elif i is not None and i not in first:
            first[i] = ep.source.details.get("position")
        yield ep


def _read_file(f: Path, ctx: ImportContext) -> Iterator[Episode]:
    """The episodes of one rollout dump ``f``."""
    try:
        with f.open("rb") as head:
            not_torch_save(head.read(4096), f)
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror}", str(f)) from None
    try:
        stream = torchstream.open_dump(f, ctx.max_record)
    except torchstream.NotStreamable:
        yield from _read_whole(f, ctx, 0)
        return
    ctx.opened(f)
    rollout_id = stream.header.get("rollout_id")
    train = _train_index(f, rollout_id, ctx)
    position = 0
    try:
        for s in stream.samples():
            ctx.expect(1)
            if isinstance(s, torchstream.Skipped):
                ctx.skip(over_limit(s.size, ctx.max_record, "the sample", f"{f}: sample {position}"))
            else:
                yield from _convert(s, f, rollout_id, position, ctx, train)
            position += 1
    except torchstream.NotStreamable as e:
        if stream.skipped:  # read whole, the file would bring back what was skipped for its size
            raise FormatError(f"cannot read past sample {position}: it refers to what a sample skipped for its "
                              f"size defined ({e}); --max-record-mb above that sample's size reads it",
                              str(f)) from None
        yield from _read_whole(f, ctx, position, train)
    except (pickle.UnpicklingError, zipfile.BadZipFile, OSError, EOFError, ValueError, IndexError, KeyError,
            TypeError) as e:
        raise FormatError(f"cannot read past sample {position} (truncated or corrupt?): {type(e).__name__}: "
                          f"{str(e)[:200]}", str(f)) from None


def _convert(s: Any, f: Path, rollout_id: Any, position: int, ctx: ImportContext,
             train: dict[int, dict[str, Any]]) -> Iterator[Episode]:
    try:
        yield sample_to_episode(s, f, rollout_id, position, ctx, train)
    except FormatError as e:
        ctx.skip(e)


def _read_whole(f: Path, ctx: ImportContext, start: int,
                train: dict[int, dict[str, Any]] | None = None) -> Iterator[Episode]:
    """The samples of ``f`` from ``start`` on, the file loaded whole (``train``: its train-side values, when
    already read)."""
    pack = safe_torch_load(f, ctx.max_record)
    if start == 0:
        ctx.opened(f)
    if not isinstance(pack, dict) or not isinstance(pack.get("samples"), list):
        raise FormatError("not a slime rollout dump: expected a dict with a 'samples' list", str(f))
    samples: list[Any] = pack["samples"]
    rollout_id = pack.get("rollout_id")
    if train is None:
        train = _train_index(f, rollout_id, ctx)
    ctx.expect(len(samples) - start)
    for i in range(start, len(samples)):
        s, samples[i] = samples[i], None  # drop each converted sample: memory stays one sample above the load
        yield from _convert(s, f, rollout_id, i, ctx, train)
    del pack, samples


def _strip_eot(text: str) -> str:
    for t in _EOT_TEXTS:
        if text.endswith(t):
            return text[: -len(t)]
    return text


def _messages(prompt: Any, where: str) -> tuple[Message, ...] | None:
    if not isinstance(prompt, list):
        return None
    try:
        return tuple(Message.from_dict(m) for m in prompt)
    except (KeyError, TypeError, AttributeError):
        raise FormatError("a message list whose items need 'role' and 'content'", where, "prompt") from None


def _versions(raw: Any, mask: np.ndarray, prompt_len: int) -> np.ndarray:
    out = np.full(len(mask), -1, dtype=np.int32)
    try:
        vals = [int(v) for v in raw or ()]
    except (TypeError, ValueError):
        return out  # non-numeric versions stay in source only
    spans = [(a, b) for a, b, v in runs(mask, prompt_len) if v]
    if vals and len(vals) == len(spans):
        for (a, b), v in zip(spans, vals):
            out[a:b] = v
    elif len(vals) == 1:
        for a, b in spans:
            out[a:b] = vals[0]
    return out


def _rle(value: Any) -> np.ndarray | None:
    try:
        return np.repeat(np.asarray([int(v) for v, _ in value], dtype=np.int32), [int(c) for _, c in value])
    except (TypeError, ValueError):
        return None  # not our exporter's metadata after all: ignore it


def _spans(value: Any) -> list[tuple[int, int]]:
    try:
        return [(int(a), int(b)) for a, b in value or ()]
    except (TypeError, ValueError):
        return []


def sample_to_episode(
    s: Any, f: Path, rollout_id: Any, position: int, ctx: ImportContext, train: dict[int, dict[str, Any]] | None = None
) -> Episode:
    """One slime sample dict as an Episode, or a FormatError naming the field at fault."""
    where = f"{f}: sample {position}"
    if not isinstance(s, dict):
        raise FormatError(f"expected a dict, got {json_type(s)}", where)
    for key in ("tokens", "response_length"):
        if key not in s:
            raise FormatError("missing", where, key)
    ids = int_array(s["tokens"], where, "tokens")
    n = len(ids)
    rl = field_rl = int_field(s["response_length"], where, "response_length")
    assert rl is not None
    if not 0 <= rl <= n:
        raise FormatError(f"is {rl} but the sample has {n} tokens", where, "response_length")
    raw_mask, agreed = s.get("loss_mask"), False
    resp_mask = np.ones(rl, dtype=np.uint8) if raw_mask is None else mask_array(raw_mask, where, "loss_mask")
    arr, bad = logprob_array(s["rollout_log_probs"], where, "rollout_log_probs") \
        if s.get("rollout_log_probs") is not None else (None, [])
    if raw_mask is not None and arr is not None and len(resp_mask) == len(arr) != rl and len(arr) <= n \
            and (len(arr) > rl or rl == n):
        # Two arrays agree on a longer response than the field says (it counted trained tokens), or the field
        # counts the prompt too: the field is the one wrong (slime asserts the three equal), ``check`` says so, and
        # the ids split where the arrays put them. Arrays shorter than a field that leaves a prompt may have lost
        # the same entry (the end-of-turn token's): laid from the field's response start, as either alone is.
        rl, agreed = len(arr), True
        ctx.note(RESPONSE_NOTE)
    prompt_len = n - rl
    mask = np.zeros(n, dtype=np.uint8)
    m = min(len(resp_mask), rl)
    mask[prompt_len : prompt_len + m] = resp_mask[:m]
    if len(resp_mask) != rl:
        ctx.note(MASK_NOTE)

    meta_raw = s.get("metadata") or {}
    if not isinstance(meta_raw, dict):
        raise FormatError(f"must be a dict, got {json_type(meta_raw)}", where, "metadata")
    metadata = dict(meta_raw)
    ours = metadata.pop("rollscope", None)
    ours = ours if isinstance(ours, dict) else {}
    tok, tok_name = ctx.named_tokenizer(ours.get("tokenizer"))

    lp = np.full(n, np.nan, dtype=np.float32)
    nonfinite: list[tuple[str, int, float]] = []
    logprobs_length: int | None = None
    if arr is not None:
        trained = prompt_len + np.flatnonzero(mask[prompt_len:])
        if len(arr) == rl:
            lp[prompt_len:] = arr
            nonfinite = [("logprobs", prompt_len + i, x) for i, x in bad]
        elif len(arr) == len(trained):
            lp[trained] = arr
            nonfinite = [("logprobs", int(trained[i]), x) for i, x in bad]
        else:  # shown, not dropped: laid from the response start, and ``check`` says where they run out
            m = min(len(arr), rl)
            lp[prompt_len:prompt_len + m] = arr[:m]
            nonfinite = [("logprobs", prompt_len + i, x) for i, x in bad if i < m]
            logprobs_length = len(arr)
            ctx.note(LOGPROBS_NOTE)
        for a, b in _spans(ours.get("nan_logprobs")):
            lp[a:b] = np.nan  # unknown logprobs our exporter wrote as 0.0

    named_key = ours.get("reward_key")  # the score an earlier import took, kept by Rollscope's export
    reward_key = ctx.reward_key or (named_key if isinstance(named_key, str) else "")
    reward = ctx.reward(s.get("reward"), where, key=reward_key)
    status = s.get("status", "completed")
    status = getattr(status, "value", status)
    if status not in STATUS_IN:
        raise FormatError(f"unknown status {status!r}; one of {', '.join(STATUS_IN)}", where, "status")
    group_index = int_field(s.get("group_index"), where, "group_index", optional=True)
    index = int_field(s.get("index"), where, "index", optional=True)
    versions = _versions(s.get("weight_versions"), mask, prompt_len)
    exact = _rle(ours.get("versions_rle"))
    if exact is not None and len(exact) == rl:
        versions[prompt_len:] = exact  # our export's exact per-token versions

    prompt = s.get("prompt", "")
    response = s.get("response") if isinstance(s.get("response"), str) else ""
    prompt_msgs = _messages(prompt, where)
    n_runs = sum(1 for _, _, v in runs(mask, prompt_len) if v)
    texts = [response] if tok is None and n_runs == 1 and response else None
    segments, turns = mask_structure(
        ids, mask, lp, versions, prompt_len, tokenizer=tok, texts=texts,
        prompt_text=prompt if isinstance(prompt, str) else None, status=status, reward=reward,
        finish=ours.get("finish") if isinstance(ours.get("finish"), list) else None,
    )
    messages: tuple[Message, ...] = ()
    if prompt_msgs is not None:
        # A text prompt is usually already templated: as a message it would render twice and every
        # rendering check would fail, so it stays the first turn's prompt_text instead.
        messages = prompt_msgs
        if n_runs == 1 and turns[0].generation is not None:
            # the ids are the truth; the response text only when there is no tokenizer to decode them
            text = turns[0].generation.text
            content = chat.strip_end_of_turn(tok, text) if tok is not None else _strip_eot(text)
            messages = (*messages, Message("assistant", content))

    label = jsonable(s.get("label"))
    task = ours.get("task_id") or next((metadata[k] for k in TASK_KEYS if metadata.get(k) is not None), None)
    if task is None:
        task = group_index if group_index is not None else (label if isinstance(label, str) and label else index)
    details: dict[str, Any] = {
        "rollout_id": jsonable(rollout_id),
        "rollout_step": int(rollout_id) if isinstance(rollout_id, (int, np.integer)) and not isinstance(rollout_id, bool)
        else None,
        "position": position, "group_index": group_index, "label": label,
        "status": status, "response_length": field_rl,
        "loss_mask_length": len(resp_mask), "metadata": jsonable(metadata),
    }
    if isinstance(s.get("reward"), dict):
        details["reward"] = jsonable(s["reward"])
        if reward_key:
            details["reward_key"] = reward_key
    if logprobs_length is not None:
        details["logprobs_length"] = logprobs_length
    if agreed:
        details["response_from"] = "loss_mask, rollout_log_probs"
    if s.get("weight_versions"):
        details["weight_versions"] = jsonable(s["weight_versions"])
    if ours.get("episode_id"):
        details["original_id"] = ours["episode_id"]
    if train and index is not None and index in train:
        details["train"] = train[index]
    source = Source.imported("slime", str(f), index=index, **details)
    turn_rewards = tuple(t.reward for t in turns)
    # Rollscope's own export names the episode it was: read back, it is that episode (a re-import of it is the
    # stored one again, compared), but where an earlier import stored it under the dump's id.
    dumped = stable_id("slime", jsonable(rollout_id), index if index is not None else f"#{position}", tokens=ids)
    # ...where the sample is the one exported: slime copies a dataset row's metadata into every sample of its prompt
    # (a prompt set made of an export), which names one episode for them all.
    own = ours.get("episode_id") if ours.get("tokens_digest") == tokens_digest(ids) else None
    run = ours.get("run_id")
    return unknown_logprobs(Episode(
        id=own if isinstance(own, str) and own and not (ctx.known is not None and ctx.known(dumped)) else dumped,
        run_id=run if isinstance(run, str) and run else None,
        env=str(ours.get("env") or metadata.get("env") or "slime"),
        task_id=str(task if task is not None else position),
        group_id=None if group_index is None else f"slime:{rollout_id}:{group_index}",
        sample_index=index if index is not None else position,
        tokenizer=tok_name,
        template_hash=chat.template_hash(tok) if tok is not None else "",
        status=STATUS_IN[status],
        reason=f"slime status {status}",
        reward=reward,
        turn_rewards=turn_rewards,
        returns=tuple(discounted_returns(turn_rewards, 1.0)),
        messages=messages,
        turns=turns,
        tokens=TokenArrays(ids, mask, lp, versions),
        prompt_len=prompt_len,
        segments=segments,
        source=source,
        created_at=time.time(),
    ), nonfinite, where=f"{where}, rollout_log_probs")


# -- export -----------------------------------------------------------------------


def _finish_reasons(ep: Episode, spans: list[tuple[int, int]]) -> list[str]:
    """How each generated run of the response ended, as its turn did: slime keeps one status a sample, so without
    them a reply cut by the length limit that the loop went on after reads as ended by the model."""
    reasons: list[str] = []
    for a, _ in spans:
        turn = next((t for t in ep.turns for sg in t.segments if sg.kind == "assistant" and sg.start <= a < sg.end), None)
        reasons.append(turn.generation.finish_reason if turn is not None and turn.generation is not None else "stop")
    return reasons


def episode_to_sample(ep: Episode, index: int, group_index: int) -> dict[str, Any]:
    """A slime ``Sample.to_dict()`` for one episode (plain Python types only)."""
    ids, mask, lps = ep.tokens.ids, ep.tokens.loss_mask, ep.tokens.logprobs
    n = len(ids)
    start = ep.prompt_len
    trained = np.flatnonzero(mask)
    if trained.size and trained[0] < start:
        start = int(trained[0])  # a trainable token inside the "prompt" must stay in slime's response
    resp_lp = lps[start:]
    nan = np.isnan(resp_lp)
    rollout_lp = None if nan.all() else np.where(nan, 0.0, resp_lp).tolist()
    nan_spans = [[start + a, start + b] for a, b, v in runs(nan.astype(np.uint8), 0) if v] if rollout_lp else []
    spans = [(a, b) for a, b, v in runs(mask, start) if v]
    vers = [int(ep.tokens.versions[a]) for a, _ in spans]
    first_asst = next((k for k, m in enumerate(ep.messages) if m.role == "assistant"), len(ep.messages))
    if ep.messages:
        prompt: Any = [m.to_dict() for m in ep.messages[:first_asst]]
    else:
        prompt = (ep.turns[0].prompt_text or "") if ep.turns else ""
    parts: list[str] = []
    for t in ep.turns:
        if t.generation is not None:
            parts.append(t.generation.text)
        if t.index < ep.n_turns - 1:  # the last turn's observation is not in the token array
            parts.extend(m.content for m in t.observation)
    src = ep.source.details if ep.source.kind == "slime" else {}
    metadata = dict(src.get("metadata") or {})
    resp_ver = ep.tokens.versions[start:]
    cuts = [0, *(np.flatnonzero(np.diff(resp_ver)) + 1).tolist(), len(resp_ver)]
    versions_rle = [[int(resp_ver[a]), b - a] for a, b in zip(cuts, cuts[1:]) if b > a]
    metadata["rollscope"] = {"episode_id": ep.id, "tokens_digest": tokens_digest(ids), "run_id": ep.run_id,
                             "env": ep.env, "task_id": ep.task_id, "tokenizer": ep.tokenizer,
                             **({"reward_key": src["reward_key"]} if src.get("reward_key") else {}),
                             "nan_logprobs": nan_spans,
                             "versions_rle": versions_rle, "finish": _finish_reasons(ep, spans)}
    return {
        "group_index": group_index,
        "index": index,
        "prompt": prompt,
        "tokens": ids.tolist(),
        "response": "\n".join(p for p in parts if p),
        "response_length": n - start,
        "label": src.get("label"),
        "reward": _reward(ep, src),
        "loss_mask": mask[start:].tolist(),
        "weight_versions": [str(v) for v in vers] if vers and min(vers) >= 0 else [],
        "rollout_log_probs": rollout_lp,
        "status": STATUS_OUT[ep.status],
        "metadata": jsonable(metadata),
    }


def tokens_digest(ids: Any) -> str:
    """A short hash of a sample's token ids: what ties the episode id Rollscope's export names to its sample."""
    return hashlib.sha256(np.asarray(ids, dtype="<i8").tobytes()).hexdigest()[:16]


def _reward(ep: Episode, src: dict[str, Any]) -> Any:
    """The reward as the slime sample had it: its dict of scores (a reward model's) while the episode's reward is
    still what it reads to, else the number."""
    kept = src.get("reward")
    if isinstance(kept, dict):
        try:
            if reward_value(kept, "", key=str(src.get("reward_key") or "")) == ep.reward:
                return kept
        except FormatError:
            pass
    return float(ep.reward)


def write(episodes: Iterable[Episode], out: Path, rollout_id: int = 0) -> int:
    """Write one slime rollout dump (``{"rollout_id", "samples"}``) with every episode.

    Episodes imported from one slime rollout keep its ``rollout_id`` and their ``index`` and ``group_index`` (what
    slime's train dumps join on), where those are distinct; others are numbered in order, grouped by group or task.
    ``torch.save`` pickles one object, so the samples are built in memory first.
    """
    import torch

    eps = list(episodes)
    own = [ep.source.details if ep.source.kind == "slime" else {} for ep in eps]
    rollouts = {jsonable(d.get("rollout_id")) for d in own}
    if len(rollouts) == 1 and isinstance(next(iter(rollouts)), int):
        rollout_id = next(iter(rollouts))
    indexes = [ep.source.index if ep.source.kind == "slime" else None for ep in eps]
    keep = None not in indexes and len(set(indexes)) == len(indexes)
    groups: dict[str, int] = {}
    samples = []
    for k, (ep, d) in enumerate(zip(eps, own)):
        g = groups.setdefault(ep.group_id or f"{ep.env}/{ep.task_id}", len(groups))
        original = d.get("group_index")
        group = original if keep and isinstance(original, int) else g
        samples.append(episode_to_sample(ep, int(indexes[k]) if keep else k, group))  # type: ignore[arg-type]
    torch.save({"rollout_id": rollout_id, "samples": samples}, out)
    return len(samples)
