"""Reads that need no bank data: the bank template's JSON Schema, and a bank's attachments (none).

The template schema is upstream's ``BankTemplateManifest`` (its component schemas, as the package keeps
them), so a client validates a manifest here as it would against upstream. Attachments are the files
and images of retained items upstream keeps beside their text; retain here stores text only (a
non-text block is refused), so a bank has none and each one asked for is a 404.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._params import path_text
from .base import endpoint, existing_bank
from .errors import ServiceError
from .wire import schemas

MANIFEST = "BankTemplateManifest"


def template_schema() -> dict[str, Any]:
    """Upstream's manifest schema as one JSON Schema document: the manifest, and what it refers to in ``$defs``."""
    table = schemas()
    needed, todo = set(), [MANIFEST]
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += [ref.rsplit("/", 1)[-1] for ref in _refs(table[name])]
    text = json.dumps({**table[MANIFEST], "title": MANIFEST,
                       "$defs": {n: table[n] for n in sorted(needed - {MANIFEST})}})
    return json.loads(text.replace("#/components/schemas/", "#/$defs/"))  # type: ignore[no-any-return]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [node["$ref"]] if "$ref" in node else [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


@endpoint
async def get_template_schema(request: Request) -> Response:
    return JSONResponse(template_schema())


@endpoint
async def get_attachment(request: Request) -> Response:
    attachment_id = path_text(request, "attachment_id")
    await existing_bank(request)
    raise ServiceError(404, "attachment_not_found", f"Attachment '{attachment_id}' not found (retain stores text "
                                                    "only, so a bank keeps no attachments)")


def routes(banks_path: str) -> list[Route]:
    return [Route("/v1/bank-template-schema", get_template_schema, methods=["GET"]),
            Route(f"{banks_path}/attachments/{{attachment_id}}", get_attachment, methods=["GET"])]
