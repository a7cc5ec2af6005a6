"""Asking for JSON and getting it: find the object in a reply, check it, and ask once more when it is unusable.

Every caller that wants structured output from a chat model (reflect's answer, retain's facts) reads
replies the same way: small local models wrap JSON in Markdown fences or prose, and any model can
miss a required field. So the reply is searched for its JSON, checked by the caller, and, when the
caller names a problem, the model sees its own reply and the problem and gets one more try. A
second unusable reply is an :class:`~.errors.LLMOutputError` naming the problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .errors import LLMOutputError
from .types import ChatReply, ChatRequest, Message, Usage

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)


class Checked(Protocol):
    """What a caller makes of one reply: ``problem`` says why it cannot be used (``None``: it can)."""

    @property
    def problem(self) -> str | None: ...


T = TypeVar("T", bound=Checked)
R = TypeVar("R")


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """The usable reading of a reply, what all calls consumed, and how many calls it took (1 or 2)."""

    value: R
    usage: Usage
    calls: int


def json_in(text: str) -> Any:
    """The reply as JSON: itself, inside a Markdown fence, or its outermost ``{...}``; ``None`` if none.

    :param text: the reply's text.
    """
    fenced = _FENCE.match(text)
    candidates = [fenced["body"]] if fenced else []
    candidates.append(text)
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def schema_problem(value: Any, schema: Mapping[str, Any], root: str) -> str | None:
    """Why ``value`` does not fit ``schema`` (the first error, with its path), or ``None`` when it does.

    :param value: the decoded JSON.
    :param schema: a JSON Schema.
    :param root: what the path starts from in the message, e.g. ``structured_output``.
    """
    from jsonschema.validators import validator_for  # only callers that check a reply pay for the import

    validator = validator_for(schema)(schema)
    error = next(iter(sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))), None)
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path)
    return f"{root}{'.' + where if where else ''}: {error.message}"


def cut_off(finish_reason: str | None, setting: str) -> str:
    """A note to add to a problem when the reply stopped at its token limit, naming what to raise.

    :param finish_reason: why the server says generation stopped.
    :param setting: the limit to raise, e.g. ``max_tokens``.
    """
    return f" (the reply was cut off at max_tokens; raise {setting})" if finish_reason in ("length", "max_tokens") \
        else ""


def repair_request(first: ChatRequest, reply: str, problem: str) -> ChatRequest:
    """The first request followed by the model's reply and what was wrong with it, asking once more.

    :param first: the request that got the unusable reply.
    :param reply: that reply's text.
    :param problem: what was wrong with it.
    """
    note = (f"That reply cannot be used: {problem}. Reply again with only the JSON object, fitting the "
            "format and schema above.")
    return ChatRequest(system=first.system, messages=[*first.messages, Message("assistant", reply),
                                                      Message("user", note)],
                       max_tokens=first.max_tokens, json_schema=first.json_schema, schema_name=first.schema_name,
                       temperature=first.temperature)


async def ask_checked(ask: Callable[[ChatRequest], Awaitable[ChatReply]], request: ChatRequest,
                      read: Callable[[ChatReply], T]) -> Outcome[T]:
    """Ask, read the reply, and ask once more with the problem when the reading names one.

    :param ask: sends one request (the provider's ``complete``, or a wrapper that times it).
    :param request: the first request.
    :param read: reads a reply; a result with a ``problem`` triggers the repair.
    :raises LLMOutputError: the repaired reply is unusable too; the message names its problem.
    """
    reply = await ask(request)
    value = read(reply)
    if value.problem is None:
        return Outcome(value, reply.usage, 1)
    repaired = await ask(repair_request(request, reply.text, value.problem))
    value = read(repaired)
    if value.problem is not None:
        raise LLMOutputError(f"the chat model's reply did not have the asked-for form after one repair: "
                             f"{value.problem}")
    return Outcome(value, reply.usage + repaired.usage, 2)
