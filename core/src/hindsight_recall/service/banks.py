"""Bank routes: list, profile, create and update, delete, stats and per-bank settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import BankNotFound
from ..store import banks
from ..types import FACT_TYPES
from .base import bank_of, body_of, endpoint, engine_of, int_query
from .schemas import BANK_TOGGLES, BankConfigBody, CreateBankBody

#: CreateBankBody fields stored in the bank's profile (``background`` and ``reflect_mission`` are
#: upstream's other names for the mission)
PROFILE_FIELDS = {"name": "name", "mission": "mission", "background": "mission", "reflect_mission": "mission"}
TRAITS = ("skepticism", "literalism", "empathy")


def _profile(profile: dict[str, Any], ignored: list[str] | None = None) -> JSONResponse:
    headers = {"X-Hindsight-Ignored-Fields": ",".join(ignored)} if ignored else None
    return JSONResponse({k: profile[k] for k in ("bank_id", "name", "disposition", "mission", "background")},
                        headers=headers)


def profile_changes(given: dict[str, Any]) -> dict[str, Any]:
    """The profile fields of a create/update body: name, mission (by any of its names), disposition."""
    changes: dict[str, Any] = {PROFILE_FIELDS[k]: v for k, v in given.items() if k in PROFILE_FIELDS}
    traits = dict(given.get("disposition") or {})
    traits.update({t: given[f"disposition_{t}"] for t in TRAITS if f"disposition_{t}" in given})
    if traits:
        changes["disposition"] = traits
    return changes


@endpoint
async def list_banks(request: Request) -> Response:
    engine = engine_of(request)
    found = await engine.list_banks()
    search = (request.query_params.get("q") or "").lower()
    if search:
        found = [b for b in found if search in b["bank_id"].lower()]
    limit, offset = int_query(request, "limit", 100), int_query(request, "offset", 0)
    page = []
    async with engine.db.connect() as conn:
        for b in found[offset:offset + limit]:
            profile = await banks.bank_profile(conn, b["bank_id"]) or {}
            page.append({"bank_id": b["bank_id"], "name": profile.get("name", b["bank_id"]),
                         "disposition": profile.get("disposition", banks.DEFAULT_DISPOSITION),
                         "mission": profile.get("mission") or None, "created_at": b["created_at"],
                         "updated_at": profile.get("updated_at"), "fact_count": b["memories"]})
    return JSONResponse({"banks": page, "total": len(found), "limit": limit, "offset": offset})


@endpoint
async def get_bank(request: Request) -> Response:
    bank_id = bank_of(request)
    async with engine_of(request).db.connect() as conn:
        profile = await banks.bank_profile(conn, bank_id)
    if profile is None:
        raise BankNotFound(bank_id)
    return _profile(profile)


@endpoint
async def put_bank(request: Request) -> Response:
    """Create (or update) a bank: name, mission and disposition go to its profile, the recall toggles to
    its settings; LLM fields are accepted and named in ``X-Hindsight-Ignored-Fields`` (nothing here reads them)."""
    bank_id = bank_of(request)
    body: CreateBankBody = await body_of(request, CreateBankBody)
    given = body.model_dump(exclude_none=True)
    toggles = {k: v for k, v in given.items() if k in BANK_TOGGLES}
    changes = profile_changes(given)
    used = {*toggles, *(k for k in given if k in PROFILE_FIELDS or k.startswith("disposition"))}
    engine = engine_of(request)
    async with engine.db.connect() as conn:
        profile = await banks.set_bank_profile(conn, bank_id, changes)
        if toggles:
            await banks.set_bank_config(conn, bank_id, toggles)
    return _profile(profile, sorted(set(given) - used))


@endpoint
async def delete_bank(request: Request) -> Response:
    bank_id = bank_of(request)
    engine = engine_of(request)
    stats = await engine.bank_stats(bank_id)
    if stats is None or not await engine.delete_bank(bank_id):
        raise BankNotFound(bank_id)
    return JSONResponse({"success": True, "message": f"Bank '{bank_id}' and all associated data deleted successfully",
                         "deleted_count": stats["memories"] + stats["entities"] + stats["documents"]})


@endpoint
async def bank_stats(request: Request) -> Response:
    bank_id = bank_of(request)
    stats = await engine_of(request).bank_stats(bank_id)
    if stats is None:
        raise BankNotFound(bank_id)
    by_type = {t: stats["by_type"].get(t, 0) for t in FACT_TYPES}
    return JSONResponse({
        "bank_id": bank_id, "total_nodes": stats["memories"], "total_links": stats["links"],
        "total_documents": stats["documents"], "nodes_by_fact_type": by_type, "links_by_link_type": {},
        "links_by_fact_type": {}, "links_breakdown": {}, "pending_operations": 0, "failed_operations": 0,
        "operations_by_status": {}, "pending_consolidation": 0, "failed_consolidation": 0,
        "total_observations": by_type["observation"],
        # ours: what the bank holds in this project's own terms
        "entities": stats["entities"], "chunks": stats["chunks"],
    })


async def _config(request: Request, change: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Response:
    """The bank's settings and overrides, after storing ``change(overrides)`` when given; 404 for no bank."""
    bank_id = bank_of(request)
    engine = engine_of(request)
    async with engine.db.connect() as conn:
        overrides = await banks.bank_config(conn, bank_id)
        if overrides is None:
            raise BankNotFound(bank_id)
        if change is not None:
            overrides = await banks.set_bank_config(conn, bank_id, change(overrides))
    resolved = {**engine.settings.bank_values(), **overrides}
    return JSONResponse({"bank_id": bank_id, "config": resolved, "overrides": overrides})


@endpoint
async def get_config(request: Request) -> Response:
    return await _config(request)


@endpoint
async def patch_config(request: Request) -> Response:
    """Keys as field names or ``HINDSIGHT_API_*`` names; a null value removes an override."""
    body: BankConfigBody = await body_of(request, BankConfigBody)
    values = {k.strip().lower().removeprefix("hindsight_api_"): v for k, v in body.updates.items()}
    return await _config(request, lambda _: values)


@endpoint
async def reset_config(request: Request) -> Response:
    """Remove every override of the bank: it follows the server's settings again."""
    return await _config(request, dict.fromkeys)


def routes(banks_path: str) -> list[Route]:
    return [
        Route("/v1/default/banks", list_banks, methods=["GET"]),
        Route(banks_path, get_bank, methods=["GET"]),
        Route(f"{banks_path}/profile", get_bank, methods=["GET"]),
        Route(banks_path, put_bank, methods=["PUT"]),
        Route(banks_path, delete_bank, methods=["DELETE"]),
        Route(f"{banks_path}/stats", bank_stats, methods=["GET"]),
        Route(f"{banks_path}/config", get_config, methods=["GET"]),
        Route(f"{banks_path}/config", patch_config, methods=["PATCH"]),
        Route(f"{banks_path}/config", reset_config, methods=["DELETE"]),
    ]
