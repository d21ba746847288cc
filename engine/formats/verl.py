"""verl's JSONL in both its shapes: ``trainer.rollout_data_dir`` dumps, and ``AgentLoopOutput`` rows.

A file is read in the shape of its first record (``read``): ``prompt_ids``/``response_ids`` make it
``AgentLoopOutput`` rows, which ``verl_agent_loop`` reads and ``rollscope export --format verl`` writes;
``input``/``output`` a rollout dump, below. The rollout dump: ``{step}.jsonl``, one line per sample.

What verl writes (volcengine/verl, ``RayPPOTrainer._log_rollout_data`` and
``_dump_generations``): ``input`` and ``output`` are the prompt and response
ids decoded with ``skip_special_tokens=True``, ``gts`` the ground truth
(``reward_model.ground_truth``), ``score`` the summed token-level score,
``step`` the global step, plus every ``reward_extra_info`` key with one
value per sample (``acc``, ``pred``, ``uid``, ``request_id``...).

The dump keeps no token ids and no chat markup, so tokens cannot be what
the trainer saw. ChatML's markup is special tokens: what is left of it are
its role lines (``user``, ``assistant``... alone on a line), where the
conversation is split back into its messages (``decoded_conversation``: the
prompt's, then each reply and what answered it). Text without them (another
template's) is a two-message conversation (user = ``input``, assistant =
``output``). With a tokenizer the messages are rendered with its chat
template, marked ``source["tokens_reconstructed"]``; without one the episode
holds the messages only. ``score`` is the reward; ``gts`` and the extra keys
go to ``source``. Samples of one prompt share a task id (``uid`` when the
dump has it, else a hash of the input) and, in one step, a GRPO group.
``--env`` names the env, else the sample's ``data_source``, else ``verl``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from ..errors import FormatError
from ..records.conversation import Role
from ..records.episode import Episode, Message, Status
from ..records.provenance import Source
from ..records.reading import json_type
from . import verl_agent_loop as agent_loop
from .base import ImportContext, discover, int_field, json_lines, jsonable, stable_id
from .messages import NO_TOKENIZER_NOTE, conversation_episode

REQUIRED = ("input", "output")
SPLIT_NOTE = ("verl dumps decode each sample without its special tokens: the conversation was split into messages "
              "at the role lines ChatML leaves (`user`, `assistant`... alone on a line), so a reply holding such a "
              "line would be split there too")
RECONSTRUCTED_NOTE = ("verl dumps hold decoded text without special tokens: token ids were reconstructed by "
                      "rendering input/output with the tokenizer's chat template, not read from the run")


def record_to_episode(d: dict[str, Any], where: str, path: Path, line: int, ctx: ImportContext) -> Episode:
    for key in REQUIRED:
        if key not in d:
            raise FormatError("missing", where, key)
        if not isinstance(d[key], str):
            raise FormatError(f"must be text, got {json_type(d[key])}", where, key)
    if "score" not in d:
        raise FormatError("missing", where, "score")
    reward = ctx.reward(d["score"], where, "score")
    step = d.get("step")
    if step is None:
        m = re.fullmatch(r"(\d+)", path.stem)
        step = int(m.group(1)) if m else None
    else:
        step = int_field(step, where, "step")
    extra = {k: jsonable(v) for k, v in d.items() if k not in ("input", "output", "gts", "score", "step")}
    messages = decoded_conversation(d["input"], d["output"])
    if messages is None:
        messages = (Message("user", d["input"]), Message("assistant", d["output"]))
    else:
        ctx.note(SPLIT_NOTE)
    source = Source.imported("verl", str(path), line=line, index=line - 1, step=step, rollout_step=step, gts=jsonable(d.get("gts")),
                             reward_extra=extra, **({"tokens_reconstructed": True} if ctx.tokenizer is not None else {}),
                             **({"split_at_role_lines": True} if len(messages) > 2 or messages[0].content != d["input"]
                                else {}))
    uid = d.get("uid")
    task = str(uid) if uid is not None else "p-" + stable_id("prompt", d["input"])[:10]
    gts = d.get("gts")  # reward_model.ground_truth: the reference answer the reward was scored against
    return conversation_episode(
        fmt="verl",
        eid=stable_id("verl", step, line, d["input"], d["output"]),
        env=ctx.env or str(d.get("data_source") or "verl"),
        task_id=task,
        messages=messages,
        tools=(), reward=reward, status=Status.COMPLETED, source=source, ctx=ctx, where=where, sample_index=line - 1,
        # GRPO's group: the samples of one prompt (verl's uid, else its text) in one step
        group_id=f"verl:{step}:{task}",
    ).evolve(ground_truth=str(gts) if isinstance(gts, (str, int, float)) and not isinstance(gts, bool) else None)


# ChatML decoded without its special tokens: ``<|im_start|>user\n`` reads ``user\n``, and the ``<|im_end|>\n`` that
# closes a message ``\n``. A prompt is an optional system message, the user's, and the generation prompt
# (``assistant\n``, and what the template puts after it: Qwen3's empty think block with thinking off); the user's is
# taken whole up to that last line, so a message that quotes a conversation is not split.
_PROMPT = re.compile(r"(?:system\n(?P<system>.*?)\n)?user\n(?P<user>.*)\nassistant\n(?P<opening>.*)", re.S)
# In a response, what answered a reply (a tool's answer, an interaction's feedback) and the generation prompt after
# it: verl appends it right after the reply's end-of-turn token (no newline), a template's render with one.
_ANSWER = re.compile(r"\n?(user|tool)\n(.+?)\nassistant\n", re.S)


def decoded_conversation(prompt: str, response: str) -> tuple[Message, ...] | None:
    """The messages of a ChatML conversation that verl decoded with ``skip_special_tokens=True``: the prompt's (a
    system message, the user's) and the response's replies with what answered each (``user`` messages as Qwen's
    template writes a tool's answer: ``<tool_response>``...). None where the prompt is not such text (another
    template's markup, no role lines): it is then read as one user message and one reply."""
    m = _PROMPT.fullmatch(prompt)
    if m is None:
        return None
    messages = [Message("system", m["system"])] if m["system"] is not None else []
    messages.append(Message("user", m["user"]))
    text, at = m["opening"], 0
    for a in _ANSWER.finditer(response):
        if a.start() == 0:
            continue  # a reply comes first: a response that starts on a role line is read as the reply's text
        messages += [Message("assistant", text + response[at:a.start()]), Message(_role(a), a[2])]
        text, at = "", a.end()
    messages.append(Message("assistant", text + response[at:]))
    return tuple(messages)


def _role(m: re.Match[str]) -> Role:
    role = m.group(1)
    assert role in ("user", "tool")
    return cast(Role, role)


def read(path: Path, ctx: ImportContext) -> Iterator[Episode]:
    """Stream episodes from verl JSONL files, one line at a time, each file read in the shape its first record
    has: a ``rollout_data_dir`` dump (``input``/``output``) or ``AgentLoopOutput`` rows (``prompt_ids``/
    ``response_ids``, ``verl_agent_loop``). A file whose first record is neither is refused, naming both."""
    for f in discover(path, (".jsonl",)):
        reader = None
        for where, d in json_lines(f, ctx):
            if reader is None:
                reader = _shape(d, f)
                if reader is record_to_episode:
                    ctx.note(RECONSTRUCTED_NOTE if ctx.tokenizer is not None else NO_TOKENIZER_NOTE)
                    if ctx.loop is not None:
                        ctx.note(f"{f}: a rollout_data_dir dump is not laid out by verl's agent loop: the knobs "
                                 "given (--set, --config) are not recorded on its samples")
            try:
                ep = reader(d, where, f, int(where.rsplit(":", 1)[1]), ctx)
            except FormatError as e:
                ctx.skip(e)
                continue
            yield ctx.mark_replaced(ep, where)


def _shape(d: dict[str, Any], path: Path) -> Any:
    if agent_loop.is_agent_loop_row(d):
        return agent_loop.record_to_episode
    if "input" in d or "output" in d:
        return record_to_episode
    keys = ", ".join(sorted(d)[:8]) or "none"
    raise FormatError(f"is neither of verl's shapes: its first record has keys {keys}; a rollout_data_dir dump has "
                      "input, output and score, an AgentLoopOutput row prompt_ids, response_ids and response_mask "
                      "(rollscope export --format verl writes these)", str(path))
