"""AReaL: its trajectory dump JSONL (import) and per-turn packed sequences (export).

What AReaL dumps (inclusionAI/AReaL, ``WorkflowExecutor._dump_trajectory``
with ``dump_to_file``): ``{log dir}/rollout/{version}/{task_id}.jsonl``,
one line per sample: ``task_id, sample_idx, seqlen, prompt_len`` (the first
loss-mask-1 position), ``head_version, tail_version`` (min and max policy
version of the generated tokens), ``version_rle`` (``[[version, count],
...]`` over them), ``reward``, ``prompt`` and ``completion`` (ids decoded
with special tokens kept), and for multi-turn samples ``segments``
(``{"role": "prompt" | "gen" | "context", "len", "text"}``).

The dump has text, not ids, and no logprobs. With a tokenizer each segment
(or the prompt and the completion) is encoded; ``gen`` text gets mask 1 and
the versions from ``version_rle``; where the encoded lengths differ from
the dump's ``len``/``prompt_len``/``seqlen`` the counts are kept in
``source["token_counts"]``, and the turn where they part holds an ``ids_reencoded`` warning naming the counts:
these ids are a re-encoding, not the ids AReaL trained. Without a tokenizer the
episode holds the text: one turn per ``gen`` segment.

Export writes an episode of AReaL's ``MultiTurnWorkflow`` (token mode ``areal``) as the one sequence its
``_run_one_episode`` returns: every id, each reply trained, the episode's reward. Any other episode is
written, per turn, as the sequence AReaL's multi-turn agent trains on
(``CompletionWithTokenLogpReward.to_tensor_dict``): everything up to the end
of that turn's generation as ``input_ids``, ``loss_mask`` 0 before the
turn's generated tokens, ``logprobs`` 0.0 before them (``null`` where a
generated token's logprob is unknown), ``versions`` -1 before them, and
``rewards`` the turn's discounted return (AReaL's ``apply_reward_discount``:
``r[i] += r[i+1] * turn_discount``, which is ``Episode.returns``). One JSON
row per (episode, turn), with the episode's ``tokenizer`` beside AReaL's fields. Such rows import back exactly,
each row an episode of its own (the import says so), read with that tokenizer when none is given.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import FormatError
from ..loop.rewards import discounted_returns
from ..records.episode import Episode, Finding, Generation, Severity, Status, TokenArrays, Turn
from ..records.marks import unknown_logprobs
from ..records.provenance import Source
from ..records.reading import json_type
from ..tokens import chat
from .base import (
    ImportContext,
    int_array,
    int_field,
    jsonable,
    logprob_array,
    mask_array,
    read_jsonl_records,
    stable_id,
)
from .masks import mask_structure

REQUIRED = ("task_id", "sample_idx", "reward", "prompt", "completion")
NO_TOKENIZER_NOTE = "no tokenizer given (--tokenizer PATH_OR_ID): AReaL dumps hold text, so episodes have no token ids"
ROWS_NOTE = ("the rows are per-turn training sequences (what export --format areal writes, one row per turn that "
             "generated): each is imported as an episode of its own, with that turn's sequence and return")
DRIFT_NOTE = ("some AReaL samples re-encode to other token counts than the dump records: their ids are this tokenizer's "
              "encoding of the dumped text, not the ids AReaL trained, and each says where (ids_reencoded)")


def _counts_differ(dumped: dict[str, Any], encoded: dict[str, Any]) -> Finding:
    """What the dump's token counts say against the dumped text re-encoded, at the first piece that differs."""
    said = [f"{k} {dumped[k]} (its text re-encodes to {encoded[k]})" for k in ("seqlen", "prompt_len")
            if dumped[k] is not None and dumped[k] != encoded[k]]
    lens = encoded["segment_lens"]
    k = next((i for i, (a, b) in enumerate(zip(dumped["segment_lens"], lens)) if a is not None and a != b), None)
    if k is not None:
        said.append(f"segment {k} of {dumped['segment_lens'][k]} tokens (re-encoded: {lens[k]})")
    at = sum(lens[:k]) if k is not None else 0
    return Finding("ids_reencoded", Severity.WARNING,
                   f"AReaL's dump records {'; '.join(said)}: these ids are this tokenizer's encoding of the dumped "
                   "text, not the ids AReaL trained, and the checks judge them", token_start=at,
                   token_end=at + (lens[k] if k is not None else encoded["seqlen"]),
                   evidence={"dump": dumped, "encoded": encoded})


def _expand_rle(rle: Any) -> list[int] | None:
    if not isinstance(rle, list):
        return None
    out: list[int] = []
    for pair in rle:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, int) for x in pair)):
            return None
        out.extend([pair[0]] * pair[1])
    return out


def _packed_episode(d: dict[str, Any], where: str, path: Path, line: int, ctx: ImportContext) -> Episode:
    """A row this module's exporter wrote: the ids are all there, and the tokenizer they were made with."""
    tok, tok_name = ctx.named_tokenizer(d.get("tokenizer"))
    ids = int_array(d["input_ids"], where, "input_ids")
    mask = mask_array(d["loss_mask"], where, "loss_mask")
    n = len(ids)
    lps, bad = logprob_array(d["logprobs"], where, "logprobs") if d.get("logprobs") is not None \
        else (np.full(n, np.nan, np.float32), [])
    raw_v = d.get("versions")
    vers = np.full(n, -1, np.int32) if raw_v is None else int_array(raw_v, where, "versions", lo=-1)
    for name, arr in (("loss_mask", mask), ("logprobs", lps), ("versions", vers)):
        if len(arr) != n:
            raise FormatError(f"has {len(arr)} entries for {n} tokens", where, name)
    trained = np.flatnonzero(mask)
    prompt_len = int(trained[0]) if trained.size else n
    lps[mask == 0] = np.nan  # AReaL writes 0.0 where nothing is trained (the prompt, a whole row's answers): unknown
    reward = ctx.reward(d.get("rewards"), where, "rewards")
    status = d.get("status", Status.COMPLETED.value)
    if not isinstance(status, str) or status not in {s.value for s in Status} or status == Status.RUNNING.value:
        raise FormatError(f"must be one of completed, truncated, aborted, failed, interrupted, got {status!r:.40}",
                          where, "status")
    # how the row's reply ended (a whole conversation's row: each reply), where Rollscope's export wrote it
    finish = d.get("finish_reasons") if isinstance(d.get("finish_reasons"), list) else (
        [d["finish_reason"]] if isinstance(d.get("finish_reason"), str) else None)
    segments, turns = mask_structure(ids, mask, lps, vers, prompt_len, tokenizer=tok, reward=reward, status=status,
                                     finish=finish, cut_without_eot=True)
    task = d.get("task_id", "")
    return unknown_logprobs(Episode(
        id=stable_id("areal-packed", d.get("episode_id"), d.get("turn"), tokens=ids),
        env=str(d.get("env") or "areal"), task_id=str(task), sample_index=int(d.get("sample_idx") or 0),
        tokenizer=tok_name, status=Status(status), reason="imported from areal", reward=reward,
        turn_rewards=tuple(t.reward for t in turns), returns=tuple(t.reward for t in turns), turns=turns,
        tokens=TokenArrays(ids, mask, lps, vers), prompt_len=prompt_len, segments=segments,
        source=Source.imported("areal", str(path), line=line, episode_id=jsonable(d.get("episode_id")),
                               turn=jsonable(d.get("turn")),
                               **({"one_sequence": True} if isinstance(d.get("finish_reasons"), list) else {})),
        created_at=time.time(),
    ), [("logprobs", i, x) for i, x in bad if i >= prompt_len], where=f"{where}, logprobs")


def rollout_step(path: Path, d: dict[str, Any]) -> int | None:
    """The policy version a dump line was generated at: its folder (``rollout/{version}/``), else the line's
    ``head_version``."""
    if path.parent.name.isdigit():
        return int(path.parent.name)
    head = d.get("head_version")
    return head if isinstance(head, int) and not isinstance(head, bool) else None


def record_to_episode(d: dict[str, Any], where: str, path: Path, line: int, ctx: ImportContext) -> Episode:
    if "input_ids" in d and "loss_mask" in d:
        ctx.note(ROWS_NOTE)
        return _packed_episode(d, where, path, line, ctx)
    if ctx.tokenizer is None:
        ctx.note(NO_TOKENIZER_NOTE)
    for key in REQUIRED:
        if key not in d:
            raise FormatError("missing", where, key)
    for key in ("prompt", "completion"):
        if not isinstance(d[key], str):
            raise FormatError(f"must be text, got {json_type(d[key])}", where, key)
    reward = ctx.reward(d["reward"], where)
    sample_idx = int_field(d["sample_idx"], where, "sample_idx")
    assert sample_idx is not None  # not optional: int_field raised otherwise
    dump_counts = {k: int_field(d.get(k), where, k, optional=True) for k in ("seqlen", "prompt_len")}
    segs = d.get("segments")
    if segs is not None and not (isinstance(segs, list) and all(isinstance(s, dict) and isinstance(s.get("text"), str) for s in segs)):
        raise FormatError("must be a list of {role, len, text}", where, "segments")
    pieces = segs or [{"role": "prompt", "text": d["prompt"]}, {"role": "gen", "text": d["completion"]}]
    gen_texts = [s["text"] for s in pieces if s.get("role") == "gen"]
    details: dict[str, Any] = {
        "task_id": jsonable(d["task_id"]), **dump_counts, "head_version": jsonable(d.get("head_version")),
        "tail_version": jsonable(d.get("tail_version")),
    }
    if "original_reward" in d:
        details["original_reward"] = jsonable(d["original_reward"])
    step = rollout_step(path, d)
    if step is not None:
        details["rollout_step"] = step
    tok = ctx.tokenizer
    drift: Finding | None = None
    if tok is not None:
        enc = [chat.encode(tok, s["text"]) for s in pieces]
        ids = np.asarray([i for e in enc for i in e], dtype=np.int32)
        mask = np.concatenate([np.full(len(e), 1 if s.get("role") == "gen" else 0, dtype=np.uint8)
                               for e, s in zip(enc, pieces)] or [np.zeros(0, np.uint8)])
        trained = np.flatnonzero(mask)
        prompt_len = int(trained[0]) if trained.size else len(ids)
        counts = {"seqlen": len(ids), "prompt_len": prompt_len, "segment_lens": [len(e) for e in enc]}
        dumped = {"seqlen": dump_counts["seqlen"], "prompt_len": dump_counts["prompt_len"],
                  "segment_lens": [s.get("len") for s in pieces] if segs else [None] * len(pieces)}
        if any(dumped[k] is not None and dumped[k] != counts[k] for k in ("seqlen", "prompt_len")) or (
            segs and dumped["segment_lens"] != counts["segment_lens"]
        ):
            details["token_counts"] = {"dump": dumped, "encoded": counts}
            ctx.note(DRIFT_NOTE)
            drift = _counts_differ(dumped, counts)
        versions = np.full(len(ids), -1, dtype=np.int32)
        expanded = _expand_rle(d.get("version_rle"))
        if expanded is not None and len(expanded) == trained.size:
            versions[trained] = expanded
        elif isinstance(d.get("head_version"), int) and d.get("head_version") == d.get("tail_version"):
            versions[trained] = d["head_version"]
        lps = np.full(len(ids), np.nan, dtype=np.float32)
        segments, turns = mask_structure(ids, mask, lps, versions, prompt_len, tokenizer=tok, texts=gen_texts,
                                         prompt_text=d["prompt"], reward=reward, cut_without_eot=True)
        tokens = TokenArrays(ids, mask, lps, versions)
        if drift is not None and turns:  # on the turn it falls in (the prompt's: the first)
            k = max([t.index for t in turns if t.prompt_len <= (drift.token_start or 0)] or [0])
            turns = tuple(replace(t, findings=(*t.findings, replace(drift, turn=k))) if t.index == k else t
                          for t in turns)
    else:
        tokens, prompt_len, segments = TokenArrays(), 0, ()
        last = len(gen_texts) - 1
        turns = tuple(
            Turn(index=t, prompt_text=d["prompt"] if t == 0 else None, prompt_len=0,
                 generation=Generation(text=text, model="imported"), reward=reward if t == last else 0.0, done=t == last)
            for t, text in enumerate(gen_texts)
        )
    turn_rewards = tuple(t.reward for t in turns)
    return Episode(
        id=stable_id("areal", jsonable(d["task_id"]), sample_idx, d.get("head_version"), d.get("tail_version"),
                     d["prompt"], d["completion"]),
        env="areal", task_id=str(d["task_id"]), sample_index=sample_idx, tokenizer=ctx.tokenizer_name,
        template_hash=chat.template_hash(tok) if tok is not None else "", status=Status.COMPLETED,
        reason="imported from areal", reward=reward, turn_rewards=turn_rewards,
        returns=tuple(discounted_returns(turn_rewards, 1.0)), turns=turns, tokens=tokens, prompt_len=prompt_len,
        segments=segments, source=Source.imported("areal", str(path), line=line, index=sample_idx, **details),
        created_at=time.time(),
    )


def read(path: Path, ctx: ImportContext) -> Iterator[Episode]:
    """Stream episodes from AReaL trajectory dumps (a file or a ``rollout/`` folder)."""
    yield from read_jsonl_records(path, ctx, record_to_episode)


# -- export -----------------------------------------------------------------------


def one_sequence(ep: Episode) -> bool:
    """Whether ``ep`` was played by AReaL's ``MultiTurnWorkflow`` (token mode ``areal``), whose
    ``_run_one_episode`` returns the whole conversation as one training sequence with one reward."""
    if ep.config.loop is not None:
        return ep.config.loop.token_mode == "areal"
    return ep.source.kind == "areal" and bool(ep.source.details.get("one_sequence"))  # such a row, read back


def _whole_row(ep: Episode) -> dict[str, Any]:
    """The sequence ``MultiTurnWorkflow._run_one_episode`` returns: every id, every reply trained, 0.0 logprobs and
    -1 versions on what the loop added (``null`` where a generated token's logprob is unknown), the episode's
    reward."""
    ids, mask, lps, vers = ep.tokens.ids, ep.tokens.loss_mask, ep.tokens.logprobs, ep.tokens.versions
    gen = vers[(mask == 1) & (vers >= 0)]
    trained = np.flatnonzero(mask)
    last = ep.turns[-1].generation if ep.turns else None
    return {
        "episode_id": ep.id, "turn": None, "env": ep.env, "task_id": ep.task_id, "sample_idx": ep.sample_index,
        "tokenizer": ep.tokenizer, "input_ids": ids.tolist(), "loss_mask": mask.tolist(),
        "logprobs": [0.0 if m == 0 else (None if math.isnan(x) else x) for x, m in zip(lps.tolist(), mask.tolist())],
        "versions": [int(v) if m == 1 else -1 for v, m in zip(vers.tolist(), mask.tolist())],
        "rewards": float(ep.reward), "seqlen": len(ids), "prompt_len": int(trained[0]) if trained.size else len(ids),
        "head_version": int(gen.min()) if gen.size else -1, "tail_version": int(gen.max()) if gen.size else -1,
        "status": ep.status.value, "finish_reason": last.finish_reason if last is not None else "stop",
        "finish_reasons": [t.generation.finish_reason for t in ep.turns if t.generation is not None],
    }


def packed_rows(ep: Episode) -> Iterator[dict[str, Any]]:
    """AReaL's training sequences of ``ep``: the whole conversation as one (``one_sequence``: MultiTurnWorkflow's),
    else one per turn that generated tokens (what AReaL's agent client trains on)."""
    if one_sequence(ep):
        yield _whole_row(ep)
        return
    ids, mask, lps, vers = ep.tokens.ids, ep.tokens.loss_mask, ep.tokens.logprobs, ep.tokens.versions
    returns = list(ep.returns) or discounted_returns(list(ep.turn_rewards) or [0.0] * (ep.n_turns - 1) + [ep.reward], 1.0)
    generated = [t for t, turn in enumerate(ep.turns)
                 if any(s.turn == t and s.kind == "assistant" for s in (turn.segments or ep.segments))]
    for t, turn in enumerate(ep.turns):
        if t not in generated:
            continue
        segs = [s for s in (turn.segments or ep.segments) if s.turn == t and s.kind == "assistant"]
        start, end = min(s.start for s in segs), max(s.end for s in segs)
        out_lp = lps[start:end].tolist()
        out_ver = vers[start:end]
        gen_ver = out_ver[out_ver >= 0]
        yield {
            "episode_id": ep.id, "turn": t, "env": ep.env, "task_id": ep.task_id, "sample_idx": ep.sample_index,
            "tokenizer": ep.tokenizer,
            "input_ids": ids[:end].tolist(),
            "loss_mask": [0] * start + mask[start:end].tolist(),
            "logprobs": [0.0] * start + [None if math.isnan(x) else x for x in out_lp],
            "versions": [-1] * start + out_ver.tolist(),
            "rewards": float(returns[t]) if t < len(returns) else 0.0,
            "seqlen": end, "prompt_len": start,
            "head_version": int(gen_ver.min()) if gen_ver.size else -1,
            "tail_version": int(gen_ver.max()) if gen_ver.size else -1,
            # how the episode ended, on the row of its last reply (a row is an episode when read back), and how
            # the reply did: a turn limit ends an episode `truncated` after a reply that ended on its own
            "status": ep.status.value if t == generated[-1] else Status.COMPLETED.value,
            "finish_reason": turn.generation.finish_reason if turn.generation is not None else "stop",
        }


def write_stream(episodes: Iterable[Episode], f: IO[str]) -> int:
    """Write packed per-turn rows; returns the number of episodes written."""
    n = 0
    for ep in episodes:
        for row in packed_rows(ep):
            f.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
            f.write("\n")
        n += 1
    return n


def realhf_sample(ep: Episode) -> dict[str, Any]:
    """What realhf's ``MathMultiTurnAgent.collect_trajectory`` returns for this episode: the fields of
    its ``SequenceSample``, one entry per turn (``packed_input_ids`` the whole sequence up to the end
    of the turn's generation, ``prompt_mask`` 1 before it, ``packed_logprobs`` seqlen - 1 values with
    0.0 over the prompt, ``seq_no_eos_mask`` True for a reply cut by the length limit,
    ``version_start``/``version_end`` the generation's weight version, ``rewards`` the discounted
    returns, ``birth_time`` in milliseconds)."""
    ids, lps = ep.tokens.ids.tolist(), ep.tokens.logprobs
    out: dict[str, Any] = {"id": ep.id, "packed_input_ids": [], "prompt_mask": [], "packed_logprobs": [],
                           "seq_no_eos_mask": [], "version_start": [], "version_end": [], "rewards": []}
    for turn in ep.turns:
        seg = next((s for s in turn.segments if s.kind == "assistant"), None)
        if seg is None or turn.generation is None:
            continue  # no sequence: no reward either (realhf checks one per sequence)
        out["rewards"].append(float(ep.returns[turn.index]) if turn.index < len(ep.returns) else 0.0)
        out["packed_input_ids"].append(ids[: seg.end])
        out["prompt_mask"].append([1] * seg.start + [0] * (seg.end - seg.start))
        gen = [0.0 if math.isnan(x) else float(x) for x in lps[seg.start : seg.end].tolist()]
        out["packed_logprobs"].append([0.0] * max(seg.start - 1, 0) + gen)
        out["seq_no_eos_mask"].append(turn.generation.finish_reason == "length")
        v = turn.generation.weight_version
        out["version_start"].append(-1 if v is None else int(v))
        out["version_end"].append(-1 if v is None else int(v))
    out["birth_time"] = int(ep.created_at * 1000)
    return out


def write_realhf(episodes: Iterable[Episode], f: IO[str]) -> int:
    """One JSON line per episode with realhf's ``SequenceSample`` fields (``realhf_sample``)."""
    n = 0
    for ep in episodes:
        f.write(json.dumps(realhf_sample(ep), ensure_ascii=False, allow_nan=False))
        f.write("\n")
        n += 1
    return n
