"""Bank routes: list, profile, create and update, delete, stats, ingestion over time and per-bank settings."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine.banks import PERIODS, SERIES_FIELDS
from ..errors import BankNotFound
from ..types import FACT_TYPES
from .base import bank_of, body_of, endpoint, engine_of, int_query, text_query
from .schemas import BANK_CONFIG, BackgroundBody, BankConfigBody, CreateBankBody, DispositionBody
from .wire import answer

#: CreateBankBody fields stored in the bank's profile (``background`` and ``reflect_mission`` are
#: upstream's other names for the mission)
PROFILE_FIELDS = {"name": "name", "mission": "mission", "background": "mission", "reflect_mission": "mission"}
TRAITS = ("skepticism", "literalism", "empathy")


def _profile(request: Request, profile: dict[str, Any], ignored: list[str] | None = None) -> Response:
    headers = {"X-Hindsight-Ignored-Fields": ",".join(ignored)} if ignored else None
    return answer(request, "BankProfileResponse", {
        k: profile[k] for k in ("bank_id", "name", "disposition", "mission", "background")}, headers=headers)


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
    """Upstream's bank list: most recently written first, profiles and counts in one statement."""
    search = text_query(request, "q")
    limit, offset = int_query(request, "limit", 100), int_query(request, "offset", 0)
    page, total = await engine_of(request).banks.page(search=search, limit=limit, offset=offset)
    return answer(request, "BankListResponse", {"banks": page, "total": total, "limit": limit, "offset": offset})


@endpoint
async def get_bank(request: Request) -> Response:
    bank_id = bank_of(request)
    profile = await engine_of(request).banks.profile(bank_id)
    if profile is None:
        raise BankNotFound(bank_id)
    return _profile(request, profile)


async def _write_bank(request: Request, create: bool) -> Response:
    """Store a create/update body: name, mission and disposition go to the bank's profile, the recall
    toggles and retain's extraction fields to its settings; the others (observations, attachments,
    structured chunks) are accepted and named in ``X-Hindsight-Ignored-Fields`` (nothing here reads
    them). Without ``create``, an unknown bank is a 404 (upstream's PATCH)."""
    bank_id = bank_of(request)
    body: CreateBankBody = await body_of(request, CreateBankBody)
    given = body.model_dump(exclude_none=True)
    config = {k: v for k, v in given.items() if k in BANK_CONFIG}
    changes = profile_changes(given)
    used = {*config, *(k for k in given if k in PROFILE_FIELDS or k.startswith("disposition"))}
    profile = await engine_of(request).banks.write(bank_id, changes, config, create=create)
    return _profile(request, profile, sorted(set(given) - used))


@endpoint
async def put_bank(request: Request) -> Response:
    """Create or update a bank (upstream's ``create_or_update_bank``)."""
    return await _write_bank(request, create=True)


@endpoint
async def patch_bank(request: Request) -> Response:
    """Update a bank that exists (upstream's ``update_bank``): only the fields given change."""
    return await _write_bank(request, create=False)


@endpoint
async def put_profile(request: Request) -> Response:
    """Set the disposition traits (upstream's older ``update_bank_disposition``; it creates the bank)."""
    bank_id = bank_of(request)
    body: DispositionBody = await body_of(request, DispositionBody)
    profile = await engine_of(request).banks.set_profile(bank_id, {"disposition": body.disposition.model_dump()})
    return _profile(request, profile)


@endpoint
async def add_background(request: Request) -> Response:
    """Upstream's older ``add_bank_background``: the text is appended to the bank's mission (a new
    paragraph), which is what the background became; the bank is created if needed."""
    bank_id = bank_of(request)
    body: BackgroundBody = await body_of(request, BackgroundBody)
    profile = await engine_of(request).banks.add_background(bank_id, body.content)
    return answer(request, "BackgroundResponse", {"mission": profile["mission"], "background": profile["mission"],
                                                  "disposition": profile["disposition"]})


@endpoint
async def delete_bank(request: Request) -> Response:
    """Delete a bank with everything in it; as upstream, a bank that does not exist deletes nothing (200)."""
    bank_id = bank_of(request)
    engine = engine_of(request)
    stats = await engine.bank_stats(bank_id)
    deleted = 0
    if stats is not None and await engine.delete_bank(bank_id):
        deleted = stats["memories"] + stats["entities"] + stats["documents"]
    return answer(request, "DeleteResponse", {
        "success": True, "message": f"Bank '{bank_id}' and all associated data deleted successfully",
        "deleted_count": deleted})


@endpoint
async def bank_stats(request: Request) -> Response:
    bank_id = bank_of(request)
    engine = engine_of(request)
    stats = await engine.bank_stats(bank_id)
    if stats is None:
        raise BankNotFound(bank_id)
    activity = await engine.banks.activity(bank_id)
    by_type = {t: stats["by_type"].get(t, 0) for t in FACT_TYPES}
    return answer(request, "BankStatsResponse", {
        "bank_id": bank_id, "total_nodes": stats["memories"], "total_links": stats["links"],
        "total_documents": stats["documents"], "nodes_by_fact_type": by_type,
        "links_by_link_type": activity["links_by_type"],
        # not computed: a join of every link with its memory, too dear for a stats call on a large bank
        "links_by_fact_type": {}, "links_breakdown": {},
        "pending_operations": 0, "failed_operations": 0, "operations_by_status": {},
        "last_consolidated_at": None, "last_memory_write_at": activity["last_write"],
        "pending_consolidation": 0, "failed_consolidation": 0, "total_observations": by_type["observation"],
        # ours: what the bank holds in this project's own terms
        "entities": stats["entities"], "chunks": stats["chunks"],
    })


@endpoint
async def memories_timeseries(request: Request) -> Response:
    """Memories stored per time bucket and fact type. As upstream, an unknown ``period`` reads as ``7d``
    and an unknown ``time_field`` as ``created_at``; an unknown bank is a 404."""
    bank_id = bank_of(request)
    period = text_query(request, "period") or "7d"
    period = period if period in PERIODS else "7d"
    time_field = text_query(request, "time_field") or "created_at"
    time_field = time_field if time_field in SERIES_FIELDS else "created_at"
    buckets = await engine_of(request).banks.timeseries(bank_id, period, time_field)
    return answer(request, "MemoriesTimeseriesResponse", {
        "bank_id": bank_id, "period": period, "trunc": PERIODS[period][0], "time_field": time_field,
        "buckets": buckets})


def _config(request: Request, bank_id: str, overrides: dict[str, Any] | None) -> Response:
    """The bank's settings (the server's with its overrides) and its overrides; 404 for no bank."""
    if overrides is None:
        raise BankNotFound(bank_id)
    resolved = {**engine_of(request).settings.bank_values(), **overrides}
    return answer(request, "BankConfigResponse", {"bank_id": bank_id, "config": resolved, "overrides": overrides})


@endpoint
async def get_config(request: Request) -> Response:
    bank_id = bank_of(request)
    return _config(request, bank_id, await engine_of(request).banks.config(bank_id))


@endpoint
async def patch_config(request: Request) -> Response:
    """Keys as field names or ``HINDSIGHT_API_*`` names; a null value removes an override."""
    body: BankConfigBody = await body_of(request, BankConfigBody)
    bank_id = bank_of(request)
    values = {k.strip().lower().removeprefix("hindsight_api_"): v for k, v in body.updates.items()}
    return _config(request, bank_id, await engine_of(request).banks.configure(bank_id, values, create=False))


@endpoint
async def reset_config(request: Request) -> Response:
    """Remove every override of the bank: it follows the server's settings again."""
    bank_id = bank_of(request)
    return _config(request, bank_id, await engine_of(request).banks.reset_config(bank_id))


def routes(banks_path: str) -> list[Route]:
    return [
        Route("/v1/default/banks", list_banks, methods=["GET"]),
        Route(banks_path, get_bank, methods=["GET"]),
        Route(f"{banks_path}/profile", get_bank, methods=["GET"]),
        Route(f"{banks_path}/profile", put_profile, methods=["PUT"]),
        Route(f"{banks_path}/background", add_background, methods=["POST"]),
        Route(banks_path, put_bank, methods=["PUT"]),
        Route(banks_path, patch_bank, methods=["PATCH"]),
        Route(banks_path, delete_bank, methods=["DELETE"]),
        Route(f"{banks_path}/stats", bank_stats, methods=["GET"]),
        Route(f"{banks_path}/stats/memories-timeseries", memories_timeseries, methods=["GET"]),
        Route(f"{banks_path}/config", get_config, methods=["GET"]),
        Route(f"{banks_path}/config", patch_config, methods=["PATCH"]),
        Route(f"{banks_path}/config", reset_config, methods=["DELETE"]),
    ]
