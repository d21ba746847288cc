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
              "at the role lines ChatML leaves (`user`, `assistant`... alone on a line, and a tool's answer verl "
              "glues to the reply before it), so a reply holding such lines would be split there too")
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
# closes a message ``\n``, so a message starts on a line that holds its role alone.
_ROLES = ("system", "user", "assistant", "tool")
# After a reply, verl appends what answered it (rendered with the generation prompt after it) right after the
# reply's end-of-turn token, with no newline: a tool's answer then reads ``...</tool_call>user\n<tool_response>``.
_GLUED = ("user\n<tool_response>", "tool\n<tool_response>")
_NEXT = "\nassistant\n"


def decoded_conversation(prompt: str, response: str) -> tuple[Message, ...] | None:
    """The messages of a ChatML conversation that verl decoded with ``skip_special_tokens=True``: the prompt's (an
    optional system message, then user and assistant in turn, up to the generation prompt ``assistant``) and the
    response's replies with what answered each (``user`` messages as Qwen's template writes a tool's answer:
    ``<tool_response>``...). None where the prompt is not such text (another template's markup, no role lines, roles
    out of turn: a message that quotes a conversation): it is then read as one user message and one reply. One pass
    over each text."""
    opening = _prompt_messages(prompt)
    if opening is None:
        return None
    messages, text = opening
    at = 0
    while True:
        found = _answer_at(response, at)
        if found is None:
            break
        role, start, body = found
        stop = response.find(_NEXT, body)
        if stop < 0:
            break  # no generation prompt after it: the reply's own text
        messages += [Message("assistant", text + response[at:start]), Message(role, response[body:stop])]
        text, at = "", stop + len(_NEXT)
    messages.append(Message("assistant", text + response[at:]))
    return tuple(messages)


def _prompt_messages(prompt: str) -> tuple[list[Message], str] | None:
    """(the prompt's messages, what the template put after the generation prompt: Qwen3's empty think block with
    thinking off), or None where its role lines do not make a conversation up to a generation prompt."""
    lines = prompt.split("\n")
    roles = [i for i, line in enumerate(lines) if line in _ROLES]
    if not roles or roles[0] != 0 or lines[roles[-1]] != "assistant":
        return None
    said = [lines[i] for i in roles]
    order = said[1:] if said[0] == "system" else said
    # user first, then assistant and user in turn (a tool's answer as Qwen writes it: a user message), ending on
    # the generation prompt
    if len(order) < 2 or len(order) % 2 or any(r != ("user" if k % 2 == 0 else "assistant") for k, r in enumerate(order)):
        return None
    ends = [*roles[1:], len(lines)]
    messages = [Message(_role(lines[i]), "\n".join(lines[i + 1:e])) for i, e in zip(roles[:-1], ends[:-1], strict=True)]
    return messages, "\n".join(lines[roles[-1] + 1:])


def _answer_at(response: str, at: int) -> tuple[Role, int, int] | None:
    """The first answer to a reply from ``at`` on: (its role, where its role line starts, where its text starts). A
    role line starts a line, or, where verl glued a tool's answer to the reply, follows it directly."""
    best: tuple[Role, int, int] | None = None
    for role in ("user", "tool"):
        k = response.find(f"\n{role}\n", at)
        if k >= 0 and k + 1 > at and (best is None or k < best[1]):
            best = (_role(role), k, k + len(role) + 2)
    for glued in _GLUED:
        k = response.find(glued, at + 1)  # after some reply text
        if k >= 0 and (best is None or k < best[1]):
            role = glued.split("\n", 1)[0]
            best = (_role(role), k, k + len(role) + 1)
    return best


def _role(name: str) -> Role:
    assert name in _ROLES
    return cast(Role, name)


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
