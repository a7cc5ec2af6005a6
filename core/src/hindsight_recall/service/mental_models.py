"""Mental models and the knowledge base built from them: what is stored, answered as upstream answers it.

A mental model is a reflect answer kept under a name and refreshed by the model: writing or refreshing
one is a model's work, which this server does not do (those routes answer 501). Everything that only
reads or removes what is stored is served, so a client listing them gets an empty list, never an error:
nothing here keeps a mental model, so every one asked for by id is a 404.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._params import bounded_int, path_text
from .base import choice_query, endpoint, existing_bank, text_query, texts_query
from .errors import ServiceError
from .wire import answer

#: why a mental model is never found: none is kept without a model to write it
NONE_KEPT = "mental models are written by a model, and this server keeps none"


@endpoint
async def list_mental_models(request: Request) -> Response:
    """Upstream's filters, checked; the bank's mental models (none). 404 for an unknown bank."""
    texts_query(request, "tags")
    choice_query(request, "tags_match", ("any", "all", "exact"))
    choice_query(request, "detail", ("metadata", "content", "full"))
    limit = bounded_int(request, "limit", 100, minimum=1, maximum=1000)
    offset = bounded_int(request, "offset", 0)
    await existing_bank(request)
    return answer(request, "MentalModelListResponse", {"items": [], "total": 0, "limit": limit, "offset": offset})


@endpoint
async def mental_model(request: Request) -> Response:
    """Read, change, clear, delete one or read its history: there is none to find."""
    await existing_bank(request)
    model_id = path_text(request, "mental_model_id")
    raise ServiceError(404, "mental_model_not_found", f"Mental model '{model_id}' not found ({NONE_KEPT})")


@endpoint
async def knowledge_tree(request: Request) -> Response:
    await existing_bank(request)
    return answer(request, "KnowledgeTreeResponse", {"roots": []})


@endpoint
async def knowledge_export(request: Request) -> Response:
    await existing_bank(request)
    return answer(request, "KnowledgePageBundleResponse", {"files": []})


@endpoint
async def knowledge_search(request: Request) -> Response:
    if text_query(request, "q") is None:
        raise ServiceError(422, "invalid_request", "q: a search query is required")
    bounded_int(request, "limit", 10, minimum=1, maximum=50)
    await existing_bank(request)
    return answer(request, "KnowledgePageSearchResponse", {"results": [], "total": 0})


@endpoint
async def knowledge_node(request: Request) -> Response:
    """A page or a node by id: pages are mental models, and there are none."""
    await existing_bank(request)
    node_id = path_text(request, "page_id" if "page_id" in request.path_params else "node_id")
    raise ServiceError(404, "knowledge_node_not_found", f"Knowledge node '{node_id}' not found ({NONE_KEPT})")


def routes(banks_path: str) -> list[Route]:
    """The reading and removing routes; writing ones are answered 501 by :mod:`.unserved`."""
    models, kb = f"{banks_path}/mental-models", f"{banks_path}/knowledge-base"
    one = f"{models}/{{mental_model_id}}"
    return [
        Route(models, list_mental_models, methods=["GET"]),
        Route(one, mental_model, methods=["GET", "PATCH", "DELETE"]),
        Route(f"{one}/history", mental_model, methods=["GET"]),
        Route(f"{one}/clear", mental_model, methods=["POST"]),
        Route(f"{kb}/tree", knowledge_tree, methods=["GET"]),
        Route(f"{kb}/export", knowledge_export, methods=["GET"]),
        Route(f"{kb}/search", knowledge_search, methods=["GET"]),
        Route(f"{kb}/pages/{{page_id}}", knowledge_node, methods=["GET"]),
        Route(f"{kb}/nodes/{{node_id}}", knowledge_node, methods=["PATCH", "DELETE"]),
    ]
