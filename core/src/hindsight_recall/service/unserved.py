"""Upstream routes this server does not serve: each answers 501 with a JSON error naming it and why.

Each needs a model's work, which this server does not do (reflect aside), or a store it does not
keep; the message says which. A client calling one learns that at once, never from a bare 404.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .errors import ServiceError, error_response

NO_LLM = "this server runs no LLM"
#: why the mental-model routes that write are not served
WRITTEN = "mental models are written by a model (a long-lived reflect), which this server does not run"
B = "/v1/default/banks/{bank_id}"

#: (path, methods, reason): every upstream route answered 501, literal paths before ``{param}`` ones
UNSERVED: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (f"{B}/mental-models", ("POST",), f"{WRITTEN}; creating one runs its source query through reflect's agent"),
    (f"{B}/mental-models/{{mental_model_id}}/refresh", ("POST",), f"{WRITTEN}; refreshing one asks the model again"),
    (f"{B}/mental-models/{{mental_model_id}}/dry-run-refresh", ("POST",),
     f"{WRITTEN}; a dry run is the model's answer without storing it"),
    (f"{B}/knowledge-base/pages", ("POST",), f"{WRITTEN}; a knowledge page is a mental model"),
    (f"{B}/knowledge-base/folders", ("POST",), "knowledge-base folders hold mental models, which this server does "
                                               "not keep"),
    (f"{B}/memories/dry-run-extract", ("POST",), f"{NO_LLM}; fact extraction is an LLM step (retain stores items "
                                                 "verbatim)"),
    (f"{B}/prompts/preview", ("POST",), f"{NO_LLM}; there are no LLM prompts to preview"),
    (f"{B}/entities/{{entity_id}}/regenerate", ("POST",), f"{NO_LLM}; entity observations are written by one"),
    (f"{B}/documents/{{document_id}}/reprocess", ("POST",), f"{NO_LLM}; reprocessing re-runs LLM extraction"),
    (f"{B}/files/retain", ("POST",), f"{NO_LLM}; files are converted and extracted by one (retain text items "
                                     "instead)"),
    (f"{B}/consolidate", ("POST",), f"{NO_LLM}; consolidation into observations is an LLM step"),
    (f"{B}/consolidation-strategies/preview", ("POST",), f"{NO_LLM}; consolidation is an LLM step"),
    (f"{B}/consolidation/recover", ("POST",), f"{NO_LLM}; consolidation is an LLM step"),
    (f"{B}/observations", ("DELETE",), f"{NO_LLM}; observations are consolidated by one (delete observation "
                                       "memories with DELETE .../memories?type=observation)"),
    (f"{B}/observations/scopes", ("GET",), f"{NO_LLM}; observation scopes belong to consolidation"),
    (f"{B}/memories/{{memory_id}}/observations", ("DELETE",), f"{NO_LLM}; observations are consolidated by one"),
    (f"{B}/llm-requests", ("GET",), f"{NO_LLM}, so there are no LLM requests to list"),
    (f"{B}/llm-requests/stats", ("GET",), f"{NO_LLM}, so there are no LLM requests to count"),
    (f"{B}/attachments/{{attachment_id}}", ("GET",), "retain stores text only: there are no file attachments"),
    ("/v1/bank-template-schema", ("GET",), "bank templates (mental models, directives, LLM settings) are not "
                                           "implemented by this server"),
)


def _answer(methods: tuple[str, ...], path: str, reason: str) -> Route:
    async def unserved(request: Request) -> Response:
        route = f"{request.method} {path}"
        return error_response(ServiceError(501, "not_implemented", f"{route} is not served: {reason}"), request.scope)

    return Route(path, unserved, methods=list(methods))


def routes() -> list[Route]:
    """One route per row of :data:`UNSERVED`, each answering 501."""
    return [_answer(methods, path, reason) for path, methods, reason in UNSERVED]
