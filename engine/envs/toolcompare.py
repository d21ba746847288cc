"""What the tool envs' outcomes share: the agent's calls and replies read from the record, which tools write,
the comparison with the reference writes in the kinds' order of precedence, and the database diff."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..records.episode import Episode
from ..records.outcome import DbChange, Outcome, OutcomeCall
from ..tokens.toolcalls import tool_names

# Tools without a database effect, by name in every tool env (tau-bench's retail and airline, ours).
NO_EFFECT = frozenset({"think", "calculate", "transfer_to_human_agents", "respond"})
READ_PREFIXES = ("get_", "find_", "list_", "search_")
DB_DIFF_LIMIT = 50
_MISSING = object()


def is_write(name: str) -> bool:
    """Whether a tool may change the database (reads, think, calculate and the transfer do not)."""
    return name not in NO_EFFECT and not name.startswith(READ_PREFIXES)


@dataclass(frozen=True)
class AgentCall:
    """A tool call the agent made, at its turn, with what the tool answered (None: not recorded)."""

    turn: int
    name: str
    arguments: dict[str, Any]
    result: str | None
    offered: bool = True
    """Whether the episode offers the tool (False: its ``tools`` list other tools and not this one)."""

    @property
    def accepted(self) -> bool:
        """Whether the call went through: a tool the episode offers, answered without an error. A call to a tool
        that does not exist wrote nothing, whatever answered it (an env that echoes, a record without answers)."""
        r = (self.result or "").lstrip()
        return self.offered and not (r.startswith("Error") or r.startswith("Unknown action"))


def agent_calls(ep: Episode) -> list[AgentCall]:
    """The agent's executed tool calls, in order. A live episode's turns hold what the env answered; an import
    without them is read from its messages (turn k is the k-th assistant message, as imports number turns)."""
    out: list[AgentCall] = []
    # None listed: every name is taken for a tool. A namespace before a name (``functions.cancel_order``) is not
    # part of it, on either side.
    tools = {t.rsplit(".", 1)[-1] for t in tool_names(ep.tools)}

    def call(turn: int, name: str, arguments: dict[str, Any], result: str | None) -> AgentCall:
        return AgentCall(turn, name, arguments, result, not tools or name.rsplit(".", 1)[-1] in tools)

    if any(t.observation for t in ep.turns):
        for t in ep.turns:
            answers = [m.content for m in t.observation if m.role == "tool"]
            if t.parse_error is not None:
                continue
            out += [call(t.index, c.name, dict(c.arguments), a) for c, a in zip(t.tool_calls, answers)]
        return out
    k = -1
    pending: list[AgentCall] = []
    for m in ep.messages:
        if m.role == "assistant":
            out += pending
            k += 1
            pending = [call(k, c.name, dict(c.arguments), None) for c in m.tool_calls]
        elif m.role == "tool" and pending:
            i = next((j for j, c in enumerate(pending) if c.name == m.name), 0)
            c = pending.pop(i)
            out.append(call(c.turn, c.name, c.arguments, m.content))
    return out + pending


def agent_replies(ep: Episode) -> list[str]:
    """What the agent said to the user: its messages without tool calls."""
    return [m.content for m in ep.messages if m.role == "assistant" and not m.tool_calls]


def said(output: str, replies: Sequence[str]) -> bool:
    """tau-bench's rule: the output, lower-cased, in a reply lower-cased with its commas removed."""
    return any(output.lower().replace(",", "") in r.lower().replace(",", "") for r in replies)


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k, _MISSING) != b.get(k, _MISSING))


def _args(arguments: dict[str, Any], limit: int = 120) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compare_tools(reference: Sequence[OutcomeCall], outputs: Sequence[str], calls: Sequence[AgentCall],
                  replies: Sequence[str], db_diff: Sequence[DbChange] = ()) -> Outcome:
    """The tool envs' outcome: the agent's writes against the reference writes, in the kinds' precedence."""
    reference = [r for r in reference if is_write(r.name)]
    writes = [c for c in calls if is_write(c.name)]
    used: set[int] = set()
    missing: OutcomeCall | None = None
    for r in reference:
        j = next((i for i, c in enumerate(writes)
                  if i not in used and c.accepted and c.name == r.name and c.arguments == r.arguments), None)
        if j is None:
            missing = missing or r
        else:
            used.add(j)
    diff = tuple(db_diff)
    lacking = tuple(o for o in outputs if not said(o, replies))
    if missing is not None:
        same_tool = [c for c in writes if c.name == missing.name]
        if not same_tool:
            return Outcome("not_called", None, missing, None, (), lacking, diff, (), None,
                           f"the reference's {missing.name}({_args(missing.arguments)}) was never called")
        unused = [c for i, c in enumerate(writes) if c.name == missing.name and i not in used] or same_tool
        best = min(unused, key=lambda c: len(differing(c.arguments, missing.arguments)))
        keys = differing(best.arguments, missing.arguments)
        taken = OutcomeCall(best.name, best.arguments)
        if keys:
            shown = "; ".join(f"{k}={best.arguments.get(k)!r} where the reference has {missing.arguments.get(k)!r}"
                              for k in keys[:3])
            text = f"turn {best.turn}: {best.name} was called with {shown}"
        elif not best.offered:
            text = (f"turn {best.turn}: {best.name} was called as the reference does, but the episode's tools do not "
                    "list it")
        else:
            text = f"turn {best.turn}: {best.name} was called as the reference does, but refused: {best.result}"
        return Outcome("wrong_arguments", best.turn, missing, taken, tuple(keys), lacking, diff, (), None, text)
    extra = next((c for i, c in enumerate(writes) if i not in used and c.accepted), None)
    if extra is not None:
        return Outcome("extra_write", extra.turn, None, OutcomeCall(extra.name, extra.arguments), (), lacking, diff,
                       (), None, f"turn {extra.turn}: {extra.name}({_args(extra.arguments)}) is a write the "
                                 "reference lacks")
    if lacking:
        return Outcome("missing_output", None, None, None, (), lacking, diff, (), None,
                       "the database matched, but the agent never said " + ", ".join(repr(o) for o in lacking))
    if diff:
        return Outcome("other", None, None, None, (), (), diff, (), None,
                       "every reference write was made and nothing else written, but the database differs")
    return Outcome("success", None, None, None, (), (), (), (), None,
                   "every reference write was made, nothing else was written, every required output was said")


def db_changes(got: dict[str, Any], expected: dict[str, Any], limit: int = DB_DIFF_LIMIT) -> tuple[DbChange, ...]:
    """Where database ``got`` differs from ``expected``: table, record key, dotted field, both values."""
    out: list[DbChange] = []
    for table in sorted(set(got) | set(expected), key=str):
        a, b = got.get(table), expected.get(table)
        if not isinstance(a, dict) or not isinstance(b, dict):
            if a != b:
                out.append(DbChange(str(table), "", "", a, b))
            continue
        for key in sorted((k for k in set(a) | set(b) if a.get(k, _MISSING) != b.get(k, _MISSING)), key=str):
            if key not in a or key not in b:
                out.append(DbChange(str(table), str(key), "", a.get(key), b.get(key)))
            else:
                out += [DbChange(str(table), str(key), path, x, y) for path, x, y in _fields(a[key], b[key], "")]
            if len(out) >= limit:
                return tuple(out[:limit])
    return tuple(out)


def _fields(a: Any, b: Any, path: str) -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[tuple[str, Any, Any]] = []
        for k in sorted(set(a) | set(b), key=str):
            x, y = a.get(k, _MISSING), b.get(k, _MISSING)
            if x != y:
                out += _fields(None if x is _MISSING else x, None if y is _MISSING else y, f"{path}.{k}" if path else str(k))
        return out
    return [(path, a, b)]
