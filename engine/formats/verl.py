"""verl's ``trainer.rollout_data_dir`` dumps: ``{step}.jsonl``, one line per sample.

What verl writes (volcengine/verl, ``RayPPOTrainer._log_rollout_data`` and
``_dump_generations``): ``input`` and ``output`` are the prompt and response
ids decoded with ``skip_special_tokens=True``, ``gts`` the ground truth
(``reward_model.ground_truth``), ``score`` the summed token-level score,
``step`` the global step, plus every ``reward_extra_info`` key with one
value per sample (``acc``, ``pred``, ``uid``, ``request_id``...).

The dump keeps no token ids and no chat markup, so tokens cannot be what
the trainer saw. With a tokenizer the sample is imported as a two-message
conversation (user = ``input``, assistant = ``output``) rendered with its
chat template, marked ``source["tokens_reconstructed"]``; without one it
holds the messages only. ``score`` is the reward; ``gts`` and the extra
keys go to ``source``. Samples of one prompt share a task id (``uid`` when
the dump has it, else a hash of the input), so GRPO groups stay together.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import FormatError
from ..records.episode import Episode, Message, Status
from ..records.provenance import Source
from .base import ImportContext, jsonable, read_jsonl_records, reward_value, stable_id
from .messages import NO_TOKENIZER_NOTE, conversation_episode

REQUIRED = ("input", "output")
RECONSTRUCTED_NOTE = ("verl dumps hold decoded text without special tokens: token ids were reconstructed by "
                      "rendering input/output with the tokenizer's chat template, not read from the run")


def record_to_episode(d: dict[str, Any], where: str, path: Path, line: int, ctx: ImportContext) -> Episode:
    for key in REQUIRED:
        if key not in d:
            raise FormatError("missing", where, key)
        if not isinstance(d[key], str):
            raise FormatError(f"must be text, got {type(d[key]).__name__}", where, key)
    if "score" not in d:
        raise FormatError("missing", where, "score")
    reward = reward_value(d["score"], where, "score")
    step = d.get("step")
    if step is None:
        m = re.fullmatch(r"(\d+)", path.stem)
        step = int(m.group(1)) if m else None
    elif isinstance(step, bool) or not isinstance(step, int):
        raise FormatError(f"must be an integer, got {step!r}", where, "step")
    extra = {k: jsonable(v) for k, v in d.items() if k not in ("input", "output", "gts", "score", "step")}
    source = Source.imported("verl", str(path), line=line, index=line - 1, step=step, rollout_step=step, gts=jsonable(d.get("gts")),
                             reward_extra=extra, **({"tokens_reconstructed": True} if ctx.tokenizer is not None else {}))
    group = d.get("uid")
    task = str(group) if group is not None else "p-" + stable_id("prompt", d["input"])[:10]
    return conversation_episode(
        fmt="verl",
        eid=stable_id("verl", step, line, d["input"], d["output"]),
        env=str(d.get("data_source") or "verl"),
        task_id=task,
        messages=(Message("user", d["input"]), Message("assistant", d["output"])),
        tools=(), reward=reward, status=Status.COMPLETED, source=source, ctx=ctx, where=where, sample_index=line - 1,
    )


def read(path: Path, ctx: ImportContext) -> Iterator[Episode]:
    """Stream episodes from verl rollout JSONL files, one line at a time."""
    ctx.note(RECONSTRUCTED_NOTE if ctx.tokenizer is not None else NO_TOKENIZER_NOTE)
    yield from read_jsonl_records(path, ctx, record_to_episode)
