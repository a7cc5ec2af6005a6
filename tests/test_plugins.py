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
    assert CORE_ITEMS <= {(r.name, r.kind) for r in manager.registrations}
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
    assert failed.status == "error" and "boom at import" in (failed.error or "") and failed.distribution == "broken_plugin"
    assert "native" in manager.names("text_search")
    monkeypatch.setenv("HINDSIGHT_API_STRICT_PLUGINS", "1")
    with pytest.raises(RuntimeError, match="boom"):
        get_plugin_manager()


def test_selecting_a_failed_plugin_reports_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distribution(tmp_path, "halfway", "raise ImportError('needs libfoo')", entry="halfway")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BackendNotFound, match="needs libfoo"):
        get_plugin_manager().get("text_search", "halfway")


def test_load_and_disable_plugins_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_API_LOAD_PLUGINS", "")
    assert "native" not in get_plugin_manager().names("text_search")
    monkeypatch.setenv("HINDSIGHT_API_LOAD_PLUGINS", "native")
    assert get_plugin_manager().names("text_search") == ["native"]
    monkeypatch.delenv("HINDSIGHT_API_LOAD_PLUGINS")
    monkeypatch.setenv("HINDSIGHT_API_DISABLE_PLUGINS", "native")
    assert "native" not in get_plugin_manager().names("text_search")


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
    assert "does not satisfy the Reranker protocol" in (failure.error or "")
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
    assert CORE_ITEMS <= names
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
