"""The console's pages: banks, a bank (profile and settings), recall with its trace, memories,
documents and entities. Each page is one call on the engine (its browsing reads, or the calls the API's
routes make)."""

from __future__ import annotations

import hmac
import uuid
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ...engine.browse import DEFAULT_DISPOSITION, PERIODS
from ...errors import BankNotFound, InvalidRequest
from ...recall.trace import phase_sink
from ...settings import BankSettings, Settings
from ..base import MAX_QUERY_TEXT, bank_of, choice_query, engine_of, int_query, text_query, texts_query
from ..errors import ServiceError
from ..memories import date_range
from ..ops import Admission
from . import operations as ops
from .auth import LOGIN_COOKIE, PREFIX
from .charts import TYPES, ring, stacked_columns
from .render import HERE, Console, redirect, segment
from .story import phase_bars, read_trace, why_not

PAGE_SIZE = 50
#: the dates a memory may be filtered by, as the API's ``time_field``: its label on the page
DATE_FIELDS = {"mentioned_at": "mentioned", "occurred_start": "event starts", "occurred_end": "event ends",
               "created_at": "stored", "updated_at": "updated"}
#: the longest offset a page link may carry (bounded, as the API's are)
MAX_OFFSET = 10_000_000
#: the most entities the entities page draws as a graph (the page's first)
GRAPH_SIZE = 30


def routes(settings: Settings) -> list[BaseRoute]:
    key = settings.service_api_key.get_secret_value() if settings.service_api_key else ""
    console = Console(key, settings.console_session_ttl)
    p = console.page

    async def home(request: Request) -> Response:
        return redirect(f"{PREFIX}/")

    async def login(request: Request) -> Response:
        target = _next(request.query_params.get("next"))
        if request.method == "POST":
            form = await request.form()
            target = _next(str(form.get("next", "")))
            if not key or hmac.compare_digest(str(form.get("key", "")).encode(), key.encode()):
                response = redirect(target)
                if key:
                    console.logins.remember(request, response)
                return response
            return console.render(request, "login.html", 401, next=target, failed=True)
        return console.render(request, "login.html", next=target, failed=False)

    async def logout(request: Request) -> Response:
        await console.log_out(request)
        response = redirect(f"{PREFIX}/login")
        response.delete_cookie(LOGIN_COOKIE, path=PREFIX)
        return response

    async def bank_list(request: Request) -> Response:
        search = text_query(request, "q")
        offset = int_query(request, "offset", 0, MAX_OFFSET)
        page, total = await engine_of(request).browse.banks(search=search, limit=PAGE_SIZE, offset=offset)
        return console.render(request, "banks.html", banks=page, total=total, q=search or "", offset=offset,
                              size=PAGE_SIZE)

    async def bank(request: Request) -> Response:
        return await _bank_page(request, console)

    async def save_profile(request: Request) -> Response:
        bank_id = bank_of(request)
        form = await request.form()
        changes: dict[str, Any] = {"name": str(form.get("name", "")), "mission": str(form.get("mission", ""))}
        disposition = {}
        for trait in DEFAULT_DISPOSITION:
            raw = str(form.get(trait, ""))
            disposition[trait] = int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 3 else raw
        changes["disposition"] = disposition
        try:
            await engine_of(request).banks.write(bank_id, changes, {}, create=False)
        except InvalidRequest as exc:
            return await _bank_page(request, console, error=str(exc), status=422)
        return redirect(f"{PREFIX}/banks/{segment(bank_id)}?saved=profile")

    async def save_config(request: Request) -> Response:
        bank_id = bank_of(request)
        form = await request.form()
        stored = await _overrides(request, bank_id)
        effective = engine_of(request).settings.for_bank(stored).bank_values()
        changes: dict[str, Any] = {}
        for name in BankSettings.model_fields:
            if name in form and str(form[name]) != _shown(effective[name]):
                changes[name] = str(form[name])
        for reset in form.getlist("reset"):
            changes[str(reset)] = None
        if changes:
            try:
                await engine_of(request).banks.configure(bank_id, changes)
            except InvalidRequest as exc:
                return await _bank_page(request, console, error=str(exc), status=422)
        return redirect(f"{PREFIX}/banks/{segment(bank_id)}?saved=settings")

    async def recall(request: Request) -> Response:
        return await _recall_page(request, console)

    async def memories(request: Request) -> Response:
        bank_id = bank_of(request)
        fact_type = choice_query(request, "type", TYPES)
        search, document = text_query(request, "q"), text_query(request, "document")
        tags = [t.strip() for t in (text_query(request, "tag") or "").split(",") if t.strip()]
        entity = text_query(request, "entity", 64)
        offset = int_query(request, "offset", 0, MAX_OFFSET)
        entity_uuid = _uuid(entity) if entity else None
        time_field = choice_query(request, "time_field", tuple(DATE_FIELDS))
        context: dict[str, Any] = dict(
            bank_id=bank_id, offset=offset, size=PAGE_SIZE, types=TYPES, type=fact_type or "", q=search or "",
            document=document or "", tag=", ".join(tags), entity=entity or "", date_fields=DATE_FIELDS,
            time_field=time_field or "", start_date=request.query_params.get("start_date", "")[:64],
            end_date=request.query_params.get("end_date", "")[:64], error=None, rows=[], total=0, more=False,
            entity_label=None)
        try:
            start, end = date_range(request)
        except ServiceError as exc:
            await _overrides(request, bank_id)  # a bank that does not exist is a 404 first
            context["error"] = exc.message
            return console.render(request, "memories.html", 400, **context)
        # a substring search reads no exact total (it would read every memory): one row past the page
        context.update(await engine_of(request).browse.memories(
            bank_id, search=search, limit=PAGE_SIZE, offset=offset, entity_id=entity_uuid, fact_type=fact_type,
            document_id=document, tags=tags or None, tags_match="any_strict", time_field=time_field, start=start,
            end=end))
        return console.render(request, "memories.html", **context)

    async def memory(request: Request) -> Response:
        bank_id = bank_of(request)
        memory_id = request.path_params["memory_id"]
        found, links = await engine_of(request).browse.memory(bank_id, memory_id)
        if found is None:
            return console.render(request, "error.html", 404, title="Not found",
                                  message=f"Bank {bank_id} has no memory {memory_id}.")
        return console.render(request, "memory.html", bank_id=bank_id, m=found, links=links)

    async def links(request: Request) -> Response:
        bank_id = bank_of(request)
        by_type = await engine_of(request).browse.links(bank_id)
        return console.render(request, "links.svg", media_type="image/svg+xml", total=sum(by_type.values()),
                              by_type=by_type)

    async def documents(request: Request) -> Response:
        bank_id = bank_of(request)
        search = text_query(request, "q")
        offset = int_query(request, "offset", 0, MAX_OFFSET)
        rows, total = await engine_of(request).browse.documents(bank_id, search=search, limit=PAGE_SIZE,
                                                                offset=offset)
        return console.render(request, "documents.html", bank_id=bank_id, rows=rows, total=total, q=search or "",
                              offset=offset, size=PAGE_SIZE)

    async def entities(request: Request) -> Response:
        bank_id = bank_of(request)
        search = text_query(request, "q")
        offset = int_query(request, "offset", 0, MAX_OFFSET)
        rows, total, edges = await engine_of(request).browse.entities(bank_id, search=search, limit=PAGE_SIZE,
                                                                      offset=offset, paired=GRAPH_SIZE)
        return console.render(request, "entities.html", bank_id=bank_id, rows=rows, total=total, q=search or "",
                              offset=offset, size=PAGE_SIZE, graph=ring(rows[:GRAPH_SIZE], edges))

    bank_path = f"{PREFIX}/banks/{{bank_id}}"
    return [
        Route(PREFIX, p(home, open_page=True), methods=["GET"]),
        Route(f"{PREFIX}/login", p(login, open_page=True), methods=["GET", "POST"]),
        Route(f"{PREFIX}/logout", p(logout), methods=["POST"]),
        Mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="console-static"),
        Route(f"{PREFIX}/", p(bank_list), methods=["GET"]),
        Route(bank_path, p(bank), methods=["GET"]),
        Route(f"{bank_path}/profile", p(save_profile), methods=["POST"]),
        Route(f"{bank_path}/config", p(save_config), methods=["POST"]),
        Route(f"{bank_path}/recall", p(recall), methods=["GET"]),
        Route(f"{bank_path}/memories", p(memories), methods=["GET"]),
        Route(f"{bank_path}/memories/{{memory_id}}", p(memory), methods=["GET"]),
        Route(f"{bank_path}/links.svg", p(links), methods=["GET"]),
        Route(f"{bank_path}/documents", p(documents), methods=["GET"]),
        Route(f"{bank_path}/entities", p(entities), methods=["GET"]),
        Route(f"{bank_path}/operations", p(lambda r: ops.operation_list(r, console)), methods=["GET"]),
        Route(f"{bank_path}/operations/{{operation_id}}", p(lambda r: ops.operation(r, console)), methods=["GET"]),
        Route(f"{bank_path}/operations/{{operation_id}}/cancel", p(lambda r: ops.cancel(r, console)),
              methods=["POST"]),
        Route(f"{bank_path}/operations/{{operation_id}}/retry", p(lambda r: ops.retry(r, console)),
              methods=["POST"]),
    ]


def _next(target: str | None) -> str:
    """Where to go after the login: a console path only (never another site)."""
    if target and target.startswith(f"{PREFIX}/") and not target.startswith("//") and "\\" not in target:
        return target
    return f"{PREFIX}/"


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidRequest("entity", "must be an entity id (a UUID)", status=400) from None


async def _overrides(request: Request, bank_id: str) -> dict[str, Any]:
    """The bank's setting overrides; 404 for a bank that does not exist (pages never create one)."""
    stored = await engine_of(request).banks.config(bank_id)
    if stored is None:
        raise BankNotFound(bank_id)
    return stored


def _shown(value: Any) -> str:
    """A setting's value as the form shows it (and sends it back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


async def _bank_page(request: Request, console: Console, *, error: str | None = None, status: int = 200) -> Response:
    bank_id = bank_of(request)
    period = choice_query(request, "period", tuple(PERIODS), "30d") or "30d"
    engine = engine_of(request)
    # the links (millions of rows) are counted by the image the page shows (links.svg), after the page
    read = await engine.browse.bank(bank_id, period, datetime.now(UTC))
    overview = read["overview"]
    stats = {"config": read["config"], "entities": read["entities"]}
    effective = engine.settings.for_bank(stats["config"]).bank_values()
    fields = []
    for name, info in BankSettings.model_fields.items():
        choices = None
        literal = getattr(info.annotation, "__args__", None) or ()
        if info.annotation is bool:
            choices = ["true", "false"]
        elif literal and all(isinstance(a, str) for a in literal):
            choices = list(literal)
        fields.append({"name": name, "value": _shown(effective[name]), "overridden": name in stats["config"],
                       "choices": choices})
    return console.render(request, "bank.html", status, bank_id=bank_id, stats={**stats, **overview},
                          profile=read["profile"], fields=fields, chart=stacked_columns(overview["series"]),
                          period=period, periods=list(PERIODS), last_write=overview["last_write"], size=read["size"],
                          error=error,
                          saved=request.query_params.get("saved"), types=TYPES)


async def _recall_page(request: Request, console: Console) -> Response:
    bank_id = bank_of(request)
    engine = engine_of(request)
    query = text_query(request, "query", MAX_QUERY_TEXT)
    form: dict[str, Any] = {
        "query": query or "",
        "budget": choice_query(request, "budget", ("low", "mid", "high"), "mid") or "mid",
        "max_tokens": int_query(request, "max_tokens", 4096, 1_000_000),
        "types": [t for t in texts_query(request, "types") if t] or list(TYPES),
        "tags": text_query(request, "tags") or "",
        "tags_match": choice_query(request, "tags_match", ("any", "all", "any_strict", "all_strict"), "any") or "any",
        "reranking": choice_query(request, "reranking", ("cross_encoder", "rrf", "interleave"),
                                  "cross_encoder") or "cross_encoder",
        "why": text_query(request, "why") or "",
    }
    for t in form["types"]:
        if t not in TYPES:
            raise InvalidRequest("types", f"{t!r} is not one of {', '.join(TYPES)}", status=400)
    fusion = engine.settings.for_bank(await _overrides(request, bank_id)).recall_fusion
    context: dict[str, Any] = {"bank_id": bank_id, "form": form, "types": TYPES, "fusion": fusion, "view": None,
                               "chart": None, "why": None, "error": None}
    if query:
        tags = [t.strip() for t in form["tags"].split(",") if t.strip()]
        metrics = request.app.state.metrics
        try:
            async with Admission(request.app.state.service, engine.settings, metrics):
                token = phase_sink.set(metrics.record_phases)
                try:
                    response = await engine.recall(
                        bank_id, query, budget=form["budget"], max_tokens=form["max_tokens"], types=form["types"],
                        tags=tags or None, tags_match=form["tags_match"], reranking=form["reranking"], trace=True)
                finally:
                    phase_sink.reset(token)
        except InvalidRequest as exc:
            context["error"] = str(exc)
            return console.render(request, "recall.html", 422, **context)
        view = read_trace(response)
        context.update(view=view, chart=phase_bars(view.phases))
        if form["why"]:
            found = await engine.get_memory(bank_id, form["why"])
            context["why"] = why_not(view, found, form["types"], tags)
    return console.render(request, "recall.html", **context)
