"""The compliance suite every reranker runs, ours or a third party's.

Subclass it in ``tests/test_suite.py``, name the reranker and give its settings in code::

    import pytest
    from hindsight_recall.testing import RerankerSuite

    class TestMyReranker(RerankerSuite):
        reranker_name = "myreranker"

        @pytest.fixture(scope="class")
        @classmethod
        def hr_reranker_config(cls):
            return {"url": "http://127.0.0.1:8080"}  # Settings(plugins={"reranker": {"myreranker": ...}})

The reranker is built the way the engine builds it: ``cls(settings)`` from the registered class,
with ``hr_reranker_config`` as ``settings.plugins["reranker"][reranker_name]`` (a generator fixture can start a
server first and stop it after the class). Every call runs on the class's own event loop
(``hr_run``). The last test recalls through a real engine on a fresh embedded server with the
``native`` text-search backend, and skips when that backend is not installed.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, SecretStr

from ..engine import Engine
from ..plugins import PluginManager, check_plugin
from ..protocols import Reranker
from ..settings import Settings, load_settings

Run = Callable[[Awaitable[Any]], Any]

QUERY = "Where did Alice run her first marathon?"
DOCUMENTS = [
    "Alice ran her first marathon in Hamburg.",
    "Bob cooked pasta carbonara for dinner.",
    "[Date: April 23, 2023 (2023-04-23)] Alice: the Hamburg marathon took her four hours.",
    "The committee met on Tuesday.",
    "Alice likes green tea.",
]
#: Text a reranker must survive: empty, CJK, emoji, combining marks, a long passage.
ODD_DOCUMENTS = ["", "アリスは東京でマラソンを走った。", "marathon 🏃‍♀️🏅", "Ame\u0301lie ran", "marathon " * 400]


def _finite_floats(scores: Sequence[Any], count: int) -> None:
    assert isinstance(scores, list), f"score() must return a list, got {type(scores).__name__}"
    assert len(scores) == count, f"score() returned {len(scores)} scores for {count} documents"
    for value in scores:
        assert isinstance(value, float | int) and not isinstance(value, bool), f"not a number: {value!r}"
        assert math.isfinite(value), f"not finite: {value!r}"


class RerankerSuite:
    """Checks one reranker against the :class:`~hindsight_recall.protocols.Reranker` contract."""

    #: The entry-point name of the reranker under test (``HINDSIGHT_API_RERANKER_PROVIDER``).
    reranker_name: ClassVar[str] = ""
    #: The same input gives the same scores; false skips the tests that compare two calls.
    deterministic: ClassVar[bool] = True
    #: How close two scores of the same pair must be (batched vs alone, concurrent vs sequential).
    tolerance: ClassVar[float] = 1e-3
    #: Modules importing the plugin must not load (heavy libraries load in the first method needing them).
    heavy_modules: ClassVar[tuple[str, ...]] = ("torch", "transformers", "sentence_transformers")

    # Class-scoped fixtures are classmethods: one value serves every test of the class.
    @pytest.fixture(scope="class")
    @classmethod
    def hr_reranker_config(cls) -> Mapping[str, Any] | BaseModel:
        """The reranker's own settings, given in code; override it (the default is empty)."""
        return {}

    @pytest.fixture(scope="class")
    @classmethod
    def hr_reranker_settings(cls, hr_reranker_config: Mapping[str, Any] | BaseModel) -> Settings:
        """Core settings selecting the reranker, with its settings under ``plugins``."""
        if not cls.reranker_name:
            raise pytest.UsageError(f"{cls.__name__}: set reranker_name = '<entry-point name>'")
        config = hr_reranker_config if isinstance(hr_reranker_config, BaseModel) else dict(hr_reranker_config)
        return load_settings(reranker_provider=cls.reranker_name, plugins={"reranker": {cls.reranker_name: config}})

    @pytest.fixture(scope="class")
    @classmethod
    def hr_reranker(
        cls, hr_plugin_manager: PluginManager, hr_reranker_settings: Settings, hr_run: Run
    ) -> Iterator[Any]:
        """The reranker, built as the engine builds it and started; closed after the class."""
        reranker = hr_plugin_manager.create("reranker", cls.reranker_name, hr_reranker_settings)
        hr_run(reranker.start())
        try:
            yield reranker
        finally:
            hr_run(reranker.close())

    def test_registered_under_its_entry_point_name(self, hr_plugin_manager: PluginManager) -> None:
        registration = next(
            (r for r in hr_plugin_manager.registrations if r.kind == "reranker" and r.name == self.reranker_name), None
        )
        assert registration is not None, f"no reranker named {self.reranker_name!r} is registered"
        assert registration.error is None, registration.error
        assert registration.description != "Undocumented", "give the reranker class a docstring"

    def test_satisfies_the_protocol(self, hr_reranker: Any) -> None:
        assert check_plugin("reranker", hr_reranker) == self.reranker_name
        assert isinstance(hr_reranker, Reranker)
        assert isinstance(hr_reranker.passthrough, bool)

    def test_import_loads_no_heavy_library(self, hr_plugin_manager: PluginManager) -> None:
        module = hr_plugin_manager.get("reranker", self.reranker_name).__module__
        code = (
            f"import sys, {module}\n"
            f"print(','.join(m for m in {self.heavy_modules!r} if m in sys.modules))"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "", f"importing {module} loaded {result.stdout.strip()}"

    def test_settings_given_in_code_reach_the_reranker(
        self, hr_reranker: Any, hr_reranker_config: Mapping[str, Any] | BaseModel
    ) -> None:
        config = getattr(hr_reranker, "config", None)
        if not isinstance(config, BaseModel):
            pytest.skip("the reranker keeps no pydantic settings object as .config")
        given = hr_reranker_config.model_dump() if isinstance(hr_reranker_config, BaseModel) else hr_reranker_config
        for key, value in given.items():
            actual = getattr(config, key)
            actual = actual.get_secret_value() if isinstance(actual, SecretStr) else actual
            value = value.get_secret_value() if isinstance(value, SecretStr) else value
            assert actual == value, f"{key}: given {value!r} in code, the reranker has {actual!r}"

    def test_one_finite_score_per_document(self, hr_reranker: Any, hr_run: Run) -> None:
        if hr_reranker.passthrough:
            pytest.skip("a passthrough reranker is never asked to score")
        _finite_floats(hr_run(hr_reranker.score(QUERY, DOCUMENTS)), len(DOCUMENTS))

    def test_no_documents_give_no_scores(self, hr_reranker: Any, hr_run: Run) -> None:
        assert hr_run(hr_reranker.score(QUERY, [])) == []

    def test_scores_follow_the_input_order(self, hr_reranker: Any, hr_run: Run) -> None:
        if not self.deterministic:
            pytest.skip("deterministic = False")
        forward = hr_run(hr_reranker.score(QUERY, DOCUMENTS))
        backward = hr_run(hr_reranker.score(QUERY, DOCUMENTS[::-1]))
        assert backward[::-1] == pytest.approx(forward, rel=self.tolerance, abs=self.tolerance)

    def test_a_score_does_not_depend_on_the_other_documents(self, hr_reranker: Any, hr_run: Run) -> None:
        if not self.deterministic:
            pytest.skip("deterministic = False")
        together = hr_run(hr_reranker.score(QUERY, DOCUMENTS))
        alone = [hr_run(hr_reranker.score(QUERY, [d]))[0] for d in DOCUMENTS]
        assert alone == pytest.approx(together, rel=self.tolerance, abs=self.tolerance)

    def test_many_documents_in_one_call(self, hr_reranker: Any, hr_run: Run) -> None:
        documents = [f"{DOCUMENTS[i % len(DOCUMENTS)]} ({i})" for i in range(300)]
        _finite_floats(hr_run(hr_reranker.score(QUERY, documents)), 300)

    def test_odd_text_is_scored(self, hr_reranker: Any, hr_run: Run) -> None:
        _finite_floats(hr_run(hr_reranker.score(QUERY, ODD_DOCUMENTS)), len(ODD_DOCUMENTS))
        _finite_floats(hr_run(hr_reranker.score("", DOCUMENTS[:2])), 2)

    def test_bank_id_is_accepted(self, hr_reranker: Any, hr_run: Run) -> None:
        _finite_floats(hr_run(hr_reranker.score(QUERY, DOCUMENTS, bank_id="bank-7")), len(DOCUMENTS))

    def test_concurrent_calls_match_sequential_ones(self, hr_reranker: Any, hr_run: Run) -> None:
        queries = [QUERY, "Who cooked dinner?", "What does Alice drink?", "When did the committee meet?"]
        sequential = [hr_run(hr_reranker.score(q, DOCUMENTS)) for q in queries]

        async def together() -> list[list[float]]:
            return list(await asyncio.gather(*(hr_reranker.score(q, DOCUMENTS) for q in queries)))

        concurrent = hr_run(together())
        for one, other in zip(sequential, concurrent, strict=True):
            _finite_floats(other, len(DOCUMENTS))
            if self.deterministic:
                assert other == pytest.approx(one, rel=self.tolerance, abs=self.tolerance)

    def test_reranks_a_recall(
        self, hr_plugin_manager: PluginManager, hr_reranker_settings: Settings, hr_run: Run,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> None:
        if "native" not in hr_plugin_manager.names("text_search"):
            pytest.skip("the engine test needs the native text-search backend: pip install hindsight-recall-native")
        settings = hr_reranker_settings.model_copy(update={
            "database_url": None, "text_search_extension": "native",
            "embedded_data_dir": tmp_path_factory.mktemp(f"hr-rerank-{self.reranker_name}") / "data",
        })
        bank = f"hr-{uuid.uuid4().hex[:12]}"
        memories = [{"id": f"m{i}", "text": text} for i, text in enumerate(DOCUMENTS)]

        async def recall() -> dict[str, Any]:
            async with Engine(settings, plugins=hr_plugin_manager) as engine:
                await engine.retain(bank, memories)
                return await engine.recall(bank, "Alice marathon", trace=True)

        body = hr_run(recall())
        phase = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "reranking")
        details = phase["details"]
        assert "fallback" not in details, details.get("fallback")
        assert body["results"], "the recall found nothing"
        if not hr_plugin_manager.get("reranker", self.reranker_name).passthrough:
            assert details["reranker_type"] == self.reranker_name
            assert all(0.0 <= r["scores"]["reranker"] <= 1.0 for r in body["results"])
