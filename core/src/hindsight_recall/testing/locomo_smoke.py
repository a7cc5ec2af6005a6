"""A LoCoMo smoke test for a backend's live session: a fixed slice of the dev split, hit_any@10 against a floor.

The full dev split takes minutes to retain on two cores; a few of its conversations with all their
questions take about a minute and still move with the ranking: a keyword arm that stops scoring
(every match tied) or a fused order that stops using it falls well below the full-run figures.
Subclass :class:`LocomoSmokeSuite` with the backend's name and floors; the split is read from
``shared/bench/locomo/dev`` (CI keeps it in ``../shared`` beside the clone), and the test skips
without it.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..jsonl import read_jsonl
from .pgserver import shared_folder
from .scores import score_query

#: The dev split's folder under ``shared/``: ``memories.jsonl`` and ``queries.jsonl``.
DEV_SPLIT = ("bench", "locomo", "dev")
#: The conversations of the smoke: the two smallest of the dev split (788 turns, 233 questions).
BANKS = ("conv-26", "conv-30")


@dataclass(frozen=True)
class SmokeResult:
    """hit_any@10 over the slice's questions, of what recall returns and of the keyword arm's own ranking."""

    questions: int
    fused: float
    keyword: float

    def __str__(self) -> str:
        return f"{self.questions} questions: fused hit_any@10 {self.fused:.3f}, keyword arm {self.keyword:.3f}"


def dev_split() -> Path | None:
    """The LoCoMo dev split, from ``shared/bench/locomo/dev`` in the working directory or a parent."""
    return shared_folder(*DEV_SPLIT)


async def locomo_smoke(engine: Any, split: Path, banks: Sequence[str] = BANKS) -> SmokeResult:
    """Retain ``banks`` of ``split`` under fresh bank ids and recall each of their questions (budget mid).

    :param engine: an open engine; its banks are left in place.
    :param split: a folder with ``memories.jsonl`` and ``queries.jsonl``.
    :param banks: the conversations to use.
    """
    prefix = f"smoke-{uuid.uuid4().hex[:8]}-"
    batches: dict[str, list[Any]] = defaultdict(list)
    lines: dict[str, list[int]] = defaultdict(list)
    for bank, line, memory in read_jsonl(split / "memories.jsonl"):
        if bank in banks:
            batches[prefix + bank].append(memory)
            lines[prefix + bank].append(line)
    await engine.retain_many(dict(batches), lines=dict(lines), progress=False)
    fused: list[float] = []
    keyword: list[float] = []
    for raw in (split / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        question = json.loads(raw) if raw.strip() else {}
        if question.get("bank") not in banks or not question.get("evidence"):
            continue
        body = await engine.recall(prefix + question["bank"], question["question"], budget="mid", max_tokens=4096,
                                   include_entities=None, trace=True)
        rows = [row for block in body["trace"]["retrieval_results"] if block["method_name"] == "keyword"
                for row in block["results"]]
        by_score = [row["node_id"] for row in sorted(rows, key=lambda row: -float(row["score"]))]
        fused.append(score_query(question["evidence"], [r["id"] for r in body["results"]])["hit_any@10"])
        keyword.append(score_query(question["evidence"], by_score)["hit_any@10"])
    if not fused:
        raise ValueError(f"no questions of {', '.join(banks)} in {split}")
    return SmokeResult(len(fused), sum(fused) / len(fused), sum(keyword) / len(keyword))


class LocomoSmokeSuite:
    """The smoke as a test class: set ``backend_name`` and the two floors on hit_any@10."""

    backend_name: ClassVar[str] = ""
    #: hit_any@10 of what recall returns must reach this.
    fused_floor: ClassVar[float] = 0.0
    #: hit_any@10 of the keyword arm's own ranking must reach this.
    keyword_floor: ClassVar[float] = 0.0

    def test_locomo_slice_meets_the_floors(
        self, hr_database_url: str, hr_fresh_schema: str, hr_run: Any, capsys: pytest.CaptureFixture[str]
    ) -> None:
        result = self.run_smoke(hr_database_url, hr_fresh_schema, hr_run)
        with capsys.disabled():
            print(f"\nLoCoMo dev smoke, {self.backend_name}: {result} "
                  f"(floors {self.fused_floor:.3f} / {self.keyword_floor:.3f})")
        assert result.fused >= self.fused_floor and result.keyword >= self.keyword_floor, str(result)

    def run_smoke(self, url: str, schema: str, run: Any, text_search: Any = None) -> SmokeResult:
        """The smoke in ``schema`` on ``url``, with the named backend or the ``text_search`` instance given."""
        from ..engine import Engine
        from ..settings import load_settings

        split = dev_split()
        if split is None:
            pytest.skip("the LoCoMo dev split is not in shared/bench/locomo/dev here or in a parent folder")
        settings = load_settings(database_url=url, database_schema=schema,
                                 text_search_extension=self.backend_name, reranker_provider="rrf")

        async def smoke() -> SmokeResult:
            async with Engine(settings, text_search=text_search(settings) if text_search else None) as engine:
                return await locomo_smoke(engine, split)

        result: SmokeResult = run(smoke())
        return result
