"""Run a backend's golden statements on a live server, on stand-in tables in a schema of their own.

A golden test pins the text of every statement a backend generates and parses it with the
PostgreSQL grammar; only a server proves the functions, operators, types and index options exist
and do what the backend expects. :func:`run_golden` executes the same statements, in the order the
engine does: install, session, column, index, the write expression, then the arm SQL, whose rows it
returns. The stand-in ``memory_units`` has the columns backends read; ``stage_units`` holds the
documents the write statement reads (``document``) and the columns copied onto the written rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

STAND_INS = (
    "CREATE TABLE memory_units (id uuid PRIMARY KEY, bank_id text, fact_type text, text text, context text, "
    "text_signals text, tags varchar[] NOT NULL DEFAULT '{}')",
    "CREATE TABLE stage_units (id uuid, bank_id text, fact_type text, document text)",
)
#: Documents for :func:`run_golden`: two banks, two fact types, one Chinese text; a query for
#: "Alice adopt" should find the first alone in bank b1's world facts.
DOCUMENTS = (
    ("00000000-0000-0000-0000-000000000001", "b1", "world", "Alice adopted a grey cat named Luna in March."),
    ("00000000-0000-0000-0000-000000000002", "b1", "world", "Bob sold his sailing boat and bought a bicycle."),
    ("00000000-0000-0000-0000-000000000003", "b1", "experience", "I helped Alice carry the cat food home."),
    ("00000000-0000-0000-0000-000000000004", "b2", "world", "Alice adopted a dog in another bank."),
    ("00000000-0000-0000-0000-000000000005", "b1", "world", "东京塔在东京的港区。"),
)
#: Copies what the write statement leaves out (it writes ``id`` and ``search_vector`` only).
FILL = ("UPDATE memory_units m SET bank_id = s.bank_id, fact_type = s.fact_type, text = s.document "
        "FROM stage_units s WHERE m.id = s.id")


@dataclass(frozen=True)
class Golden:
    """The statements of a golden test, by the engine's stage.

    :param setup: install, session, ``ALTER TABLE … ADD COLUMN`` and index statements, in order.
    :param write: ``INSERT INTO memory_units (id, search_vector) SELECT id, <write expression> FROM stage_units``.
    :param queries: arm statements (one arm, a ``UNION ALL`` of two), each run with the bound parameters.
    """

    setup: Sequence[str]
    write: str
    queries: Sequence[str]

    @classmethod
    def of(cls, backend: Any, columns: str, where: str) -> Golden:
        """Every statement ``backend`` contributes, embedded the way core runs it.

        :param where: an arm's filter naming ``fact_type = 'world'``; the second query is the
            ``UNION ALL`` of the world and experience arms, as recall runs them.
        """
        return cls(
            setup=[
                *backend.install_statements(),
                *backend.session_statements(),
                f"ALTER TABLE memory_units ADD COLUMN IF NOT EXISTS search_vector {backend.column_type()}",
                *backend.index_statements(),
            ],
            write=("INSERT INTO memory_units (id, search_vector) "
                   f"SELECT id, {backend.write_expression('document')} FROM stage_units"),
            queries=[
                backend.arm_sql(columns=columns, where=where),
                " UNION ALL ".join(backend.arm_sql(columns=columns, where=where.replace("world", fact_type))
                                   for fact_type in ("world", "experience")),
            ],
        )

    @property
    def statements(self) -> list[str]:
        return [*self.setup, self.write, *self.queries]


def run_golden(url: str, schema: str, golden: Golden, documents: Sequence[tuple[str, str, str, str]],
               params: Mapping[str, Any]) -> list[list[tuple[Any, ...]]]:
    """Execute ``golden`` in ``schema`` (which must exist and be empty) and return each query's rows.

    :param url: a server with the backend's extensions.
    :param documents: ``(uuid, bank_id, fact_type, text)`` rows to write.
    :param params: the arm's bound parameters (``query_text``, ``bank_id``, ``min_score``, ``limit``, …).
    """
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with engine.begin() as conn:
            conn.execute(text(f'SET search_path TO "{schema}", public'))
            for statement in STAND_INS:
                conn.execute(text(statement))
            conn.execute(text("INSERT INTO stage_units VALUES (CAST(:id AS uuid), :bank, :fact_type, :document)"),
                         [{"id": i, "bank": b, "fact_type": f, "document": d} for i, b, f, d in documents])
            for statement in golden.setup:
                conn.execute(text(statement))
            conn.execute(text(golden.write))
            conn.execute(text(FILL))
            conn.execute(text("ANALYZE memory_units"))
            return [[tuple(row) for row in conn.execute(text(query), dict(params))] for query in golden.queries]
    finally:
        engine.dispose()
