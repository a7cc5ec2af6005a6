"""Our request models and routes against upstream Hindsight 1.1.0's OpenAPI document.

``upstream_openapi_1.1.0.json`` is ``app.openapi()`` of ``hindsight-api-slim==1.1.0``: every operation's
response schemas and request body, and every component schema (descriptions and examples left out).
tests/test_service_wire.py checks the answers against it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hindsight_recall.service import schemas
from pydantic import BaseModel

UPSTREAM = json.loads((Path(__file__).parent / "upstream_openapi_1.1.0.json").read_text())

#: request models and the fields they add to upstream's (documented in docs/service.md)
REQUESTS: dict[str, tuple[type[BaseModel], set[str]]] = {
    "RecallRequest": (schemas.RecallBody, {"limit", "reranking"}),
    "MemoryItem": (schemas.MemoryItem, set()),
    "RetainRequest": (schemas.RetainBody, set()),
    "CreateBankRequest": (schemas.CreateBankBody, set()),
    "IncludeOptions": (schemas.IncludeOptions, set()),
    "EntityIncludeOptions": (schemas.EntityIncludeOptions, set()),
    "ChunkIncludeOptions": (schemas.ChunkIncludeOptions, set()),
    "SourceFactsIncludeOptions": (schemas.SourceFactsIncludeOptions, set()),
    "MinScores": (schemas.MinScores, set()),
    "TemporalWindow": (schemas.TemporalWindow, set()),
    "EntityInput": (schemas.EntityInput, set()),
    "BankConfigUpdate": (schemas.BankConfigBody, set()),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_request_fields_are_upstreams(name: str) -> None:
    model, ours = REQUESTS[name]
    fields = {field.alias or key for key, field in model.model_fields.items()}
    assert fields - ours == set(UPSTREAM["schemas"][name]["properties"])
    required = {field.alias or key for key, field in model.model_fields.items() if field.is_required()}
    assert required == set(UPSTREAM["schemas"][name].get("required", ()))


def test_upstream_defaults() -> None:
    body = schemas.RecallBody(query="q")
    assert (body.budget.value, body.max_tokens, body.trace, body.tags_match.value) == ("mid", 4096, False, "any")
    assert body.include.entities is not None and body.include.entities.max_tokens == 500
    assert body.include.chunks is None and body.include.source_facts is None
    assert schemas.SourceFactsIncludeOptions().max_tokens == 4096
    assert schemas.ChunkIncludeOptions().max_tokens == 8192


def test_every_upstream_route_we_serve_is_there(tmp_path: Path) -> None:
    from hindsight_recall.service.app import create_app
    from hindsight_recall.settings import load_settings

    app = create_app(load_settings(embedded_data_dir=tmp_path / "pg", reranker_provider="rrf"))
    served: dict[str, set[str]] = {}
    for route in app.state.routes:
        path = route.path.replace(":path}", "}")  # ids that may hold "/" are typed in our paths only
        served.setdefault(path, set()).update(m.lower() for m in route.methods or ())
    for path, methods in UPSTREAM["paths"].items():
        for method in methods:
            assert method in served.get(path, set()), f"{method.upper()} {path}"
