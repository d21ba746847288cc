"""verl's ToolAgentLoop, the token side: how its prompt, replies and answers become ids.

Each function follows a named piece of verl (``volcengine/verl``):

* ``verl_tool_schema``: ``verl/tools/schemas.py``'s ``OpenAIFunctionToolSchema`` validated and dumped with
  ``model_dump(exclude_unset=True, exclude_none=True)``, as ``ToolAgentLoop`` builds ``tool_schemas``: keys the
  pydantic models do not name (``items``, nested schemas) are gone, key order is the models' field order.
* ``system_prompt_ids``: ``verl/utils/chat_template.py``'s ``initialize_system_prompt``, the length every
  standalone answer render is cut by (measured from one and two empty user turns, without the chat-template
  kwargs).
* ``template_ids``: ``AgentLoopBase.apply_chat_template`` (``agent_loop.py``): messages rendered and tokenized
  with ``add_generation_prompt=True`` and the chat-template kwargs, then cut by the system block when
  ``remove_system_prompt``.
* ``hermes_calls``: ``agent_loop/tool_parser.py``'s ``HermesToolParser.extract_tool_calls``.
* ``truncate_tool_text``: ``ToolAgentLoop._call_tool``'s three truncation sides.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, TemplateError
from .tokenizer import Tokenizer

TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
TOOL_ERROR_PREFIX = "Error when executing tool: "


class SchemaRefused(ConfigError):
    """A tool schema verl's pydantic models would refuse (verl fails when it loads its tools)."""


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise SchemaRefused(f"verl's OpenAIFunctionToolSchema refuses tool schema {where}: {what}")


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def verl_tool_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    """One env tool as verl's ``tool_schema.model_dump(exclude_unset=True, exclude_none=True)`` gives it."""
    name = tool.get("function", {}).get("name", "?") if isinstance(tool.get("function"), Mapping) else "?"
    where = repr(name)
    _need(_is_str(tool.get("type")), where, "'type' must be a string")
    fn = tool.get("function")
    _need(isinstance(fn, Mapping), where, "'function' must be an object")
    assert isinstance(fn, Mapping)
    _need(_is_str(fn.get("name")), where, "function.name must be a string")
    _need(_is_str(fn.get("description")), where, "function.description must be a string")
    params = fn.get("parameters")
    _need(isinstance(params, Mapping), where, "function.parameters must be an object")
    assert isinstance(params, Mapping)
    _need(_is_str(params.get("type")), where, "parameters.type must be a string")
    props = params.get("properties")
    _need(isinstance(props, Mapping), where, "parameters.properties must be an object")
    assert isinstance(props, Mapping)
    req = params.get("required")
    _need(isinstance(req, list) and all(_is_str(r) for r in req), where, "parameters.required must be a list of strings")
    assert isinstance(req, list)
    out_props: dict[str, Any] = {}
    for key, prop in props.items():
        _need(isinstance(prop, Mapping), where, f"property {key!r} must be an object")
        _need(_is_str(prop.get("type")), where, f"property {key!r}: type must be a string")
        p: dict[str, Any] = {"type": prop["type"]}
        desc = prop.get("description")
        if desc is not None:
            _need(_is_str(desc), where, f"property {key!r}: description must be a string")
            p["description"] = desc
        enum = prop.get("enum")
        if enum is not None:
            _need(isinstance(enum, list) and all(_is_str(e) for e in enum), where,
                  f"property {key!r}: enum must be a list of strings")
            p["enum"] = list(enum)
        out_props[str(key)] = p
    function: dict[str, Any] = {
        "name": fn["name"],
        "description": fn["description"],
        "parameters": {"type": params["type"], "properties": out_props, "required": list(req)},
    }
    if fn.get("strict") is not None:
        _need(isinstance(fn["strict"], bool), where, "function.strict must be true or false")
        function["strict"] = fn["strict"]
    return {"type": tool["type"], "function": function}


def verl_tool_schemas(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [verl_tool_schema(t) for t in tools]


def chat_kwargs(config_text: str) -> dict[str, Any]:
    """The ``apply_chat_template_kwargs`` knob (a JSON object) as keyword arguments."""
    try:
        value = json.loads(config_text or "{}")
    except json.JSONDecodeError as e:
        raise ConfigError(f"apply_chat_template_kwargs must be a JSON object, not {config_text!r} ({e.msg})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"apply_chat_template_kwargs must be a JSON object, not {config_text!r}")
    return value


def _ids(out: Any) -> list[int]:
    """Token ids from ``apply_chat_template(tokenize=True)``, which newer transformers wrap in a mapping."""
    if isinstance(out, Mapping) or hasattr(out, "keys"):
        out = out["input_ids"]
    out = list(out)
    if len(out) == 1 and isinstance(out[0], list):
        out = out[0]
    return [int(x) for x in out]


def _apply(tok: Tokenizer, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
           add_generation_prompt: bool, **kwargs: Any) -> list[int]:
    if not getattr(tok, "chat_template", None):
        raise TemplateError(f"tokenizer {getattr(tok, 'name_or_path', '?')!r} has no chat template")
    try:
        out = tok.apply_chat_template([dict(m) for m in messages], tools=list(tools) if tools else None,
                                      add_generation_prompt=add_generation_prompt, tokenize=True, **kwargs)
    except TemplateError:
        raise
    except Exception as e:  # jinja's own exception types
        raise TemplateError(f"the chat template failed to render {len(messages)} messages: {e}") from e
    return _ids(out)


_SYSTEM_CACHE: weakref.WeakKeyDictionary[Any, list[int]] = weakref.WeakKeyDictionary()


def system_prompt_ids(tok: Tokenizer) -> list[int]:
    """``initialize_system_prompt``: the ids one empty user turn renders before the turn itself."""
    try:
        return list(_SYSTEM_CACHE[tok])
    except (KeyError, TypeError):
        pass
    one = _apply(tok, [{"role": "user", "content": ""}], None, False)
    two = _apply(tok, [{"role": "user", "content": ""}] * 2, None, False)
    block = one[: -(len(two) - len(one))]
    try:
        _SYSTEM_CACHE[tok] = list(block)
    except TypeError:
        pass
    return block


def template_ids(tok: Tokenizer, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Mapping[str, Any]] | None = None,
                 kwargs: Mapping[str, Any] | None = None, remove_system_prompt: bool = False) -> list[int]:
    """``AgentLoopBase.apply_chat_template``: rendered with the generation prompt and the chat-template kwargs;
    cut by the system block's measured length when ``remove_system_prompt``."""
    ids = _apply(tok, messages, tools, True, **dict(kwargs or {}))
    if remove_system_prompt:
        ids = ids[len(system_prompt_ids(tok)):]
    return ids


@dataclass(frozen=True)
class HermesCall:
    name: str
    arguments: str
    """The arguments re-dumped by ``json.dumps(..., ensure_ascii=False)``."""


@dataclass(frozen=True)
class HermesDrop:
    text: str
    """The text between the tags."""
    why: str


def hermes_calls(tok: Tokenizer, response_ids: Sequence[int]) -> tuple[list[HermesCall], list[HermesDrop]]:
    """``HermesToolParser.extract_tool_calls``: the reply decoded with special tokens kept; both tags needed;
    a block that is not JSON with ``name`` and ``arguments`` is dropped (verl logs it and goes on)."""
    text = str(tok.decode(list(response_ids)))
    if "<tool_call>" not in text or "</tool_call>" not in text:
        return [], []
    calls: list[HermesCall] = []
    drops: list[HermesDrop] = []
    for block in TOOL_CALL_RE.findall(text):
        try:
            obj = json.loads(block)
        except ValueError as e:
            drops.append(HermesDrop(block, f"not JSON ({e})"))
            continue
        if not isinstance(obj, dict):
            drops.append(HermesDrop(block, f"a JSON {type(obj).__name__}, not an object with name and arguments"))
            continue
        missing = [k for k in ("name", "arguments") if k not in obj]
        if missing:
            drops.append(HermesDrop(block, f"no {' and no '.join(missing)}"))
            continue
        if not isinstance(obj["name"], str):
            drops.append(HermesDrop(block, "name is not a string (FunctionCall refuses it)"))
            continue
        calls.append(HermesCall(obj["name"], json.dumps(obj["arguments"], ensure_ascii=False)))
    return calls, drops


TRUNCATE_SIDES = ("left", "right", "middle")


def truncate_tool_text(text: str, limit: int, side: str) -> str:
    """``_call_tool``'s cut of a tool's text longer than ``max_tool_response_length`` characters."""
    if not text or len(text) <= limit:
        return text
    if side == "left":
        return text[:limit] + "...(truncated)"
    if side == "right":
        return "(truncated)..." + text[-limit:]
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]
