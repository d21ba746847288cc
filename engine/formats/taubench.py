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
  source's details (and a null reward as ``reward: None`` there, which the
  outcome reads);
- with ``--tokenizer`` the conversation is rendered and tokenized like any
  messages import; without one the episode holds messages only.

A task that raised is written by ``run.py`` as ``reward`` 0.0, ``info``
``{"error": str(e), "traceback": ...}`` and an empty ``traj``. It becomes an
``aborted`` episode with no messages, its reason the exception's type and the
error's first line; the traceback stays in ``info``. With no policy to read,
its domain is the one the file's other results name (one ``run.py`` run is
one domain); where none does, the record is skipped and says to give ``--env``.

tau-bench does not write the tool schemas into its results; the episode's
env has them, which is what re-executing it needs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import FormatError
from ..records import jsonbounds, textsafe
from ..records.episode import Episode, Message, Status
from ..records.provenance import Source
from ..records.reading import json_type
from .base import ImportContext, discover, jsonable, stable_id
from .messages import NO_TOKENIZER_NOTE, conversation_episode, parse_messages
from .sniff import not_json_list, utf8_bom

DOMAINS = ("retail", "airline")
GIVE_ENV = "give --env taubench:retail or --env taubench:airline"
REASON_CHARS = 300  # of the error's first line, in the episode's reason
_TYPE = re.compile(r"[A-Za-z_][\w.]*")


def domain_of(policy: str) -> str | None:
    """The tau-bench domain a policy text names, or None when it names neither or both."""
    low = policy.lower()
    named = [d for d in DOMAINS if d in low]
    return named[0] if len(named) == 1 else None


def _policy(traj: Any) -> str | None:
    """The system message's text of a result's raw ``traj``, or None where it has none."""
    if not isinstance(traj, list):
        return None
    return next((m["content"] for m in traj if isinstance(m, dict) and m.get("role") == "system"
                 and isinstance(m.get("content"), str)), None)


def file_domains(data: list[Any]) -> set[str]:
    """The domains the policies of a file's results name (one ``run.py`` run writes one)."""
    named = {domain_of(p) for d in data if isinstance(d, dict) and (p := _policy(d.get("traj"))) is not None}
    return {d for d in named if d is not None}


def _env(ctx: ImportContext, messages: Any, where: str) -> str:
    if ctx.env:
        return ctx.env
    system = next((m.content for m in messages if m.role == "system"), "")
    domain = domain_of(system)
    if domain is None:
        raise FormatError(f"cannot tell the tau-bench domain from the policy text (the system message): {GIVE_ENV}",
                          where, "traj")
    return f"taubench:{domain}"


def run_error(d: dict[str, Any]) -> str | None:
    """What a result that raised in ``run.py`` says of it (its exception's type and the error's first line, bounded),
    or None for a result that ran: one whose ``traj`` is empty and whose ``info`` holds ``error``."""
    info = d.get("info")
    if d.get("traj") != [] or not isinstance(info, dict) or "error" not in info:
        return None
    error = "" if info["error"] is None else str(info["error"])
    first = next((line.strip() for line in error.splitlines() if line.strip()), "")
    if len(first) > REASON_CHARS:
        first = first[: REASON_CHARS - 1] + "…"
    kind = _exception_type(info.get("traceback"), error)
    if kind and first:
        return textsafe.clean_text(f"{kind}: {first}")
    return textsafe.clean_text(kind or first or "an error with no message (info.error is empty)")


def _exception_type(tb: Any, error: str) -> str:
    """The raised exception's class name, from the traceback's line that starts the error (``module.Type: error``,
    or ``Type`` alone for an error with no message); "" where the traceback does not say."""
    if not isinstance(tb, str):
        return ""
    after = f": {error.splitlines()[0]}" if error else ""  # traceback writes "Type: str(e)", or "Type" for ""
    for line in reversed(tb.splitlines()):
        if line.endswith(after) and _TYPE.fullmatch(name := line[: len(line) - len(after)]):
            return name.rsplit(".", 1)[-1]
    return ""


def _once(data: list[Any]) -> Callable[[], set[str]]:
    """``file_domains(data)``, read when first asked (only a task that raised, without ``--env``, asks)."""
    found: list[set[str]] = []

    def domains() -> set[str]:
        if not found:
            found.append(file_domains(data))
        return found[0]

    return domains


def _failed_env(ctx: ImportContext, domains: Callable[[], set[str]], reason: str, where: str) -> str:
    if ctx.env:
        return ctx.env
    named = domains()
    if len(named) == 1:
        return f"taubench:{next(iter(named))}"
    which = "the results in this file name both retail and airline" if named else \
        "no other result in this file names one in its policy text"
    raise FormatError(f"this task raised in tau-bench's run ({reason}) and run.py kept no conversation for it, so no "
                      f"policy text tells its domain, and {which}: {GIVE_ENV}", where, "traj")


def failed_episode(d: dict[str, Any], reason: str, where: str, path: Path, index: int, ctx: ImportContext,
                   domains: Callable[[], set[str]]) -> Episode:
    """A result of a task that raised: an ``aborted`` episode with no conversation, its reason the error's."""
    task, trial = d["task_id"], d.get("trial", 0)
    reward = ctx.reward(d["reward"], where)
    env = _failed_env(ctx, domains, reason, where)
    details: dict[str, Any] = {"trial": trial, "info": jsonable(d["info"])}
    if d["reward"] is None:
        details["reward"] = None
    eid = stable_id("taubench", "raised", env, task, trial, path.name, d["info"])
    before = stable_id("taubench", env, task, trial, [])  # its id when it was read as an empty conversation
    if ctx.known is not None and ctx.known(before):
        eid = before  # found again, not stored twice (`import --replace` writes it as it now reads)
    return Episode(
        id=eid, env=env, task_id=str(task),
        sample_index=trial, status=Status.ABORTED, reason=reason, reward=reward,
        source=Source.imported("taubench", str(path), index=index, **details), created_at=time.time(),
    )


def result_to_episode(d: Any, where: str, path: Path, index: int, ctx: ImportContext,
                      domains: Callable[[], set[str]] | None = None) -> Episode:
    """The episode of one result; ``domains`` gives the domains the file's policies name, for a task that raised
    (none: this result alone is read)."""
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
    if (reason := run_error(d)) is not None:
        return failed_episode(d, reason, where, path, index, ctx, domains or (lambda: set()))
    messages: tuple[Message, ...] = parse_messages(d["traj"], where)
    reward = ctx.reward(d["reward"], where)
    env = _env(ctx, messages, where)
    details: dict[str, Any] = {"trial": trial}
    if d.get("info") is not None:
        details["info"] = jsonable(d["info"])
    if d["reward"] is None:  # read as 0.0; the outcome says the result held none
        details["reward"] = None
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
        domains = _once(data)
        raised: list[str] = []
        for i, d in enumerate(data):
            where = f"{f}: result {i}"
            if unsafe:
                d, ctx.replaced[where] = textsafe.clean_value(d)
            try:
                ep = result_to_episode(d, where, f, i, ctx, domains)
            except FormatError as e:
                ctx.skip(e)
                continue
            if ep.status is Status.ABORTED:
                raised.append(f"task {ep.task_id} trial {ep.sample_index}: {ep.reason}")
            yield ctx.mark_replaced(ep, where)
        if raised:
            n = len(raised)
            ctx.note(f"{f}: {n} {'result is a task' if n == 1 else 'results are tasks'} that raised in tau-bench's run "
                     "(info.error, no conversation kept): imported as aborted, the error the reason and the traceback in "
                     f"the source's info (`--where status=aborted` lists them); the first, {raised[0]}")
