"""Tool-call parsers: turn generated text into tool calls or a parse error.

``hermes`` (Qwen, Hermes and our SmolLM2 template): ``<tool_call>{json}</tool_call>``
blocks, strictly: anything malformed is a parse error. ``sglang-qwen25``: the
same blocks read the way sglang's ``Qwen25Detector`` and ``FunctionCallParser``
read them for slime's tau-bench agent, which is lenient in its own ways: a
block that is never closed is not a call, a call to a tool the request does
not define is dropped, and when no call is left the whole reply is the text
(so slime sends it to the user). ``llama3``: the whole reply is one JSON
object with ``name`` and ``parameters`` (or ``arguments``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..records import jsonbounds
from ..records.episode import ToolCall
from ..records.reading import json_type

_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)


@dataclass(frozen=True)
class ParseResult:
    calls: tuple[ToolCall, ...]
    error: str | None = None
    content: str = ""  # the text outside tool-call blocks (what a reply without calls says)
    dropped: tuple[str, ...] = ()  # calls the parser dropped without an error, and why


def _msg(e: ValueError) -> str:
    return f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)


def _call_from_obj(obj: object, where: str) -> ToolCall:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {json_type(obj)}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: missing \"name\"")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = jsonbounds.loads(args)
        except ValueError as e:
            raise ValueError(f"{where}: \"arguments\" is a string that is not JSON ({_msg(e)})") from e
    if not isinstance(args, dict):
        raise ValueError(f"{where}: \"arguments\" must be an object")
    return ToolCall(name=name, arguments=args)


def parse_hermes(text: str) -> ParseResult:
    calls: list[ToolCall] = []
    content = _BLOCK.sub("", text).strip()
    for i, m in enumerate(_BLOCK.finditer(text)):
        where = f"tool call {i + 1}"
        if not m.group(2):
            return ParseResult((), f"{where}: <tool_call> is never closed", content)
        body = m.group(1).strip()
        try:
            obj = jsonbounds.loads(body)
        except ValueError as e:
            return ParseResult((), f"{where}: invalid JSON ({_msg(e)})", content)
        try:
            calls.append(_call_from_obj(obj, where))
        except ValueError as e:
            return ParseResult((), str(e), content)
    return ParseResult(tuple(calls), None, content)


def parse_llama3(text: str) -> ParseResult:
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>") :]
    if not body.startswith("{"):
        return ParseResult((), None, text.strip())
    try:
        obj = jsonbounds.loads(body)
    except ValueError as e:
        return ParseResult((), f"tool call: invalid JSON ({_msg(e)})", "")
    try:
        return ParseResult((_call_from_obj(obj, "tool call"),), None, "")
    except ValueError as e:
        return ParseResult((), str(e), "")


_SGLANG_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_sglang_qwen25(text: str, tool_names: frozenset[str] | None = None) -> ParseResult:
    """sglang's Qwen25Detector behind ``FunctionCallParser.parse_non_stream``, then slime's first-call rule.

    A block whose JSON does not load, or whose JSON is not an object (or a
    list of objects), makes sglang raise: slime's adapter reports that as a
    failed parse. A call to an undefined tool is dropped with a warning.
    When the first call's arguments are not an object, slime answers the
    user with the text before the call; that is folded in here.
    """
    names = tool_names or frozenset()
    if "<tool_call>" not in text:
        return ParseResult((), None, text)
    normal = text[: text.find("<tool_call>")].strip()
    calls: list[ToolCall] = []
    dropped: list[str] = []
    for i, body in enumerate(_SGLANG_BLOCK.findall(text)):
        where = f"tool call {i + 1}"
        try:
            obj = jsonbounds.loads(body)
        except ValueError as e:
            msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
            return ParseResult((), f"{where}: invalid JSON ({msg})", text)
        for act in obj if isinstance(obj, list) else [obj]:
            if not isinstance(act, dict):
                raised = f"'{type(act).__name__}' object has no attribute 'get'"
                return ParseResult((), f"{where}: {json_type(act)}, not an object ({raised})", text)
            name = act.get("name")
            if not (name and name in names):
                dropped.append(f"{where}: undefined function {name!r} dropped")
                continue
            raw = act.get("parameters") or act.get("arguments", {})
            if not calls and not isinstance(raw, dict):
                # slime's call_to_action_sglang: first call's arguments not an object -> respond.
                dropped.append(f"{where}: arguments of {name!r} are not a JSON object; the text before it goes to the user")
                return ParseResult((), None, normal, tuple(dropped))
            calls.append(ToolCall(name=str(name), arguments=raw if isinstance(raw, dict) else {"value": raw}))
    if not calls:
        # FunctionCallParser hands back the full text when no call survives.
        return ParseResult((), None, text, tuple(dropped))
    return ParseResult(tuple(calls), None, normal, tuple(dropped))


PARSERS = {"hermes": parse_hermes, "qwen": parse_hermes, "llama3": parse_llama3}


def parse(text: str, parser: str = "hermes", tool_names: frozenset[str] | None = None) -> ParseResult:
    if parser == "sglang-qwen25":
        return parse_sglang_qwen25(text, tool_names)
    return PARSERS[parser](text)


def tool_names(tools: Sequence[dict[str, Any]]) -> frozenset[str]:
    """Names of the tools in OpenAI-style schemas (``{"function": {"name": ...}}`` or ``{"name": ...}``)."""
    out = set()
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else {}
        if isinstance(fn, dict) and fn.get("name"):
            out.add(str(fn["name"]))
    return frozenset(out)
