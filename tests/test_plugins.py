"""Plugin discovery, validation, failure recording and selection errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hindsight_recall import (
    BackendNotFound,
    Engine,
    PluginLoadError,
    get_plugin_manager,
    hookimpl,
    load_settings,
)

CORE_ITEMS = {("semantic", "retriever"), ("keyword", "retriever"), ("fixed", "budget_function"),
              ("adaptive", "budget_function"), ("rrf", "reranker"), ("local", "embeddings")}


def fake_distribution(root: Path, name: str, module_source: str, entry: str | None = None) -> None:
    """Write an installed-looking distribution with one hindsight_recall entry point."""
    (root / f"{name}.py").write_text(module_source)
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[hindsight_recall]\n{entry or name} = {name}\n")


def test_core_defaults_register_through_the_hooks() -> None:
    manager = get_plugin_manager(load_entry_points=False)
    assert {(r.name, r.kind) for r in manager.registrations} >= CORE_ITEMS
    assert all(r.distribution == "hindsight-recall" and r.status == "ok" for r in manager.registrations)


def test_installed_entry_points_are_loaded() -> None:
    manager = get_plugin_manager()
    assert "native" in manager.names("text_search")
    native = next(r for r in manager.registrations if r.name == "native")
    assert native.distribution == "hindsight-recall-native" and native.version


def test_a_broken_plugin_is_recorded_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distribution(tmp_path, "broken_plugin", "raise RuntimeError('boom at import')")
    monkeypatch.syspath_prepend(str(tmp_path))
    manager = get_plugin_manager()
    failed = next(r for r in manager.registrations if r.name == "broken_plugin")
    assert (
        failed.status == "error" and "boom at import" in (failed.error or "") and failed.distribution == "broken_plugin"
    )
    assert "native" in manager.names("text_search")
    with pytest.raises(RuntimeError, match="boom"):
        get_plugin_manager(strict=True)


def test_selecting_a_failed_plugin_reports_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distribution(tmp_path, "halfway", "raise ImportError('needs libfoo')", entry="halfway")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BackendNotFound, match="needs libfoo"):
        get_plugin_manager().get("text_search", "halfway")


def test_load_and_disable_plugins_in_code() -> None:
    # The same choices come from HINDSIGHT_API_LOAD_PLUGINS / _DISABLE_PLUGINS (see test_plugins_command_json).
    assert "native" not in get_plugin_manager(load=[]).names("text_search")
    assert get_plugin_manager(load=["native"]).names("text_search") == ["native"]
    assert "native" not in get_plugin_manager(disable=["native"]).names("text_search")
    assert "native" in get_plugin_manager(disable=[]).names("text_search")


class GoodReranker:
    """Scores by document length."""

    name = "by_length"
    passthrough = False

    def __init__(self, settings: Any = None) -> None:
        pass

    async def score(self, query: str, documents: list[str], *, bank_id: str | None = None) -> list[float]:
        return [float(len(d)) for d in documents]


class NotAReranker:
    name = "broken"


class Registers:
    def __init__(self, *items: Any) -> None:
        self.items = items

    @hookimpl
    def register_rerankers(self, register: Any) -> None:
        for item in self.items:
            register(item)


def test_registration_is_validated() -> None:
    manager = get_plugin_manager(load_entry_points=False)
    manager.register_plugin(Registers(GoodReranker), "good", "good-dist", "1.0")
    assert manager.get("reranker", "by_length") is GoodReranker
    manager.register_plugin(Registers(NotAReranker), "bad", "bad-dist", "1.0")
    failure = next(r for r in manager.registrations if r.plugin == "bad")
    assert "does not satisfy the Reranker protocol: missing score" in (failure.error or "")
    manager.register_plugin(Registers(GoodReranker), "dupe", "dupe-dist", "1.0")
    duplicate = next(r for r in manager.registrations if r.plugin == "dupe")
    assert "already registered" in (duplicate.error or "") and "good-dist" in (duplicate.error or "")
    manager.unregister_plugin("good")
    assert "by_length" not in manager.names("reranker")


def test_strict_mode_raises_on_invalid_registration() -> None:
    manager = get_plugin_manager(load_entry_points=False, strict=True)
    with pytest.raises(PluginLoadError, match="protocol"):
        manager.register_plugin(Registers(NotAReranker), "bad", "bad-dist", "1.0")


def test_unknown_selection_names_setting_choices_and_install_line() -> None:
    with pytest.raises(BackendNotFound) as err:
        Engine(load_settings(text_search_extension="nope"))
    message = str(err.value)
    assert "HINDSIGHT_API_TEXT_SEARCH_EXTENSION='nope'" in message and "native" in message
    assert "pip install hindsight-recall-nope" in message
    with pytest.raises(BackendNotFound, match="HINDSIGHT_API_RERANKER_PROVIDER"):
        Engine(load_settings(reranker_provider="nope"))


async def test_a_plugin_reranker_orders_results(make_settings: Any, bank: str) -> None:
    manager = get_plugin_manager()
    manager.register_plugin(Registers(GoodReranker), "good", "good-dist", "1.0")
    async with Engine(make_settings(reranker_provider="by_length"), plugins=manager) as engine:
        await engine.retain(bank, [{"id": "short", "text": "Alice ran."},
                                   {"id": "long", "text": "Alice ran a very long marathon in the rain in Hamburg."}])
        body = await engine.recall(bank, "Alice ran")
    assert [r["id"] for r in body["results"]] == ["long", "short"]
    assert body["results"][0]["scores"]["reranker"] == pytest.approx(1.0)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "hindsight_recall.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.mark.parametrize(("load", "expect_native"), [(None, True), ("", False), ("native", True)])
def test_plugins_command_json(load: str | None, expect_native: bool) -> None:
    env = {} if load is None else {"HINDSIGHT_API_LOAD_PLUGINS": load}
    result = cli("plugins", env=env)
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)
    names = {(i["name"], i["kind"]) for i in items}
    assert names >= CORE_ITEMS
    assert (("native", "text_search") in names) is expect_native
    assert all({"name", "kind", "distribution", "version", "status", "error"} <= set(i) for i in items)


async def test_switching_backend_on_a_populated_database_fails_with_instructions(make_settings: Any, engine: Engine,
                                                                                 alice: str) -> None:
    from hindsight_recall import ConfigError
    from hindsight_recall_native import NativeBackend

    class OtherBackend(NativeBackend):
        """The native backend under another name."""

        name = "other_native"

    class Plugin:
        @hookimpl
        def register_text_search_backends(self, register: Any) -> None:
            register(OtherBackend)

    manager = get_plugin_manager()
    manager.register_plugin(Plugin(), "other", "test", "0")
    with pytest.raises(ConfigError, match="already holds memories"):
        async with Engine(make_settings(text_search_extension="other_native"), plugins=manager):
            pass
    assert (await engine.recall(alice, "Alice"))["results"]  # the database is untouched


class SyncReranker:
    """Scores synchronously, which would block the event loop."""

    name = "sync"

    def score(self, query: str, documents: list[str], *, bank_id: str | None = None) -> list[float]:
        return [0.0] * len(documents)


class BareBackend:
    """Declares only the required members of TextSearchBackend."""

    name = "bare"
    citus_compatible = False
    supports_cjk = False

    def install_statements(self) -> tuple[str, ...]:
        return ()

    def session_statements(self) -> tuple[str, ...]:
        return ()

    def column_type(self) -> str:
        return "text"

    def index_statements(self) -> tuple[str, ...]:
        return ()

    def prepare_document(self, document: str) -> str:
        return document

    def write_expression(self, document_sql: str) -> str:
        return "NULL::text"

    async def prepare_query(self, query: str, tokens: Any, conn: Any) -> str | None:
        return None

    def arm_sql(self, *, columns: str, where: str) -> str:
        return ""


def test_a_non_async_score_is_rejected_naming_it() -> None:
    manager = get_plugin_manager(load_entry_points=False)
    manager.register_plugin(Registers(SyncReranker), "sync", "sync-dist", "1.0")
    failure = next(r for r in manager.registrations if r.plugin == "sync")
    assert "score must be 'async def'" in (failure.error or "")
    assert "sync" not in manager.names("reranker")


def test_a_rejection_names_every_missing_member() -> None:
    from hindsight_recall.plugins import check_plugin

    class Half:
        name = "half"
        citus_compatible = False

        def column_type(self) -> str:
            return "text"

    with pytest.raises(PluginLoadError) as err:
        check_plugin("text_search", Half)
    message = str(err.value)
    assert "does not satisfy the TextSearchBackend protocol: missing " in message
    for member in ("arm_sql", "index_statements", "prepare_query", "supports_cjk", "write_expression"):
        assert member in message
    assert "column_type" not in message and "ranks_every_match" not in message  # present / optional


def test_optional_members_get_their_documented_defaults() -> None:
    from hindsight_recall.protocols import Reranker, Retriever, TextSearchBackend, optional_members

    defaults = optional_members(TextSearchBackend)
    assert set(defaults) == {"ranks_every_match", "writes_search_vector", "runs_on_embedded_server", "extensions",
                             "parameters", "keeps_term_stats", "length_prior"}
    assert [defaults[k] for k in ("ranks_every_match", "writes_search_vector", "runs_on_embedded_server",
                                  "extensions", "keeps_term_stats", "length_prior")] == [False, True, False, (), False,
                                                                                         False]
    assert set(optional_members(Reranker)) == {"passthrough", "start", "close"}
    assert set(optional_members(Retriever)) == {"needs_embedding", "statement"}

    class Plugin:
        @hookimpl
        def register_text_search_backends(self, register: Any) -> None:
            register(BareBackend)

        @hookimpl
        def register_rerankers(self, register: Any) -> None:
            register(GoodReranker)

    manager = get_plugin_manager(load_entry_points=False)
    manager.register_plugin(Plugin(), "bare", "bare-dist", "1.0")
    backend = manager.get("text_search", "bare")()
    assert (backend.ranks_every_match, backend.writes_search_vector, backend.runs_on_embedded_server,
            backend.extensions, backend.keeps_term_stats, backend.length_prior) == (
        False, True, False, (), False, False)
    assert isinstance(backend, __import__("hindsight_recall.protocols").protocols.TextSearchBackend)
    assert backend.parameters() == {}
    reranker = manager.get("reranker", "by_length")()
    assert isinstance(reranker, Reranker)


async def test_optional_reranker_methods_default_to_doing_nothing() -> None:
    from hindsight_recall.plugins import adopt

    class Minimal:
        name = "minimal"

        async def score(self, query: str, documents: list[str], *, bank_id: str | None = None) -> list[float]:
            return [1.0] * len(documents)

    reranker = adopt("reranker", Minimal())
    assert reranker.passthrough is False
    assert await reranker.start() is None and await reranker.close() is None
    assert not hasattr(Minimal, "start")  # an instance's defaults stay on the instance


def test_entry_point_name_must_equal_the_class_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = (
        "from hindsight_recall.hookspecs import hookimpl\n"
        "class R:\n"
        "    name = 'other_name'\n"
        "    async def score(self, query, documents, *, bank_id=None):\n"
        "        return [0.0] * len(documents)\n"
        "@hookimpl\n"
        "def register_rerankers(register):\n"
        "    register(R)\n"
    )
    fake_distribution(tmp_path, "misnamed", source, entry="misnamed")
    monkeypatch.syspath_prepend(str(tmp_path))
    manager = get_plugin_manager(load=["misnamed"])
    failure = next(r for r in manager.registrations if r.plugin == "misnamed")
    assert "is named 'other_name', but its entry point is 'misnamed'" in (failure.error or "")
    assert "other_name" not in manager.names("reranker")
    with pytest.raises(PluginLoadError, match="entry point"):
        get_plugin_manager(load=["misnamed"], strict=True)


def test_engine_rejects_a_class_or_a_broken_instance_in_place_of_an_instance() -> None:
    with pytest.raises(PluginLoadError, match="pass an instance"):
        Engine(load_settings(reranker_provider="rrf"), reranker=GoodReranker)  # type: ignore[arg-type]
    with pytest.raises(PluginLoadError, match="missing score"):
        Engine(load_settings(reranker_provider="rrf"), reranker=NotAReranker())  # type: ignore[arg-type]


def drop_hindsight_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for variable in [v for v in os.environ if v.startswith("HINDSIGHT_API_")]:
        monkeypatch.delenv(variable)


def code_settings(data_dir: Path, **values: Any) -> Any:
    """Core settings built in code only: no HINDSIGHT_API_* variable and no .env file."""
    import os

    from hindsight_recall.settings import Settings

    return Settings(_env_file=None, embedded_data_dir=data_dir,  # type: ignore[call-arg]
                    database_url=os.environ.get("HINDSIGHT_TEST_DATABASE_URL"), **values)


def park_first(query: str, text: str) -> float:
    return 5.0 if "park" in text else -5.0


MEMORIES = [{"id": "tea", "text": "Alice likes the green tea."}, {"id": "job", "text": "Alice works at Helios."},
            {"id": "run", "text": "Alice runs in the park."}]


async def test_backend_and_reranker_configured_entirely_in_code(data_dir: Path, bank: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from hindsight_recall.testing.http_server import FixtureServer, tei_routes

    drop_hindsight_environment(monkeypatch)
    with FixtureServer(tei_routes(score=park_first)) as server:
        settings = code_settings(
            data_dir, text_search_extension="native", reranker_provider="tei", reranker_timeout=20,
            plugins={"text_search": {"native": {"language": "simple", "rank": "ts_rank_cd"}},
                     "reranker": {"tei": {"url": server.url, "batch_size": 1}}},
        )
        async with Engine(settings) as engine:
            assert (engine.text_search.config.language, engine.text_search.config.rank) == ("simple", "ts_rank_cd")
            await engine.retain(bank, MEMORIES)
            body = await engine.recall(bank, "the", trace=True)
        rerank_requests = server.requests_to("POST", "/rerank")
    details = next(p for p in body["trace"]["summary"]["phase_metrics"] if p["phase_name"] == "reranking")["details"]
    assert details["reranker_type"] == "tei" and "fallback" not in details
    assert body["results"][0]["id"] == "run"  # the server's order
    # batch_size=1: one request per candidate.
    assert len(rerank_requests) == details["candidates_reranked"] == 2
    assert all(len(r.body["texts"]) == 1 for r in rerank_requests)
    # "the" is a stopword of the default 'english' configuration: only 'simple' finds it by keyword.
    keyword = [e for e in body["trace"]["retrieval_results"] if e["method_name"] == "keyword"]
    assert {row["node_id"] for e in keyword for row in e["results"]} == {"tea", "run"}


async def test_plugin_instances_configured_in_code(data_dir: Path, bank: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from hindsight_recall.testing.http_server import FixtureServer, tei_routes
    from hindsight_recall_native import NativeBackend, NativeSettings
    from hindsight_recall_reranker_tei import TEIReranker, TEISettings

    drop_hindsight_environment(monkeypatch)
    with FixtureServer(tei_routes(score=park_first)) as server:
        settings = code_settings(data_dir)
        backend = NativeBackend(settings, NativeSettings(language="simple"))
        reranker = TEIReranker(settings, TEISettings(url=server.url))
        async with Engine(settings, text_search=backend, reranker=reranker) as engine:
            assert engine.settings.reranker_provider == "tei" and engine.text_search is backend
            await engine.retain(bank, MEMORIES)
            body = await engine.recall(bank, "Alice")
        assert server.requests_to("GET", "/info") and server.requests_to("POST", "/rerank")
    assert body["results"][0]["id"] == "run"


def test_a_backend_that_needs_its_own_server_is_configured_in_code(data_dir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hindsight_recall_pg_search")
    pytest.importorskip("hindsight_recall_reranker_cohere")
    drop_hindsight_environment(monkeypatch)
    settings = code_settings(
        data_dir, text_search_extension="pg_search", reranker_provider="cohere",
        plugins={"text_search": {"pg_search": {"tokenizer": "jieba"}},
                 "reranker": {"cohere": {"api_key": "k", "model": "rerank-v3.5"}}},
    )
    engine = Engine(settings)  # nothing is opened: the SQL and the request are built from the settings
    assert "(text::pdb.\"jieba\"('stemmer=english'))" in engine.text_search.index_statements()[0]
    assert engine.rerank.reranker.config.model == "rerank-v3.5"  # type: ignore[attr-defined]


def test_plugin_settings_in_code_are_validated_naming_the_variable(data_dir: Path) -> None:
    from hindsight_recall import ConfigError

    unknown = r"plugins\['reranker'\]\['tei'\]: unknown setting 'urll' for the 'tei' plugin"
    with pytest.raises(ConfigError, match=unknown):
        Engine(code_settings(data_dir, reranker_provider="tei", plugins={"reranker": {"tei": {"urll": "http://x"}}}))
    with pytest.raises(ConfigError, match="HINDSIGHT_API_RERANKER_TEI_BATCH_SIZE"):
        Engine(code_settings(data_dir, reranker_provider="tei",
                             plugins={"reranker": {"tei": {"url": "http://x", "batch_size": 0}}}))


def test_the_runtime_never_imports_the_test_kit() -> None:
    # hindsight_recall.testing (suites, fixtures, the HTTP test server) is only for tests.
    code = (
        "import sys, hindsight_recall, hindsight_recall.engine, hindsight_recall.cli, hindsight_recall.http\n"
        "print(sorted(m for m in sys.modules if m.startswith('hindsight_recall.testing')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


async def test_subclassing_a_protocol_inherits_its_defaults() -> None:
    from hindsight_recall.protocols import Reranker

    class Explicit(Reranker):
        name = "explicit"

        def __init__(self, settings: Any = None) -> None:
            self.settings = settings

        async def score(self, query: str, documents: Any, *, bank_id: str | None = None) -> list[float]:
            return [0.0] * len(documents)

    manager = get_plugin_manager(load_entry_points=False)
    manager.register_plugin(Registers(Explicit), "explicit", "explicit-dist", "1.0")
    reranker = manager.create("reranker", "explicit", load_settings())
    assert reranker.passthrough is False and await reranker.start() is None and reranker.settings is not None
