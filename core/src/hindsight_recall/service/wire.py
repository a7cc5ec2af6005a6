"""Answers on upstream Hindsight 1.1.0's wire: each body cut to its response schema, as strict clients decode it.

Clients generated from upstream's OpenAPI document with strict decoding refuse any field the schema does
not name, so every answer is shaped by upstream's own schema (``data/upstream_schemas_1.1.0.json``, the
``components.schemas`` of hindsight-api-slim 1.1.0): fields it does not name are left out, and so are
optional fields that are null, as upstream leaves them out. Upstream's row models (list and graph rows)
keep their nulls, as upstream's do.

This project's own fields (a recall's context score and truncation, bank stats' entity and chunk
counts, operations' attempts, the error ``code``…) come only to a caller that asks for them with the
request header ``X-Hindsight-Recall-Extras: 1``: the body is then answered whole, as the handler built it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib.resources import files
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the command line's client imports this module for its header alone: no Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse

#: the request header that asks for this project's fields besides upstream's
EXTRAS_HEADER = "X-Hindsight-Recall-Extras"
#: the header as a client sends it (``httpx.Client(headers=EXTRAS)``)
EXTRAS = {EXTRAS_HEADER: "1"}
_HEADER_KEY = EXTRAS_HEADER.lower().encode()
_YES = frozenset({b"1", b"true", b"yes"})

#: upstream's row models (``OpenRowModel``): rows that were plain dicts once, whose nulls stay on the wire
ROWS_KEEP_NULLS = frozenset({
    "MemoryUnitListItem", "DocumentListItem", "EntityGraphNode", "EntityGraphNodeData", "EntityGraphEdge",
    "EntityGraphEdgeData", "MemoryGraphNode", "MemoryGraphNodeData", "MemoryGraphEdge", "MemoryGraphEdgeData",
    "MemoryGraphTableRow",
})

Schema = Mapping[str, Any]
#: JSON Schema types as Python types (a union member fits a value of its type)
_TYPES: dict[str, Any] = {"array": list, "object": dict, "string": str, "boolean": bool, "integer": int,
                          "number": (int, float)}


@functools.cache
def schemas() -> dict[str, Any]:
    """Upstream 1.1.0's component schemas by name (read once, on the first answer)."""
    text = files("hindsight_recall").joinpath("data/upstream_schemas_1.1.0.json").read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def wants_extras(scope: Mapping[str, Any]) -> bool:
    """Whether the request asked for this project's fields (see the module docstring)."""
    for key, value in scope.get("headers") or ():
        if key == _HEADER_KEY:
            return value.strip().lower() in _YES
    return False


def shape(name: str, body: Any) -> Any:
    """``body`` cut to upstream's schema ``name`` (see the module docstring)."""
    return _shape({"$ref": name}, body, schemas())


def _resolve(node: Schema, table: Mapping[str, Any]) -> tuple[str, Schema]:
    ref = node.get("$ref")
    if ref is None:
        return "", node
    name = ref.rsplit("/", 1)[-1]
    return name, table[name]


def _fits(node: Schema, value: Any, table: Mapping[str, Any]) -> bool:
    """Whether ``value`` can be an instance of the union member ``node`` (for unions of models)."""
    _, node = _resolve(node, table)
    if "properties" in node:
        return isinstance(value, dict) and set(node.get("required", ())) <= value.keys() <= node["properties"].keys()
    return isinstance(value, _TYPES.get(node.get("type", ""), object))


def _shape(node: Schema, value: Any, table: Mapping[str, Any]) -> Any:
    if value is None:
        return None
    name, node = _resolve(node, table)
    if "anyOf" in node or "oneOf" in node:
        choices = [c for c in node.get("anyOf", node.get("oneOf", ())) if c.get("type") != "null"]
        fitting = [c for c in choices if _fits(c, value, table)] if len(choices) > 1 else choices
        return _shape(fitting[0], value, table) if fitting else value
    if "allOf" in node and len(node["allOf"]) == 1:
        return _shape(node["allOf"][0], value, table)
    properties = node.get("properties")
    if properties is not None and isinstance(value, dict):
        required = node.get("required", ())
        keep_nulls = name in ROWS_KEEP_NULLS
        return {key: _shape(properties[key], item, table) for key, item in value.items()
                if key in properties and (item is not None or keep_nulls or key in required)}
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and isinstance(value, dict):
        return {key: _shape(extra, item, table) for key, item in value.items()}
    items = node.get("items")
    if isinstance(items, dict) and isinstance(value, list):
        return [_shape(items, item, table) for item in value]
    return value


def answer(request: Request, name: str | None, body: Any, status_code: int = 200,
           headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The JSON answer of a route whose upstream response schema is ``name``: shaped unless the caller
    asked for extras. ``name`` None marks a route of this project's own (answered whole)."""
    from starlette.responses import JSONResponse

    if name is not None and not wants_extras(request.scope):
        body = shape(name, body)
    return JSONResponse(body, status_code=status_code, headers=headers)
