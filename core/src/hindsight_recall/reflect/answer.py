"""Reading the model's reply: the answer, the cited memories (only ones recall returned), structured output.

A reply that is not JSON is taken as the answer itself when no schema was asked for (small local
models often ignore the format); its citations are then the recalled ids it quotes. A reply that
cannot be used at all says why, so that reflect can ask once more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest
from ..llm.structured import cut_off, json_in, schema_problem

#: the JSON Schema types upstream Hindsight accepts for a top-level property of response_schema
PROPERTY_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object"})


@dataclass(frozen=True)
class Answer:
    """What a reply holds; ``problem`` says why it cannot be used (``None``: it can)."""

    text: str = ""
    cited: list[str] = field(default_factory=list)
    structured: dict[str, Any] | None = None
    problem: str | None = None


def check_response_schema(schema: Any) -> dict[str, Any]:
    """Refuse (422) a ``response_schema`` that is no object schema with properties, or no valid JSON Schema.

    :param schema: the request's ``response_schema``.
    """
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    if not isinstance(schema, dict):
        raise InvalidRequest("response_schema", "must be a JSON object")
    if schema.get("type", "object") != "object":
        raise InvalidRequest("response_schema", 'must be an object schema ("type": "object")')
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise InvalidRequest("response_schema", "must define a non-empty 'properties' object")
    for name, prop in properties.items():
        if not isinstance(prop, dict):
            raise InvalidRequest(f"response_schema.properties.{name}", "must be an object")
        if prop.get("type") is not None and prop["type"] not in PROPERTY_TYPES:
            raise InvalidRequest(f"response_schema.properties.{name}.type",
                                 f"{prop['type']!r} is not one of {', '.join(sorted(PROPERTY_TYPES))}")
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise InvalidRequest("response_schema", f"is not a valid JSON Schema: {exc.message}") from None
    return schema


def cited_ids(given: Any, recalled: Sequence[str]) -> list[str]:
    """The cited ids that recall returned, once each, in citation order; anything else is dropped."""
    known = set(recalled)
    if not isinstance(given, list):
        return []
    return list(dict.fromkeys(i for i in given if isinstance(i, str) and i in known))


def read_reply(text: str, recalled: Sequence[str], response_schema: Mapping[str, Any] | None,
               finish_reason: str | None = None) -> Answer:
    """Read one reply.

    :param text: the reply's text.
    :param recalled: the ids of the memories the prompt held.
    :param response_schema: the caller's schema, when structured output was asked for.
    :param finish_reason: the server's reason for stopping, to explain a cut-off reply.
    """
    cut = cut_off(finish_reason, "max_tokens")
    parsed = json_in(text)
    if not isinstance(parsed, dict):
        if response_schema is not None:
            return Answer(problem=f"it is not a JSON object{cut}")
        plain = text.strip()
        if not plain:
            return Answer(problem=f"it is empty{cut}")
        return Answer(plain, [i for i in recalled if i in plain])
    answer = parsed.get("answer", parsed.get("text"))
    if not isinstance(answer, str) or not answer.strip():
        return Answer(problem=f"'answer' must be a non-empty string{cut}")
    cited = cited_ids(parsed.get("memory_ids"), recalled)
    if response_schema is None:
        return Answer(answer.strip(), cited)
    structured = parsed.get("structured_output")
    problem = schema_problem(structured, response_schema, "structured_output") if structured is not None \
        else "'structured_output' is missing"
    if problem is not None:
        return Answer(problem=problem + cut)
    return Answer(answer.strip(), cited, structured)
