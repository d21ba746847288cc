"""The conversation an episode holds: chat messages, the tool calls in them, and the actions an env is stepped with.

``Message.to_template`` is what a Hugging Face chat template receives. A tool call whose arguments are not a JSON
object keeps them as written (``ToolCall.raw_arguments``), so the template renders what the model wrote.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from .reading import Fields
from .textsafe import json_safe

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = typing.get_args(Role)


@dataclass(frozen=True)
class ToolCall:
    """A call the model made to one of the tools."""

    name: str
    """The function the model called."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """Its arguments, parsed from the model's JSON."""
    id: str | None = None
    """The call id an OpenAI-style API gave it, if any."""
    raw_arguments: str | None = None
    """The arguments as the model wrote them, where they are not a JSON object (``arguments`` is then empty and the
    turn holds a parse error); the chat template renders them as written. Null for arguments that parsed."""

    @property
    def wire_arguments(self) -> dict[str, Any] | str:
        """The arguments as a chat template or an OpenAI-style API takes them: the object, or the text as written."""
        return self.raw_arguments if self.raw_arguments is not None else self.arguments

    def arguments_json(self) -> str:
        """The arguments as the JSON string OpenAI's ``function.arguments`` holds (the text as written, if unparsed)."""
        if self.raw_arguments is not None:
            return self.raw_arguments
        return json.dumps(self.arguments, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "arguments": json_safe(self.arguments)}
        if self.id is not None:
            d["id"] = self.id
        if self.raw_arguments is not None:
            d["raw_arguments"] = self.raw_arguments
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolCall:
        return cls.from_fields(Fields(d))

    @classmethod
    def from_fields(cls, f: Fields) -> ToolCall:
        return cls(name=f.text("name"), arguments=f.obj("arguments"), id=f.text_or_none("id") if f.has("id") else None,
                   raw_arguments=f.text_or_none("raw_arguments") if f.has("raw_arguments") else None)


@dataclass(frozen=True)
class Message:
    """One chat message, as handed to the chat template."""

    role: Role
    """system, user, assistant or tool."""
    content: str
    """The message text as the chat template receives it."""
    name: str | None = None
    """A tool message's tool name (or a participant's name), if any."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls of an assistant message."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            d["name"] = self.name
        if self.tool_calls:
            d["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        return d

    def to_template(self) -> dict[str, Any]:
        """The dict a Hugging Face chat template expects."""
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            d["name"] = self.name
        if self.tool_calls:
            d["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.wire_arguments}}
                for c in self.tool_calls
            ]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        return cls.from_fields(Fields(d))

    @classmethod
    def from_fields(cls, f: Fields) -> Message:
        return cls(
            role=typing.cast(Role, f.choice("role", ROLES)),
            content=f.text("content"),
            name=f.text_or_none("name") if f.has("name") else None,
            tool_calls=tuple(ToolCall.from_fields(c) for c in f.subs("tool_calls")) if f.has("tool_calls") else (),
        )


RESPOND = "respond"


@dataclass(frozen=True)
class Action:
    """What the agent does in the env: a tool call, or ``respond`` with text."""

    name: str
    """The tool called, or ``respond`` for text meant for the user."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """The tool's arguments."""
    text: str = ""
    """The text of a ``respond`` action."""

    @property
    def is_respond(self) -> bool:
        return self.name == RESPOND

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": json_safe(self.arguments), "text": self.text}

    @classmethod
    def from_fields(cls, f: Fields) -> Action:
        return cls(name=f.text("name"), arguments=f.obj("arguments"), text=f.text("text"))
