"""The API's routes, upstream Hindsight 1.1.0's paths and shapes: one module per resource family."""

from __future__ import annotations

from starlette.routing import Route

from . import (
    aliases,
    audit,
    banks,
    directives,
    documents,
    entities,
    extraction,
    files,
    graph,
    memories,
    mental_models,
    observations,
    operations,
    reflect,
    templates,
    transfer,
    unserved,
    webhooks,
)

#: every bank-scoped path starts here
BANKS_PATH = "/v1/default/banks/{bank_id}"


def api_routes() -> list[Route]:
    """Every resource family's routes, in matching order; the 501 answers last, so a served route wins."""
    return [*banks.routes(BANKS_PATH), *memories.routes(BANKS_PATH), *aliases.routes(BANKS_PATH),
            *transfer.routes(BANKS_PATH), *reflect.routes(BANKS_PATH), *documents.routes(BANKS_PATH),
            *entities.routes(BANKS_PATH), *graph.routes(BANKS_PATH), *operations.routes(BANKS_PATH),
            *directives.routes(BANKS_PATH), *mental_models.routes(BANKS_PATH), *webhooks.routes(BANKS_PATH),
            *audit.routes(BANKS_PATH), *templates.routes(BANKS_PATH),
            *observations.routes(BANKS_PATH), *extraction.routes(BANKS_PATH), *files.routes(BANKS_PATH),
            *unserved.routes()]

