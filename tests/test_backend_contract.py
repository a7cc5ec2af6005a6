"""A third-party backend's install statements, own bound parameters and query terms, live on the embedded server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hindsight_recall import Engine, load_settings
from hindsight_recall.errors import ConfigError
from hindsight_recall.protocols import KeywordQuery
from hindsight_recall.textsearch import INDEX, query_terms
from sqlalchemy import text

Run = Callable[[Awaitable[Any]], Any]
CONFIG = "CAST(:versioned_config AS regconfig)"


class VersionedBackend:
    """'simple' tsvector search whose install statement (a function) changes between releases."""

    name = "versioned"
    citus_compatible = True
    supports_cjk = False

    def __init__(self, version: int, params: dict[str, Any] | None = None) -> None:
        self.version = version
        self.params = {"versioned_config": "simple"} if params is None else params

    def install_statements(self) -> Sequence[str]:
        return (f"CREATE OR REPLACE FUNCTION versioned_release() RETURNS int LANGUAGE sql AS 'SELECT {self.version}'",)

    def session_statements(self) -> Sequence[str]:
        return ()

    def parameters(self) -> dict[str, Any]:
        return self.params

    def column_type(self) -> str:
        return "tsvector"

    def index_statements(self) -> Sequence[str]:
        return (f"CREATE INDEX IF NOT EXISTS {INDEX} ON memory_units USING gin (search_vector)",)

    def prepare_document(self, document: str) -> str:
        return document

    def write_expression(self, document_sql: str) -> str:
        return f"to_tsvector({CONFIG}, {document_sql})"

    async def prepare_query(self, query: str, tokens: Sequence[str], conn: Any) -> KeywordQuery | None:
        terms = query_terms(tokens)
        return KeywordQuery(" | ".join(f"'{t}'" for t in terms), tuple(terms)) if terms else None

    def arm_sql(self, *, columns: str, where: str) -> str:
        match = f"to_tsquery({CONFIG}, :query_text)"
        # the score is the number of bound terms the row holds: it reads :query_terms, not the text
        score = (f"(SELECT count(*) FROM unnest(CAST(:query_terms AS text[])) AS t(term) "
                 f"WHERE search_vector @@ to_tsquery({CONFIG}, quote_literal(t.term)))::float8")
        return (f"(SELECT {columns}, {score} AS bm25_score FROM memory_units WHERE {where} "
                f"AND search_vector @@ {match} AND {score} >= :min_score ORDER BY bm25_score DESC, id LIMIT :limit)")


def settings(tmp_path: Path) -> Any:
    return load_settings(database_url=None, embedded_data_dir=tmp_path / "data", reranker_provider="rrf")


def test_install_statements_run_at_every_start(tmp_path: Path, hr_run: Run) -> None:
    """A new release of a backend's function reaches a database the old release set up."""
    async def start(version: int) -> int:
        async with Engine(settings(tmp_path), text_search=VersionedBackend(version)) as engine, \
                engine.db.connect() as conn:
            return int(await conn.scalar(text("SELECT versioned_release()")))

    assert hr_run(start(1)) == 1
    assert hr_run(start(2)) == 2


def test_own_parameters_and_terms_are_bound(tmp_path: Path, hr_run: Run) -> None:
    """The backend's parameter reaches the write and the arm; the terms arrive as an array."""
    async def run() -> dict[str, Any]:
        async with Engine(settings(tmp_path), text_search=VersionedBackend(1)) as engine:
            await engine.retain("params", [
                {"id": "both", "text": "Running shoes and a blue jacket."},
                {"id": "one", "text": "A blue kettle."},
                {"id": "stem", "text": "She runs daily."},
            ])
            return await engine.recall("params", "running blue", trace=True)

    body = hr_run(run())
    keyword = [r for e in body["trace"]["retrieval_results"] if e["method_name"] == "keyword" for r in e["results"]]
    # 'simple' does not stem: "runs" does not meet "running", so the bound configuration was used
    assert [r["node_id"] for r in keyword] == ["both", "one"]
    assert [r["score"] for r in keyword] == [2.0, 1.0]


@pytest.mark.parametrize("params", [{"bank_id": "b"}, {"query_text": "x"}, {"filter_tags": []}, {"versioned-x": 1}])
def test_parameters_must_stay_apart_from_cores(tmp_path: Path, params: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="collides with core's parameters .* name it versioned_<option>"):
        Engine(settings(tmp_path), text_search=VersionedBackend(1, params))
