"""HINDSIGHT_API_TEXT_SEARCH_EXTENSION_NATIVE_LANGUAGE decides stemming and stopwords, live.

Each language gets a fresh embedded server: the language is baked into the stored tsvectors, so a
database built with one language cannot be searched meaningfully with another.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hindsight_recall.engine import Engine
from hindsight_recall.settings import load_settings
from hindsight_recall.testing.suite import ids, keyword_hits

VARIABLE = "HINDSIGHT_API_TEXT_SEARCH_EXTENSION_NATIVE_LANGUAGE"

CORPUS = [
    {"id": "haus", "text": "Wir haben das Haus am See gekauft."},
    {"id": "run", "text": "She runs along the river every morning."},
]

# (query, keyword hits) per language, checked against PostgreSQL 18's configurations:
# german stems "Häuser" to "haus" (plural, umlaut folded) and drops "die", "und", "das";
# english stems "running" to "run" but leaves "häuser" alone and drops "the", "and";
# simple only lower-cases, so stopwords match and nothing is stemmed.
CASES: dict[str, list[tuple[str, list[str]]]] = {
    "german": [("Häuser", ["haus"]), ("Haus", ["haus"]), ("die und das", [])],
    "english": [("Häuser", []), ("running", ["run"]), ("the and", [])],
    "simple": [("Häuser", []), ("running", []), ("runs", ["run"]), ("the", ["run"])],
}


@pytest.mark.parametrize("language", sorted(CASES))
def test_language_decides_stemming_and_stopwords(
    language: str, tmp_path: Path, hr_run: Callable[[Awaitable[Any]], Any]
) -> None:
    # The language is the backend's own setting (VARIABLE in the environment), given here in code.
    settings = load_settings(database_url=None, embedded_data_dir=tmp_path / "data",
                             text_search_extension="native", reranker_provider="rrf",
                             plugins={"text_search": {"native": {"language": language}}})
    bank = f"lang-{uuid.uuid4().hex[:8]}"

    async def run() -> dict[str, list[str]]:
        async with Engine(settings) as engine:
            assert engine.text_search.language == language  # type: ignore[attr-defined]
            await engine.retain(bank, CORPUS)
            return {query: ids(await keyword_hits(engine, bank, query)) for query, _ in CASES[language]}

    found = hr_run(run())
    assert found == dict(CASES[language])
