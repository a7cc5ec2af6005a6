"""Observation routes that need no model: clear a bank's observations, clear those built on one memory,
and list the scopes (tag sets) observations live under.

Observations here are the ones a bank was given (imported, with their sources); consolidating new ones
is a model's work this server does not do. Clearing them is a forget, as ``DELETE .../memories`` is.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._params import bounded_int, path_text
from .base import bank_of, endpoint, engine_of
from .errors import ServiceError
from .wire import answer


@endpoint
async def clear_observations(request: Request) -> Response:
    """Delete every observation of the bank (its other memories stay); an unknown bank clears none."""
    bank_id = bank_of(request)
    deleted = await engine_of(request).clear_memories(bank_id, "observation")
    return answer(request, "DeleteResponse", {"success": True, "deleted_count": deleted,
                                              "message": f"Cleared {deleted} observation(s) from bank '{bank_id}'"})


@endpoint
async def clear_memory_observations(request: Request) -> Response:
    """Delete the observations built on one memory (those that name it among their sources)."""
    bank_id, memory_id = bank_of(request), path_text(request, "memory_id")
    engine = engine_of(request)
    found = await engine.observations.built_on(bank_id, memory_id)
    if found is None:
        raise ServiceError(404, "memory_not_found", f"Memory unit '{memory_id}' not found in bank {bank_id!r}")
    deleted = await engine.forget(bank_id, found) if found else 0
    return answer(request, "ClearMemoryObservationsResponse", {"deleted_count": deleted})


@endpoint
async def observation_scopes(request: Request) -> Response:
    """Each distinct tag set the bank's observations carry (sorted; ``[]`` the untagged scope), with how
    many carry it, most first; 404 for an unknown bank."""
    bank_id = bank_of(request)
    limit, offset = bounded_int(request, "limit", 100, maximum=1000), bounded_int(request, "offset", 0)
    scopes, total = await engine_of(request).observations.scopes(bank_id, limit, offset)
    return answer(request, "ObservationScopesResponse", {"scopes": scopes, "total": total, "limit": limit,
                                                         "offset": offset})


def routes(banks_path: str) -> list[Route]:
    return [
        Route(f"{banks_path}/observations", clear_observations, methods=["DELETE"]),
        Route(f"{banks_path}/observations/scopes", observation_scopes, methods=["GET"]),
        Route(f"{banks_path}/memories/{{memory_id}}/observations", clear_memory_observations, methods=["DELETE"]),
    ]
