"""tau-bench's own results: what Sierra's ``run.py`` writes after a run.

The file is one JSON list of ``EnvRunResult``s, ``{"task_id", "reward",
"info", "traj", "trial"}``, where ``traj`` is the agent's OpenAI chat
messages: the system message (the domain's policy, its "wiki"), the user's
opening, then assistant messages with ``tool_calls`` and the ``tool``
messages answering them, and the user's replies. Each result becomes one
episode:

- its env is ``--env`` (``taubench:retail`` or ``taubench:airline``), or,
  without it, the domain the policy text names (a policy that names neither
  or both is a skipped record that says to give ``--env``);
- its task is ``task_id`` (tau-bench's task index), its sample index the
  ``trial``, its reward the recorded ``reward``; ``info`` is kept in the
  source's details;
- with ``--tokenizer`` the conversation is rendered and tokenized like any
  messages import; without one the episode holds messages only.

tau-bench does not write the tool schemas into its results; the episode's
env has them, which is what re-executing it needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import FormatError
from ..records import jsonbounds, textsafe
from ..records.episode import Episode, Status
from ..records.provenance import Source
from ..records.reading import json_type
from .base import ImportContext, discover, jsonable, stable_id
from .messages import NO_TOKENIZER_NOTE, conversation_episode, parse_messages
from .sniff import not_json_list, utf8_bom

DOMAINS = ("retail", "airline")


def domain_of(policy: str) -> str | None:
    """The tau-bench domain a policy text names, or None when it names neither or both."""
    low = policy.lower()
    named = [d for d in DOMAINS if d in low]
    return named[0] if len(named) == 1 else None


def _env(ctx: ImportContext, messages: Any, where: str) -> str:
    if ctx.env:
        return ctx.env
    system = next((m.content for m in messages if m.role == "system"), "")
    domain = domain_of(system)
    if domain is None:
        raise FormatError("cannot tell the tau-bench domain from the policy text (the system message): "
                          "give --env taubench:retail or --env taubench:airline", where, "traj")
    return f"taubench:{domain}"


def result_to_episode(d: Any, where: str, path: Path, index: int, ctx: ImportContext) -> Episode:
    if not isinstance(d, dict):
        raise FormatError(f"expected an object, got {json_type(d)}", where)
    for key in ("task_id", "reward", "traj"):
        if key not in d:
            raise FormatError("missing", where, key)
    task = d["task_id"]
    if isinstance(task, bool) or not isinstance(task, (int, str)):
        raise FormatError(f"must be a task index, got {json_type(task)}", where, "task_id")
    trial = d.get("trial", 0)
    if isinstance(trial, bool) or not isinstance(trial, int) or trial < 0:
        raise FormatError(f"must be a whole number of 0 or more, got {trial!r:.40}", where, "trial")
    messages = parse_messages(d["traj"], where)
    reward = ctx.reward(d["reward"], where)
    env = _env(ctx, messages, where)
    details: dict[str, Any] = {"trial": trial}
    if d.get("info") is not None:
        details["info"] = jsonable(d["info"])
    source = Source.imported("taubench", str(path), index=index, **details)
    return conversation_episode(
        fmt="taubench", eid=stable_id("taubench", env, task, trial, d["traj"]), env=env, task_id=str(task),
        messages=messages, tools=(), reward=reward, status=Status.COMPLETED, source=source, ctx=ctx, where=where,
        sample_index=trial,
    )


def read(path: Path, ctx: ImportContext) -> Iterator[Episode]:
    """Episodes from tau-bench results files (``*.json``, each a list of results)."""
    if ctx.tokenizer is None:
        ctx.note(NO_TOKENIZER_NOTE)
    for f in discover(path, (".json",)):
        ctx.opened(f)
        try:
            raw = f.read_bytes()
            not_json_list(raw, f, "taubench", "a tau-bench results file")
            data = jsonbounds.loads(raw.decode("utf-8-sig"), limit=None)
        except OSError as e:
            raise FormatError(f"cannot read: {e.strerror}", str(f)) from None
        except UnicodeDecodeError as e:  # the decoder counts from past a byte order mark
            raise FormatError(f"not UTF-8 text (byte {e.start + utf8_bom(raw)})", str(f)) from None
        except ValueError as e:
            raise FormatError(f"not valid JSON ({jsonbounds.describe(e)})", str(f)) from None
        if not isinstance(data, list):
            raise FormatError(f"expected a JSON list of results (what tau-bench's run.py writes), got "
                              f"{json_type(data)}", str(f))
        unsafe = textsafe.may_hold_surrogates(raw)
        ctx.expect(len(data))
        for i, d in enumerate(data):
            where = f"{f}: result {i}"
            if unsafe:
                d, ctx.replaced[where] = textsafe.clean_value(d)
            try:
                ep = result_to_episode(d, where, f, i, ctx)
            except FormatError as e:
                ctx.skip(e)
                continue
            yield ctx.mark_replaced(ep, where)
