"""What core hands a chat model and what it gets back: provider-neutral, so prompts are written once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Message:
    """One turn of the conversation after the system prompt."""

    role: Role
    content: str


@dataclass(frozen=True)
class ChatRequest:
    """One completion to ask for.

    :param system: the system prompt.
    :param messages: the turns, user first.
    :param max_tokens: the most tokens the reply may have.
    :param json_schema: when set, the reply must be one JSON object fitting this JSON Schema; the
        provider asks its server for JSON in whatever way the server supports.
    :param schema_name: a short name for the schema, for servers that want one.
    :param temperature: sampling temperature (``None``: the server's default).
    """

    system: str
    messages: Sequence[Message]
    max_tokens: int
    json_schema: Mapping[str, Any] | None = None
    schema_name: str = "answer"
    temperature: float | None = None


@dataclass(frozen=True)
class Usage:
    """Tokens one or more calls consumed, in upstream Hindsight's ``TokenUsage`` fields."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    thoughts_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cached_tokens + other.cached_tokens, self.thoughts_tokens + other.thoughts_tokens)

    def as_json(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens, "cached_tokens": self.cached_tokens,
                "thoughts_tokens": self.thoughts_tokens}


@dataclass(frozen=True)
class ChatReply:
    """The model's reply: its text (JSON text when a schema was asked for) and what it cost."""

    text: str
    usage: Usage = field(default_factory=Usage)
    #: the model the server says answered, when it says
    model: str | None = None
    #: why generation stopped, as the server says it (``stop``, ``length``, ``max_tokens`` ...)
    finish_reason: str | None = None


def as_int(value: Any) -> int:
    """A token count from a usage block; anything but a non-negative integer counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
