"""The published JSON Schema (draft 2020-12) of the JSONL episode record, built from the records.

Each record class's fields, their types and the docstring written after each
field in ``conversation.py``, ``episode.py``, ``generation.py``, ``provenance.py`` and ``outcome.py`` (for the loop's knobs, the
``doc`` each knob carries) give the schema's properties and descriptions, so
the schema cannot drift from the code. Literal types become enums. ``rollscope schema`` prints it;
``docs/episode.schema.json`` is a copy that a test keeps equal to it. The
schema describes what ``Episode.to_dict()`` writes: the token arrays become
four top-level lists, enums their values.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import FormatError
from ..presets import LATER_KNOBS, LoopConfig
from . import conversation, episode, generation, outcome, prompts, provenance
from .bounds import within_bounds
from .episode import SCHEMA_VERSION, Episode
from .numbers import nonfinite_positions, spell

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = f"https://rollscope.dev/schema/episode/{SCHEMA_VERSION}.json"

# Keys ``to_dict`` leaves out while they hold their default.
_OMITTED_WHEN_EMPTY = {"Message": {"name", "tool_calls"}, "ToolCall": {"id", "raw_arguments"},
                      "LoopConfig": set(LATER_KNOBS)}
# What the token arrays are written as (``TokenArrays.to_dict``), with what each holds.
_TOKEN_KEYS: dict[str, tuple[dict[str, Any], str]] = {
    "tokens": ({"type": "array", "items": {"type": "integer"}}, "Token ids of the whole episode, prompt included."),
    "loss_mask": ({"type": "array", "items": {"enum": [0, 1]}},
                  "1 where the trainer puts loss (tokens the model generated), 0 elsewhere; one per token."),
    "logprobs": ({"type": "array", "items": {"type": ["number", "null"]}},
                 "Rollout logprob per token; null where unknown (prompt, env and hand-written tokens)."),
    "versions": ({"type": "array", "items": {"type": "integer"}},
                 "Policy version that generated each token; -1 where none."),
    "entropy": ({"type": "array", "items": {"type": ["number", "null"]}},
                "Entropy (nats) of the distribution each token was sampled from, in the logprob convention; null "
                "where unknown (tokens the model did not generate); an empty list when no token has one."),
    "top_ids": ({"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
                "The most likely token ids at each token, most likely first (up to sampling.top_logprobs); an "
                "empty list for a token the model did not generate; an empty list in all when none were recorded."),
    "top_logprobs": ({"type": "array", "items": {"type": "array", "items": {"type": ["number", "null"]}}},
                     "The logprobs of top_ids, entry for entry."),
    "entropy_estimated": ({"type": "boolean"},
                          "Whether some entropy is estimated from a server's top K (a lower bound) rather than exact."),
}


@lru_cache(maxsize=1)
def field_docs() -> dict[str, dict[str, str]]:
    """class name -> field -> the docstring written right after the field in ``episode.py`` or ``provenance.py``."""
    out: dict[str, dict[str, str]] = {
        "LoopConfig": {f.name: " ".join(str(f.metadata.get("doc", "")).split()) for f in dataclasses.fields(LoopConfig)}}
    body = [node for module in (conversation, episode, generation, provenance, outcome)
            for node in ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8")).body]
    for node in body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs: dict[str, str] = {}
        for i, stmt in enumerate(node.body[:-1]):
            nxt = node.body[i + 1]
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = " ".join(nxt.value.value.split())
        out[node.name] = docs
    return out


def _type_schema(t: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(t)
    if t is Any:
        return {}
    if t is str:
        return {"type": "string"}
    if t is bool:
        return {"type": "boolean"}
    if t is int:
        return {"type": "integer"}
    if t is float:
        return {"type": "number"}
    if t is type(None):
        return {"type": "null"}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(t))}
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return {"enum": [m.value for m in t]}
    if dataclasses.is_dataclass(t) and isinstance(t, type):
        _define(t, defs)
        return {"$ref": f"#/$defs/{t.__name__}"}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(a, defs) for a in typing.get_args(t)]}
    if origin in (tuple, list):
        args = typing.get_args(t)
        return {"type": "array", "items": _type_schema(args[0], defs) if args else {}}
    if origin is dict:
        args = typing.get_args(t)
        value = _type_schema(args[1], defs) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
    raise TypeError(f"no JSON Schema for {t!r}")


def _define(cls: type, defs: dict[str, Any]) -> None:
    name = cls.__name__
    if name in defs:
        return
    defs[name] = {}  # placeholder: a record may refer to itself through another
    hints = typing.get_type_hints(cls)
    docs = field_docs().get(name, {})
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        if cls is Episode and f.name == "tokens":
            for key, (schema, doc) in _TOKEN_KEYS.items():
                props[key] = {**schema, "description": doc}
                required.append(key)
            continue
        if f.name not in docs:
            raise TypeError(f"{name}.{f.name} has no docstring: the schema needs one")
        props[f.name] = {**_type_schema(hints[f.name], defs), "description": docs[f.name]}
        if f.name not in _OMITTED_WHEN_EMPTY.get(name, set()):
            required.append(f.name)
    doc = " ".join((cls.__doc__ or "").split())
    defs[name] = {"type": "object", "description": doc, "properties": props, "required": required}
    if cls is LoopConfig:
        defs[name]["additionalProperties"] = False  # an unknown knob is refused on reading


def episode_schema() -> dict[str, Any]:
    """The JSON Schema of one line of a Rollscope JSONL file (``Episode.to_dict()``)."""
    defs: dict[str, Any] = {}
    _define(Episode, defs)
    top = defs.pop("Episode")
    top["properties"]["schema_version"] = {**top["properties"]["schema_version"], "const": SCHEMA_VERSION}
    # Unknown logprobs are written as null (``Generation.to_dict``).
    lp = defs["Generation"]["properties"]["logprobs"]
    defs["Generation"]["properties"]["logprobs"] = {
        "anyOf": [{"type": "array", "items": {"type": ["number", "null"]}}, {"type": "null"}],
        "description": lp["description"]}
    # A later turn's prompt text may be pieces of the turn before it (``records.prompts``).
    pt = defs["Turn"]["properties"]["prompt_text"]
    defs["Turn"]["properties"]["prompt_text"] = {"anyOf": [*pt["anyOf"], {"$ref": "#/$defs/PromptPieces"}],
                                                 "description": pt["description"]}
    defs["PromptPieces"] = {
        "type": "object", "description": prompts.DOC, "required": [prompts.KEY], "additionalProperties": False,
        "properties": {prompts.KEY: {"type": "array", "description": "The pieces, in order.", "items": {"anyOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2}]}}}}
    for key in ("entropy", "top_logprobs"):  # unknown values are written as null
        prop = defs["Generation"]["properties"][key]
        items: dict[str, Any] = {"type": ["number", "null"]}
        if key == "top_logprobs":
            defs["Generation"]["properties"][key] = {"type": "array", "items": {"type": "array", "items": items},
                                                     "description": prop["description"]}
        else:
            defs["Generation"]["properties"][key] = {
                "anyOf": [{"type": "array", "items": items}, {"type": "null"}], "description": prop["description"]}
    return {"$schema": DIALECT, "$id": SCHEMA_ID, "title": "Rollscope episode", **top, "$defs": defs}


@lru_cache(maxsize=1)
def validator() -> Any:
    """A ``jsonschema`` validator of episode records (built once)."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(episode_schema())


def problems(record: dict[str, Any], limit: int = 5) -> list[str]:
    """What in a record disagrees with the schema, each as ``path: message`` (empty when it conforms).

    JSON Schema cannot say that a number is finite (strict JSON has no NaN): a record the schema takes is
    then read as an import reads it, so what import would refuse (a NaN reward) is a problem here too.
    """
    out = []
    for err in sorted(validator().iter_errors(record), key=lambda e: list(e.absolute_path))[:limit]:
        path = ".".join(str(p) for p in err.absolute_path) or "(record)"
        out.append(f"{path}: {err.message}")
    if not out:
        try:
            within_bounds(Episode.from_dict(record, nonfinite=[]))
        except FormatError as e:
            out.append(f"{e.field or '(record)'}: {e.detail}")
    return out


def warnings(record: dict[str, Any]) -> list[str]:
    """What import takes but changes, each as ``path: message``: a logprob that is not a finite number
    (NaN, Infinity), kept as unknown and marked ``logprob_not_finite``."""
    lists: list[tuple[str, Any]] = [("logprobs", record.get("logprobs"))]
    turns = record.get("turns")
    for k, t in enumerate(turns if isinstance(turns, list) else []):
        g = t.get("generation") if isinstance(t, dict) else None
        if isinstance(g, dict):
            lists.append((f"turns.{k}.generation.logprobs", g.get("logprobs")))
    out = []
    for path, values in lists:
        if isinstance(values, list):
            out += [f"{path}.{i}: {spell(values[i])} is not a finite number: import keeps it as unknown (null) and "
                    "marks the token logprob_not_finite" for i in nonfinite_positions(values, unknown="none")
                    if isinstance(values[i], float)]
    return out
