"""Entity routes: list a bank's entities, get one with the memories that mention it, and the graph
of entities mentioned together."""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..limits import INT32_MAX
from ._params import bounded_int, path_text, tags_match_query, tags_query
from .base import bank_of, endpoint, engine_of, text_query
from .errors import ServiceError
from .wire import answer

#: the most entities, memories or edges one answer holds
MAX_PAGE = 10_000


@endpoint
async def list_entities(request: Request) -> Response:
    """Most mentioned first; ``q`` (ours: upstream's route has none) keeps names holding it."""
    bank_id = bank_of(request)
    search, tags = text_query(request, "q"), tags_query(request)
    tags_match = tags_match_query(request, "any")
    limit, offset = bounded_int(request, "limit", 100, maximum=MAX_PAGE), bounded_int(request, "offset", 0)
    page = await engine_of(request).entities.page(bank_id, search=search, tags=tags, tags_match=tags_match,
                                                  limit=limit, offset=offset)
    return answer(request, "EntityListResponse", page)


@endpoint
async def get_entity(request: Request) -> Response:
    """Upstream's entity detail (its ``observations`` are LLM summaries: none here) plus ``memories``
    (ours): the memories that mention it, most recent first, at most ``limit``."""
    bank_id, raw = bank_of(request), path_text(request, "entity_id")
    try:
        entity_id = uuid.UUID(raw)
    except ValueError:
        raise ServiceError(400, "invalid_request", f"entity_id: {raw[:60]!r} is not a valid UUID") from None
    tags, tags_match = tags_query(request), tags_match_query(request, "any")
    limit = bounded_int(request, "limit", 100, maximum=MAX_PAGE)
    found = await engine_of(request).entities.get(bank_id, entity_id, tags=tags, tags_match=tags_match,
                                                  memories=limit)
    if found is None:
        raise ServiceError(404, "entity_not_found", f"Entity {raw} not found")
    return answer(request, "EntityDetailResponse", found)


@endpoint
async def entity_graph(request: Request) -> Response:
    bank_id = bank_of(request)
    limit = bounded_int(request, "limit", 1000, maximum=MAX_PAGE)
    min_count = bounded_int(request, "min_count", 1, minimum=-INT32_MAX, maximum=INT32_MAX)
    tags, tags_match = tags_query(request), tags_match_query(request, "any")
    graph = await engine_of(request).entities.graph(bank_id, limit=limit, min_count=min_count, tags=tags,
                                                    tags_match=tags_match)
    return answer(request, "EntityGraphResponse", graph)


#: upstream's answer to its deprecated route, for any bank and entity
REGENERATE_GONE = "This endpoint is deprecated. Entity observations are no longer supported."


@endpoint
async def regenerate_entity(request: Request) -> Response:
    """Upstream's deprecated regeneration of an entity's observations: 410 there, whatever is asked, and here."""
    raise ServiceError(410, "gone", REGENERATE_GONE)


def routes(banks_path: str) -> list[Route]:
    """``entities/graph`` before ``entities/{entity_id}``."""
    return [
        Route(f"{banks_path}/entities", list_entities, methods=["GET"]),
        Route(f"{banks_path}/entities/graph", entity_graph, methods=["GET"]),
        Route(f"{banks_path}/entities/{{entity_id}}", get_entity, methods=["GET"]),
        Route(f"{banks_path}/entities/{{entity_id}}/regenerate", regenerate_entity, methods=["POST"]),
    ]
