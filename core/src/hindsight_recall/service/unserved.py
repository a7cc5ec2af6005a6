"""Upstream routes this server does not serve: each answers 501 with a JSON error naming it and why.

Most need an LLM, which this server does not run; webhooks and audit logs need none, but are not
implemented. A client calling one learns that at once, never from a bare 404.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .errors import error_response

NO_LLM = "this server runs no LLM"
B = "/v1/default/banks/{bank_id}"

#: (path, methods, reason): every upstream route answered 501, literal paths before ``{param}`` ones
UNSERVED: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (f"{B}/mental-models", ("GET", "POST"), f"{NO_LLM}; mental models are written by one"),
    (f"{B}/mental-models/{{mental_model_id}}", ("GET", "PATCH", "DELETE"),
     f"{NO_LLM}; mental models are written by one"),
    (f"{B}/mental-models/{{mental_model_id}}/history", ("GET",), f"{NO_LLM}; mental models are written by one"),
    (f"{B}/mental-models/{{mental_model_id}}/refresh", ("POST",), f"{NO_LLM}; mental models are written by one"),
    (f"{B}/mental-models/{{mental_model_id}}/dry-run-refresh", ("POST",),
     f"{NO_LLM}; mental models are written by one"),
    (f"{B}/mental-models/{{mental_model_id}}/clear", ("POST",), f"{NO_LLM}; mental models are written by one"),
    (f"{B}/knowledge-base/tree", ("GET",), f"{NO_LLM}; the knowledge base is built from mental models"),
    (f"{B}/knowledge-base/folders", ("POST",), f"{NO_LLM}; the knowledge base is built from mental models"),
    (f"{B}/knowledge-base/pages", ("POST",), f"{NO_LLM}; the knowledge base is built from mental models"),
    (f"{B}/knowledge-base/export", ("GET",), f"{NO_LLM}; the knowledge base is built from mental models"),
    (f"{B}/knowledge-base/search", ("GET",), f"{NO_LLM}; the knowledge base is built from mental models"),
    (f"{B}/knowledge-base/pages/{{page_id}}", ("GET",), f"{NO_LLM}; the knowledge base is built from mental models"),
    (f"{B}/knowledge-base/nodes/{{node_id}}", ("PATCH", "DELETE"),
     f"{NO_LLM}; the knowledge base is built from mental models"),
    (f"{B}/directives", ("GET", "POST"), f"{NO_LLM}; directives steer reflect's LLM"),
    (f"{B}/directives/{{directive_id}}", ("GET", "PATCH", "DELETE"), f"{NO_LLM}; directives steer reflect's LLM"),
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
    (f"{B}/health/llm", ("POST",), f"{NO_LLM} to probe"),
    (f"{B}/llm-requests", ("GET",), f"{NO_LLM}, so there are no LLM requests to list"),
    (f"{B}/llm-requests/stats", ("GET",), f"{NO_LLM}, so there are no LLM requests to count"),
    (f"{B}/webhooks", ("GET", "POST"), "webhooks are not implemented by this server"),
    (f"{B}/webhooks/{{webhook_id}}", ("PATCH", "DELETE"), "webhooks are not implemented by this server"),
    (f"{B}/webhooks/{{webhook_id}}/deliveries", ("GET",), "webhooks are not implemented by this server"),
    (f"{B}/audit-logs", ("GET",), "audit logs are not implemented by this server"),
    (f"{B}/audit-logs/stats", ("GET",), "audit logs are not implemented by this server"),
    (f"{B}/audit-logs/{{log_id}}", ("GET",), "audit logs are not implemented by this server"),
    (f"{B}/attachments/{{attachment_id}}", ("GET",), "retain stores text only: there are no file attachments"),
    ("/v1/bank-template-schema", ("GET",), "bank templates (mental models, directives, LLM settings) are not "
                                           "implemented by this server"),
)


def _answer(methods: tuple[str, ...], path: str, reason: str) -> Route:
    async def unserved(request: Request) -> Response:
        route = f"{request.method} {path}"
        return error_response(501, "not_implemented", f"{route} is not served: {reason}")

    return Route(path, unserved, methods=list(methods))


def routes() -> list[Route]:
    """One route per row of :data:`UNSERVED`, each answering 501."""
    return [_answer(methods, path, reason) for path, methods, reason in UNSERVED]
