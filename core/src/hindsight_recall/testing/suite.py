"""The compliance suite every text-search backend runs, ours or a third party's.

Subclass it in ``tests/test_suite.py`` and name the backend::

    from hindsight_recall.testing import TextSearchBackendSuite

    class TestMyBackend(TextSearchBackendSuite):
        backend_name = "mybackend"

The fixtures come from the ``hindsight_recall.testing`` pytest plugin. A backend whose
``runs_on_embedded_server`` flag is true runs on a fresh embedded server; any other needs
``HINDSIGHT_TEST_DATABASE_URL_<NAME>`` (or the class's ``database_url_env``) and skips without it.
Tests that depend on a capability read the backend's flags and skip with the reason.

The keyword arm is observed through the recall trace (``retrieval_results`` with ``method_name``
``"keyword"``), so every check runs the real arm SQL with core's filters around it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import pytest
from sqlalchemy import text

from ..engine import Engine
from ..errors import InvalidRequest
from ..textsearch import INDEX

Run = Callable[[Awaitable[Any]], Any]


class KeywordHit(NamedTuple):
    """One row the keyword arm returned, as the recall trace reports it."""

    fact_type: str
    id: str
    text: str
    score: float


async def keyword_hits(engine: Any, bank_id: str, query: str, **options: Any) -> list[KeywordHit]:
    """Recall with a trace and return the keyword arm's rows, fact type by fact type, in rank order.

    :param engine: an open engine.
    :param bank_id: the bank.
    :param query: the query.
    :param options: further :meth:`~hindsight_recall.engine.Engine.recall` options (``types``, ``tags``, …).
    """
    body = await engine.recall(bank_id, query, trace=True, **options)
    return [
        KeywordHit(entry["fact_type"], row["node_id"], row["text"], float(row["score"]))
        for entry in body["trace"]["retrieval_results"]
        if entry["method_name"] == "keyword"
        for row in entry["results"]
    ]


def ids(hits: Sequence[KeywordHit]) -> list[str]:
    """The caller ids of keyword hits, in order.

    :param hits: rows from :func:`keyword_hits`.
    """
    return [h.id for h in hits]


RANKING = [
    {"id": "strong", "text": "The solar panel installation finished: every solar panel on the roof works."},
    {"id": "weak", "text": "The committee panel met on Tuesday."},
    {"id": "unrelated", "text": "Bob cooked pasta carbonara for dinner."},
]

HOSTILE = [
    "& | ! ( ) : * < > ' \\",
    "\x00",
    "solar\x00panel",
    "\"solar\" 'panel' `installation`",
    "'; DROP TABLE memory_units; --",
    "solar') OR 1=1; --",
    "$$; SELECT pg_sleep(30); $$",
    "solar:* & !panel | (installation <-> roof)",
    "solar OR panel -installation NOT roof AND",
    "@@ @@@ &@~ <@> <&> ~~ %",
    "x" * 10_000,
    "solar panel " * 850,
]

CJK = [
    ("zh", "我喜欢吃苹果", "苹果"),
    ("ja", "東京タワーに行きました", "東京タワー"),
    ("ko", "서울은 한국의 수도입니다", "서울"),
]


class TextSearchBackendSuite:
    """Compliance tests for one text-search backend; subclass it and set ``backend_name``."""

    #: The backend's entry-point name (the value of ``HINDSIGHT_API_TEXT_SEARCH_EXTENSION``).
    backend_name: ClassVar[str] = ""
    #: The variable holding a server URL; default ``HINDSIGHT_TEST_DATABASE_URL_<NAME>``.
    database_url_env: ClassVar[str | None] = None
    #: Extra core settings for the engine (field names of :class:`~hindsight_recall.settings.Settings`).
    settings_overrides: ClassVar[Mapping[str, Any]] = {}

    def test_ddl_applies(self, hr_engine: Any, hr_run: Run) -> None:
        """The index is on memory_units, the column has the declared type, and reopening is a no-op."""

        async def inspect() -> tuple[Any, Any]:
            async with hr_engine.db.connect() as conn:
                table = await conn.scalar(text(
                    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
                    "WHERE i.indexrelid = to_regclass(:index)"
                ), {"index": INDEX})
                column = await conn.scalar(text(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = 'memory_units'::regclass AND attname = 'search_vector' "
                    "AND NOT attisdropped"
                ))
                return table, column

        table, column = hr_run(inspect())
        assert table == "memory_units", f"{INDEX} is missing or not on memory_units"
        # format_type drops the schema when it is on the search_path.
        declared = hr_engine.text_search.column_type()
        assert column is not None and column.split(".")[-1] == declared.split(".")[-1]

        async def reopen() -> None:
            async with Engine(hr_engine.settings, plugins=hr_engine.plugins):
                pass

        hr_run(reopen())

    def test_citus_compatible_holds_on_citus(self, hr_engine: Any, hr_run: Run, hr_bank: str) -> None:
        """On a Citus coordinator, the backend's declaration is checked: the engine started with it (it
        refuses a backend declared not compatible), and a retain and a keyword recall run on the bank's
        shard only (every statement planned with one task, no worker command on another bank's shard)."""
        declared = hr_engine.text_search.citus_compatible
        if not hr_engine.db.citus:
            pytest.skip(f"{self.backend_name!r} declares citus_compatible = {declared}; checked when the suite "
                        "runs on a Citus coordinator (nox -s 'tests(citus)')")
        from .citus import check_routed  # late: only a Citus run needs it

        assert declared, "the engine started on Citus with a backend not declared citus_compatible"
        hr_run(check_routed(hr_engine, hr_bank, hr_engine.retain(hr_bank, RANKING), "retain"))
        body, _ = hr_run(check_routed(hr_engine, hr_bank, hr_engine.recall(
            hr_bank, "solar panel installation", trace=True), "recall"))
        assert body["results"], "the recall found nothing on Citus"

    def test_ingestion_writes_the_search_column(self, hr_engine: Any, hr_run: Run, hr_bank: str) -> None:
        """Retaining fills ``search_vector`` on every row, for backends that index that column."""
        if not hr_engine.text_search.writes_search_vector:
            pytest.skip(f"{self.backend_name!r} indexes base columns; search_vector is a dummy "
                        "(writes_search_vector = False)")

        async def check() -> tuple[int, int]:
            await hr_engine.retain(hr_bank, RANKING)
            async with hr_engine.db.connect() as conn:
                row = (await conn.execute(text(
                    "SELECT count(*) AS total, count(search_vector) AS written FROM memory_units "
                    "WHERE bank_id = :bank"
                ), {"bank": hr_bank})).one()
            return row.total, row.written

        total, written = hr_run(check())
        assert total == len(RANKING) and written == total

    def test_keyword_arm_ranks_the_more_relevant_first(
        self, hr_engine: Any, hr_run: Run, hr_bank: str
    ) -> None:
        """Matching rows come back by caller id, the better match first, with descending scores."""
        hr_run(hr_engine.retain(hr_bank, RANKING))
        hits = hr_run(keyword_hits(hr_engine, hr_bank, "solar panel installation"))
        assert ids(hits) == ["strong", "weak"], hits
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True) and scores[0] > scores[1]

    def test_keyword_floor_applies(self, hr_engine: Any, hr_run: Run, hr_bank: str) -> None:
        """``min_scores.keyword`` gates the arm's rows in SQL."""
        hr_run(hr_engine.retain(hr_bank, RANKING))
        assert hr_run(keyword_hits(hr_engine, hr_bank, "solar panel", min_scores={"keyword": 1e9})) == []
        hits = hr_run(keyword_hits(hr_engine, hr_bank, "solar panel", min_scores={"keyword": 0}))
        assert "strong" in ids(hits)

    @pytest.mark.parametrize("query", HOSTILE, ids=lambda q: repr(q[:24]))
    def test_hostile_queries_are_safe(self, hr_engine: Any, hr_run: Run, hr_bank: str, query: str) -> None:
        """Query syntax, quotes, NUL, SQL injection and a 10k-character query are data, never SQL."""

        async def count() -> int:
            async with hr_engine.db.connect() as conn:
                return int(await conn.scalar(
                    text("SELECT count(*) FROM memory_units WHERE bank_id = :bank"), {"bank": hr_bank}
                ))

        hr_run(hr_engine.retain(hr_bank, RANKING))
        try:
            hits = hr_run(keyword_hits(hr_engine, hr_bank, query))
        except InvalidRequest as exc:  # only when normalisation leaves no word at all
            assert exc.field == "query"
        else:
            assert set(ids(hits)) <= {m["id"] for m in RANKING}
        assert hr_run(count()) == len(RANKING)
        assert ids(hr_run(keyword_hits(hr_engine, hr_bank, "solar panel installation")))[:1] == ["strong"]

    def test_tags_filter_before_the_limit(self, hr_engine: Any, hr_run: Run, hr_bank: str) -> None:
        """Tag filters are part of the arm's WHERE: better-matching rows of other tags cannot fill ``B``."""
        from ..store import banks

        noise = [{"id": f"noise-{i}", "text": f"Quarterly report: the quarterly report figures, part {i}.",
                  "tags": ["noise"]} for i in range(12)]
        target = {"id": "target", "text": "The quarterly report is late.", "tags": ["finance"]}

        async def setup() -> None:
            await hr_engine.retain(hr_bank, [*noise, target])
            async with hr_engine.db.connect() as conn:
                await banks.set_bank_config(conn, hr_bank, {"recall_budget_fixed_low": 5})

        hr_run(setup())
        hits = hr_run(keyword_hits(hr_engine, hr_bank, "quarterly report", budget="low",
                                   tags=["finance"], tags_match="any_strict"))
        assert ids(hits) == ["target"]
        hits = hr_run(keyword_hits(hr_engine, hr_bank, "quarterly report", budget="low",
                                   tags=["noise"], tags_match="any_strict"))
        assert len(hits) == 5 and all(h.id.startswith("noise-") for h in hits)

    def test_types_filter(self, hr_engine: Any, hr_run: Run, hr_bank: str) -> None:
        """Each fact type is its own sub-select; unrequested types never appear."""
        memories = [
            {"id": "w", "text": "Alice adopted a cat named Pixel.", "type": "world"},
            {"id": "e", "text": "I adopted a cat named Pixel yesterday.", "type": "experience"},
            {"id": "o", "text": "Alice and Pixel the cat are inseparable.", "type": "observation"},
        ]
        hr_run(hr_engine.retain(hr_bank, memories))
        hits = hr_run(keyword_hits(hr_engine, hr_bank, "Pixel cat", types=["experience"]))
        assert [(h.fact_type, h.id) for h in hits] == [("experience", "e")]
        hits = hr_run(keyword_hits(hr_engine, hr_bank, "Pixel cat", types=["world", "observation"]))
        assert {(h.fact_type, h.id) for h in hits} == {("world", "w"), ("observation", "o")}

    def test_banks_are_isolated(self, hr_engine: Any, hr_run: Run, hr_bank: str) -> None:
        """Two banks with the same caller ids never see each other's rows."""
        other = f"{hr_bank}-other"
        hr_run(hr_engine.retain(hr_bank, [{"id": "secret", "text": "The secret code word is pineapple."}]))
        hr_run(hr_engine.retain(other, [{"id": "secret", "text": "The secret code word is mango."}]))
        query = "secret code word pineapple mango"
        mine = hr_run(keyword_hits(hr_engine, hr_bank, query))
        theirs = hr_run(keyword_hits(hr_engine, other, query))
        assert [h.text for h in mine] == ["The secret code word is pineapple."]
        assert [h.text for h in theirs] == ["The secret code word is mango."]

    @pytest.mark.parametrize(("query", "tokens"), [("", []), ("   ", []), ("?!", ["", " "])])
    def test_no_tokens_skip_the_arm(self, hr_engine: Any, hr_run: Run, query: str, tokens: list[str]) -> None:
        """A query without word tokens gives no query text, so the arm does not run."""

        async def prepare() -> str | None:
            async with hr_engine.db.connect() as conn:
                result: str | None = await hr_engine.text_search.prepare_query(query, tokens, conn)
                return result

        assert hr_run(prepare()) is None

    def test_unmatched_words_give_no_rows(self, hr_engine: Any, hr_run: Run, hr_bank: str) -> None:
        """Words found nowhere in the bank give an empty keyword arm, not an error."""
        hr_run(hr_engine.retain(hr_bank, RANKING))
        assert hr_run(keyword_hits(hr_engine, hr_bank, "zyxwvut qqqjjj")) == []

    @pytest.mark.parametrize(("language", "document", "query"), CJK, ids=[c[0] for c in CJK])
    def test_cjk_query_finds_cjk_memory(
        self, hr_engine: Any, hr_run: Run, hr_bank: str, language: str, document: str, query: str
    ) -> None:
        """A CJK query word finds the CJK memory that contains it without spaces around it."""
        if not hr_engine.text_search.supports_cjk:
            pytest.skip(f"{self.backend_name!r} does not declare CJK support (supports_cjk = False)")
        memories = [{"id": lang, "text": doc} for lang, doc, _ in CJK]
        hr_run(hr_engine.retain(hr_bank, [*memories, {"id": "en", "text": "I like apples and towers."}]))
        hits = hr_run(keyword_hits(hr_engine, hr_bank, query))
        assert ids(hits)[:1] == [language], hits
