"""A backend from outside this repository passes the compliance suite the way its author would run it.

The backend is a small ``simple``-configuration tsvector backend in a throwaway distribution: a
module plus a ``*.dist-info`` with one ``hindsight_recall`` entry point, on ``sys.path`` for this
class only. The engine selects it by name on a fresh embedded database.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hindsight_recall import get_plugin_manager
from hindsight_recall.testing import TextSearchBackendSuite
from sqlalchemy import text

NAME = "simplefts"
MODULE = "hindsight_recall_simplefts"

SOURCE = '''
"""tsvector keyword search with the 'simple' configuration: no stemming, no stopwords."""

from hindsight_recall.hookspecs import hookimpl
from hindsight_recall.textsearch import INDEX, bigram_cjk_runs, query_terms

QUERY = "to_tsquery('simple'::regconfig, :query_text)"


class SimpleBackend:
    """tsvector + GIN with the 'simple' configuration, ranked with ts_rank."""

    name = "simplefts"
    citus_compatible = True
    supports_cjk = True
    writes_search_vector = True
    runs_on_embedded_server = True

    def __init__(self, settings=None):
        self.settings = settings

    def install_statements(self):
        return ()

    def session_statements(self):
        return ()

    def column_type(self):
        return "tsvector"

    def index_statements(self):
        return (f"CREATE INDEX IF NOT EXISTS {INDEX} ON memory_units USING gin (search_vector)",)

    def prepare_document(self, document):
        return bigram_cjk_runs(document)

    def write_expression(self, document_sql):
        return f"to_tsvector('simple'::regconfig, {document_sql})"

    async def prepare_query(self, query, tokens, conn):
        terms = query_terms(tokens)
        return " | ".join(f"'{t}'" for t in terms) or None

    def arm_sql(self, *, columns, where):
        rank = f"ts_rank(search_vector, {QUERY})"
        return (
            f"(SELECT {columns}, {rank} AS bm25_score FROM memory_units "
            f"WHERE {where} AND search_vector @@ {QUERY} AND {rank} >= :min_score "
            f"ORDER BY bm25_score DESC, id LIMIT :limit)"
        )


@hookimpl
def register_text_search_backends(register):
    register(SimpleBackend)
'''


def write_distribution(root: Path) -> None:
    """Write an installed-looking distribution ``hindsight-recall-simplefts`` with one entry point.

    :param root: a directory that will go on ``sys.path``.
    """
    (root / f"{MODULE}.py").write_text(SOURCE)
    info = root / f"{MODULE}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hindsight-recall-simplefts\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[hindsight_recall]\n{NAME} = {MODULE}\n")


class TestThirdPartyBackend(TextSearchBackendSuite):
    """The compliance suite against a backend installed from an outside distribution."""

    backend_name = NAME

    @pytest.fixture(scope="class")
    def hr_plugin_manager(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        """Core's plugin manager, loading entry points with the throwaway distribution installed."""
        root = tmp_path_factory.mktemp("site")
        write_distribution(root)
        with pytest.MonkeyPatch.context() as patch:
            patch.syspath_prepend(str(root))
            yield get_plugin_manager()
        sys.modules.pop(MODULE, None)

    def test_backend_came_from_its_distribution(self, hr_engine: Any, hr_run: Any) -> None:
        """The engine runs the entry point's class, and the database records the backend by name."""
        registration = next(r for r in hr_engine.plugins.registrations if r.name == NAME)
        assert (registration.distribution, registration.version, registration.status) == (
            "hindsight-recall-simplefts", "0.1", "ok")
        assert type(hr_engine.text_search).__module__ == MODULE

        async def recorded() -> Any:
            async with hr_engine.db.connect() as conn:
                query = "SELECT value FROM hindsight_meta WHERE key = 'text_search_extension'"
                return await conn.scalar(text(query))

        assert hr_run(recorded()) == NAME
