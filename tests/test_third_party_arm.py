"""A retrieval arm from outside core: weighted by name in either fusion, scoped by ``RetrievalContext.where``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from hindsight_recall import Engine, get_plugin_manager, hookimpl
from hindsight_recall.protocols import RetrievalContext
from hindsight_recall.recall.arms._rows import COLUMNS, row_from
from hindsight_recall.settings import Settings
from hindsight_recall.types import ArmResult, Hit
from sqlalchemy import text

from .conftest import ALICE_BANK


class PinnedArm:
    """Returns the memory with external id ``pasta`` of the recalled bank, whatever the query."""

    name = "pinned"
    needs_embedding = False

    def __init__(self, settings: Settings | None = None) -> None:
        pass

    def enabled(self, ctx: RetrievalContext) -> bool:
        return True

    async def retrieve(self, ctx: RetrievalContext) -> list[ArmResult]:
        results = []
        async with ctx.db.connect() as conn:
            for fact_type in ctx.fact_types:
                sql = f"SELECT {COLUMNS} FROM memory_units WHERE {ctx.where(fact_type)} AND external_id = 'pasta'"
                rows = (await conn.execute(text(sql), ctx.params())).mappings().all()
                results.append(ArmResult(self.name, fact_type, [Hit(row_from(m), 1.0) for m in rows], 0.0))
        return results


class PinnedPlugin:
    @hookimpl
    def register_retrievers(self, register: Any) -> None:
        register(PinnedArm)


def manager() -> Any:
    plugins = get_plugin_manager()
    plugins.register_plugin(PinnedPlugin(), "pinned", "test-pinned", "1.0")
    return plugins


async def first_and_weights(settings: Settings, bank: str) -> tuple[str, dict[str, float]]:
    async with Engine(settings, plugins=manager()) as engine:
        await engine.retain(bank, ALICE_BANK)
        body = await engine.recall(bank, "Where does Alice work?", trace=True)
    fusion = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "rrf_merge")
    return body["results"][0]["id"], fusion["details"]["weights"]


@pytest.mark.parametrize(("fusion", "variable"), [("score", "recall_score_weights"), ("rrf", "recall_rrf_weights")])
async def test_a_third_party_arm_is_weighted_by_its_name(
    make_settings: Callable[..., Settings], bank: str, fusion: str, variable: str
) -> None:
    loud = make_settings(recall_fusion=fusion, **{variable: "pinned:10"})
    first, weights = await first_and_weights(loud, bank)
    assert weights["pinned"] == 10.0 and first == "pasta"
    mute = make_settings(recall_fusion=fusion, **{variable: "pinned:0"})
    first, weights = await first_and_weights(mute, bank + "-mute")
    # muted, the arm's memory no longer leads: one of the two employment facts does (they are a
    # near-tie under RRF, 1.0 against .97 fused, and the recency boost orders them differently across
    # environments)
    assert weights["pinned"] == 0.0 and first in ("job", "old-job")


async def test_an_unknown_arm_name_is_reported_with_the_registered_ones(
    make_settings: Callable[..., Settings], bank: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(recall_score_weights="pinned:2,notes:3")
    with caplog.at_level(logging.WARNING):
        _, weights = await first_and_weights(settings, bank)
    assert weights == {"pinned": 2.0}
    assert "ignoring 'notes:3'" in caplog.text and "pinned" in caplog.text.split("ignoring 'notes:3'")[1]


def test_where_scopes_to_the_bank_and_adds_the_index_predicate_for_indexed_banks() -> None:
    from hindsight_recall.protocols import SqlFilter

    base: dict[str, Any] = dict(bank_id="b", query="q", tokens=(), embedding=(), fact_types=("world",), limit=5,
                                filter=SqlFilter("tags && :filter_tags", {"filter_tags": ["x"]}), settings=Settings(),
                                db=None, text_search=None, now=None)
    small, large = RetrievalContext(**base), RetrievalContext(**base, indexed=True)
    assert small.where("world") == "bank_id = :bank_id AND fact_type = 'world' AND tags && :filter_tags"
    assert large.where("world") == "bank_id = :bank_id AND fact_type = 'world' AND ann AND tags && :filter_tags"
    # a bank with HNSW indexes of its own (a slot) names the slot: only that predicate matches them
    own = RetrievalContext(**base, indexed=True, ann_slot=3)
    assert own.where("world") == "bank_id = :bank_id AND fact_type = 'world' AND ann_slot = 3 AND tags && :filter_tags"
    assert small.params() == {"bank_id": "b", "filter_tags": ["x"]}
    with pytest.raises(ValueError, match="fact types"):
        small.where("world' OR TRUE --")
