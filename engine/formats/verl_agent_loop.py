"""verl's ``AgentLoopOutput``: one JSON row an episode, out and back in.

The shape is verl's pydantic model ``AgentLoopOutput`` (``verl/experimental/agent_loop/agent_loop.py``), what
``ToolAgentLoop.run`` (``tool_agent_loop.py``) returns for one sample, written as ``model_dump()`` writes it:

* ``prompt_ids``: the prompt as rendered once, tools and generation prompt included;
* ``response_ids``: every id after it (generations, tool results, interaction answers), cut at
  ``response_length``;
* ``response_mask``: 1 for a generated id, 0 for an id the env or the template added; one per response id;
* ``response_logprobs``: one per response id, 0.0 at mask-0 positions, or null when the rollout had none (verl
  keeps them only with ``calculate_log_probs``);
* ``routed_experts``, ``multi_modal_data``: null (text-only rollouts, no MoE routing replay);
* ``reward_score``: the trajectory's reward (verl's loop leaves it null for the reward manager, which takes a set
  value as it is): here the episode's reward as its preset computed it;
* ``num_turns``: user turns + assistant turns + 1, as verl counts them (tool rounds are user turns);
* ``metrics``: ``AgentLoopMetrics``, seconds spent in ``generate_sequences`` and ``tool_calls`` and
  ``num_preempted`` (-1: not available);
* ``extra_fields``: ``turn_scores`` (the interaction's reward per answer) and ``tool_rewards`` (one per tool call),
  ``raw_prompt`` (the dataset messages, as ``AgentLoopWorker`` adds them), and ``rollscope``: the episode's own
  record without its token arrays, which makes the row lossless for Rollscope and is ignored by verl.

For a ``verl-tool`` episode the arrays are verl's to the token. Another preset's episode is written in the same
shape: mask-0 logprobs become 0.0, ``response_logprobs`` is null unless every generated id has one, and
``turn_scores`` are its turn rewards; where that loses a logprob, the record keeps the episode's own (``logprobs``),
and where a mask trains tokens of the prompt (which ``response_mask`` cannot hold: verl would not train them), the
record keeps the whole mask (``loss_mask``). Reading, a row with a ``rollscope``
record comes back as that episode; a row verl wrote itself becomes an episode whose turns come from the mask
(``masks.mask_structure``), with the knobs ``import --set``/``--config`` give as its ``config.loop`` (none given: none
recorded, and the checks say they assume verl's defaults). A field verl's model has that the row lacks, or holds
under another name, is named in a note and read as its default.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..checks.diagnosis import read_episode
from ..errors import FormatError
from ..records.episode import Episode, Message, Status, TokenArrays
from ..records.numbers import nan_to_none
from ..records.provenance import RunConfig, Source
from .base import ImportContext, int_array, jsonable, logprob_array, mask_array, reward_value, stable_id
from .edited import with_edited_columns
from .masks import mask_structure

# AgentLoopOutput's fields in the model's order, and AgentLoopMetrics'.
FIELDS = ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "routed_experts", "multi_modal_data",
          "reward_score", "num_turns", "metrics", "extra_fields")
METRICS = ("generate_sequences", "tool_calls", "num_preempted")
# Names the same values go by elsewhere in verl (the batch's DataProto keys, older loops).
ALIASES = {"prompts": "prompt_ids", "responses": "response_ids", "loss_mask": "response_mask",
           "rollout_log_probs": "response_logprobs", "log_probs": "response_logprobs"}
KEYS = frozenset(FIELDS) | frozenset(ALIASES)


def _verl_counts(ep: Episode) -> tuple[list[float], list[float], int]:
    """(turn_scores, tool_rewards, num_turns): the verl loop's own counters, or the record's equivalent."""
    for t in reversed(ep.turns):
        v = t.info.get("verl")
        if isinstance(v, dict) and "turn_scores" in v:
            return (list(v["turn_scores"]), list(v.get("tool_rewards", [])),
                    int(v.get("user_turns", 0)) + int(v.get("assistant_turns", 0)) + 1)
    assistant = sum(1 for t in ep.turns if t.generation is not None)
    user = sum(1 for t in ep.turns if any(s.kind in ("user", "tool", "env") for s in t.segments))
    return list(ep.turn_rewards), [], user + assistant + 1


def _logprobs(ep: Episode) -> list[float] | None:
    """Response logprobs as verl keeps them: null unless every generated id has one; 0.0 at mask-0 positions."""
    p = ep.prompt_len
    lps, mask = ep.tokens.logprobs[p:], ep.tokens.loss_mask[p:]
    gen = lps[mask == 1]
    if not len(lps) or not gen.size or np.isnan(gen).any():
        return None
    return [0.0 if (m == 0 and math.isnan(x)) else float(x) for x, m in zip(lps.tolist(), mask.tolist(), strict=True)]


def _prompt_messages(ep: Episode) -> list[dict[str, Any]]:
    out = []
    for m in ep.messages:
        if m.role == "assistant":
            break
        out.append(m.to_template())
    return out


def row(ep: Episode) -> dict[str, Any]:
    """One episode as verl's ``AgentLoopOutput.model_dump()``."""
    p = ep.prompt_len
    ids, mask = ep.tokens.ids.tolist(), ep.tokens.loss_mask.tolist()
    turn_scores, tool_rewards, num_turns = _verl_counts(ep)
    gen_s = sum(t.timings.get("generate_s", 0.0) for t in ep.turns)
    tool_s = sum(t.timings.get("env_s", 0.0) for t in ep.turns if t.raw_observation or t.tool_calls)
    record = ep.to_dict(include_tokens=False)
    versions = ep.tokens.versions.tolist()
    if any(v >= 0 for v in versions):
        record["versions"] = versions
    response_logprobs = _logprobs(ep)
    back = np.full(len(ids), np.nan, dtype=np.float32)
    if response_logprobs is not None:
        back[p:] = response_logprobs
    if not np.array_equal(back, ep.tokens.logprobs, equal_nan=True):  # verl's shape cannot say it: the record does
        record["logprobs"] = nan_to_none(ep.tokens.logprobs.tolist())
    if any(mask[:p]):  # trained prompt tokens (a mask bug): verl's response_mask cannot hold them, the record does
        record["loss_mask"] = mask
    return {
        "prompt_ids": ids[:p],
        "response_ids": ids[p:],
        "response_mask": mask[p:],
        "response_logprobs": response_logprobs,
        "routed_experts": None,
        "multi_modal_data": None,
        "reward_score": ep.reward,
        "num_turns": num_turns,
        "metrics": {"generate_sequences": gen_s, "tool_calls": tool_s, "num_preempted": -1},
        "extra_fields": {"turn_scores": turn_scores, "tool_rewards": tool_rewards, "raw_prompt": _prompt_messages(ep),
                         "rollscope": record},
    }


def write_stream(episodes: Iterable[Episode], f: IO[str]) -> int:
    """One ``AgentLoopOutput`` row an episode with tokens (an episode without them has nothing verl could train
    on and is left out); returns the number written."""
    n = 0
    for ep in episodes:
        if not ep.n_tokens:
            continue
        f.write(json.dumps(row(ep), ensure_ascii=False, allow_nan=False))
        f.write("\n")
        n += 1
    return n


# -- reading -------------------------------------------------------------------------------------


def _fields(d: dict[str, Any], path: Path, ctx: ImportContext) -> dict[str, Any]:
    """The row under verl's field names; each alias read and each missing field named in a note."""
    out = {k: d[k] for k in FIELDS if k in d}
    for alias, name in ALIASES.items():
        if alias in d and name not in out:
            out[name] = d[alias]
            ctx.note(f"{path}: verl AgentLoopOutput field {name!r} is missing; read from {alias!r}, its value under "
                     "another of verl's names")
    for name, default in (("response_logprobs", "null: no logprobs"), ("reward_score", "null: reward 0.0"),
                          ("num_turns", "0"), ("metrics", "no timings"), ("extra_fields", "empty")):
        if name not in out:
            ctx.note(f"{path}: verl AgentLoopOutput field {name!r} is missing; read as {default}")
    extra = out.get("extra_fields")
    if isinstance(extra, dict):
        for name in ("turn_scores", "tool_rewards"):
            if name not in extra:
                ctx.note(f"{path}: extra_fields has no {name!r} (ToolAgentLoop writes it); read as []")
    return out


def _arrays(v: dict[str, Any], where: str, ctx: ImportContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int | None]:
    """(ids, mask, logprobs) of the whole sequence, prompt first, the prompt's length, and the length of
    ``response_logprobs`` where it is not the response's (laid from the response start, cut or unknown past its end:
    ``check`` reports the row, which is shown rather than dropped)."""
    for name in ("prompt_ids", "response_ids", "response_mask"):
        if name not in v:
            raise FormatError("missing (an AgentLoopOutput needs prompt_ids, response_ids and response_mask)",
                              where, name)
    prompt = int_array(v["prompt_ids"], where, "prompt_ids")
    response = int_array(v["response_ids"], where, "response_ids")
    rmask = mask_array(v["response_mask"], where, "response_mask")
    if len(rmask) != len(response):
        raise FormatError(f"has {len(rmask)} values for {len(response)} response ids", where, "response_mask")
    lps = np.full(len(prompt) + len(response), np.nan)
    misfit = None
    if v.get("response_logprobs") is not None:
        rl, _ = logprob_array(v["response_logprobs"], where, "response_logprobs")
        if len(rl) != len(response):
            misfit = len(rl)
            ctx.note("rows whose response_logprobs length differs from response_ids' were imported with the "
                     "logprobs laid from the response start; `rollscope check` reports them as logprobs_misaligned")
        m = min(len(rl), len(response))
        lps[len(prompt):len(prompt) + m] = rl[:m]
    ids = np.concatenate([prompt, response]).astype(np.int64)
    mask = np.concatenate([np.zeros(len(prompt), dtype=np.int8), rmask.astype(np.int8)])
    return ids, mask, lps, len(prompt), misfit


def record_to_episode(d: dict[str, Any], where: str, path: Path, line: int, ctx: ImportContext) -> Episode:
    v = _fields(d, path, ctx)
    ids, mask, lps, prompt_len, misfit = _arrays(v, where, ctx)
    extra = v.get("extra_fields") if isinstance(v.get("extra_fields"), dict) else {}
    assert isinstance(extra, dict)
    record = extra.get("rollscope")
    if isinstance(record, dict):
        ctx.self_described = True  # the record names its tokenizer
        versions = record.get("versions")
        ver = np.asarray(versions, dtype=np.int64) if isinstance(versions, list) and len(versions) == len(ids) \
            else np.full(len(ids), -1, dtype=np.int64)
        own = record.get("logprobs")
        if isinstance(own, list) and len(own) == len(ids):
            lps, _ = logprob_array(own, where, "extra_fields.rollscope.logprobs")
        whole = record.get("loss_mask")
        if isinstance(whole, list) and len(whole) == len(ids) and whole[prompt_len:] == mask[prompt_len:].tolist():
            mask = mask_array(whole, where, "extra_fields.rollscope.loss_mask")  # the prompt's trained tokens too
        body = {k: val for k, val in record.items() if k not in ("versions", "logprobs", "loss_mask")}
        try:
            ep = read_episode(body, tokens=TokenArrays(ids, mask, lps, ver))
        except FormatError as e:
            raise FormatError(e.detail, where, f"extra_fields.rollscope.{e.field}" if e.field else "extra_fields.rollscope") \
                from None
        if ep.prompt_len != prompt_len:
            ctx.note(f"{where}: the Rollscope record's prompt is {ep.prompt_len} tokens, prompt_ids {prompt_len}: "
                     "the ids are kept")
            ep = ep.evolve(prompt_len=prompt_len)
        if ctx.loop is not None and ep.config.loop is not None:
            ctx.note(f"{path}: rows whose Rollscope record holds its knobs keep them; --set and --config apply to "
                     "the rows without one")
        elif ctx.loop is not None:
            ep = ep.evolve(config=replace(ep.config, loop=ctx.loop))
        if v.get("reward_score") is not None:  # re-scored after export: the row's score, as a verl trainer reads it
            ep = with_edited_columns(ep, {"reward": v["reward_score"]}, where, path, ctx, {"reward": "reward_score"})
        return ep
    if "reward_score" in v and v["reward_score"] is None:
        ctx.note(f"{path}: reward_score is null (verl's loop leaves it to the reward manager, which had not scored "
                 "these rows): their reward reads as 0.0")
    reward = reward_value(v.get("reward_score"), where, "reward_score", ctx.reward_key)  # null: said above
    versions = np.full(len(ids), -1, dtype=np.int64)
    segments, turns = mask_structure(ids, mask, lps, versions, prompt_len, tokenizer=ctx.tokenizer, reward=reward,
                                     cut_without_eot=True)
    raw_prompt = extra.get("raw_prompt")
    messages: list[Message] = []
    if isinstance(raw_prompt, list):
        for m in raw_prompt:
            if isinstance(m, dict) and m.get("role") in ("system", "user", "assistant", "tool"):
                messages.append(Message(m["role"], str(m.get("content") or "")))
    details = {k: jsonable(extra.get(k, [])) for k in ("turn_scores", "tool_rewards")}
    details.update(shape="AgentLoopOutput", num_turns=jsonable(v.get("num_turns", 0)),
                   metrics=jsonable(v.get("metrics") or {}),
                   extra_fields=jsonable({k: x for k, x in extra.items() if k not in ("turn_scores", "tool_rewards")}))
    if misfit is not None:
        details.update(logprobs_length=misfit, response_length=len(ids) - prompt_len)
    return Episode(
        # Its file's name and line in the id: the samples of a group that generated the same reply are rows alike,
        # and so are an eval's greedy answers in each step's file; each is its own episode (their rewards and
        # logprobs may differ). Read again, a row keeps its id.
        id=stable_id("verl-agent-loop", path.name, line, mask.tolist(), tokens=ids),
        env=ctx.env or "verl",
        task_id=(task := "p-" + stable_id("prompt", tokens=ids[:prompt_len])[:10]),
        group_id=f"verl:{path.name}:{task}",  # GRPO's group: the samples of one prompt, in one step's file
        tokenizer=ctx.tokenizer_name,
        status=Status.COMPLETED,
        reason="imported from a verl AgentLoopOutput",
        reward=reward,
        messages=tuple(messages),
        turns=turns,
        tokens=TokenArrays(ids, mask, lps, versions),
        prompt_len=prompt_len,
        segments=segments,
        config=RunConfig(loop=ctx.loop),  # None: the row does not say (the checks assume verl's defaults)
        source=Source.imported("verl", str(path), line=line, index=line - 1, **details),
    )


def is_agent_loop_row(d: dict[str, Any]) -> bool:
    return any(k in d for k in ("prompt_ids", "response_ids", "prompts", "responses"))
