"""The API's routes, upstream Hindsight 1.1.0's paths and shapes: one module per resource family."""

from __future__ import annotations

from starlette.routing import Route

from . import banks, documents, entities, graph, memories

#: every bank-scoped path starts here
BANKS_PATH = "/v1/default/banks/{bank_id}"


def api_routes() -> list[Route]:
    """Every resource family's routes, in matching order."""
    return [*banks.routes(BANKS_PATH), *memories.routes(BANKS_PATH), *documents.routes(BANKS_PATH),
            *entities.routes(BANKS_PATH), *graph.routes(BANKS_PATH)]
