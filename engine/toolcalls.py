"""Tool-call parsers: turn generated text into tool calls or a parse error.

``hermes`` (Qwen, Hermes and our SmolLM2 template): ``<tool_call>{json}</tool_call>``
blocks. ``llama3``: the whole reply is one JSON object with ``name`` and
``parameters`` (or ``arguments``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .records import ToolCall

_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)


@dataclass(frozen=True)
class ParseResult:
    calls: tuple[ToolCall, ...]
    error: str | None = None
    content: str = ""  # the text outside tool-call blocks


def _call_from_obj(obj: object, where: str) -> ToolCall:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: missing \"name\"")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: \"arguments\" is a string that is not JSON ({e.msg})") from e
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
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            return ParseResult((), f"{where}: invalid JSON ({e.msg} at column {e.colno})", content)
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
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ParseResult((), f"tool call: invalid JSON ({e.msg} at column {e.colno})", "")
    try:
        return ParseResult((_call_from_obj(obj, "tool call"),), None, "")
    except ValueError as e:
        return ParseResult((), str(e), "")


PARSERS = {"hermes": parse_hermes, "qwen": parse_hermes, "llama3": parse_llama3}


def parse(text: str, parser: str = "hermes") -> ParseResult:
    return PARSERS[parser](text)
