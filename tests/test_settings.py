"""Every core setting: defaults, environment names, hard errors and soft fallbacks."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import pytest
from hindsight_recall import ConfigError, Engine, load_settings
from hindsight_recall.settings import BankSettings, Settings, plugin_settings
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULTS = {
    "database_url": None,
    "database_schema": "public",
    "db_pool_min_size": 5,
    "db_pool_max_size": 100,
    "db_command_timeout": 60,
    "db_acquire_timeout": 30,
    "db_statement_timeout": 600,
    "db_session_setup_on_acquire": True,
    "citus_direct_reads": True,
    "vector_extension": "pgvector",
    "ann_iterative_scan": True,
    "ann_max_scan_tuples": 4000,
    "vector_index_min_rows": 5_000,
    "vector_index_slots": 8,
    "text_search_extension": "native",
    "bm25_min_score": 0.0,
    "bm25_max_query_terms": 16,
    "bm25_selective_terms": True,
    "bm25_max_term_frequency": 1.0,
    "semantic_min_similarity": 0.3,
    "graph_seed_min_similarity": 0.3,
    "temporal_semantic_min_similarity": 0.1,
    "semantic_link_min_similarity": 0.7,
    "semantic_floor_calibration": True,
    "recall_weak_results": 5,
    "graph_retriever": "link_expansion",
    "link_expansion_per_entity_limit": 200,
    "link_expansion_timeout": 10,
    "link_expansion_max_entity_fraction": 0.2,
    "recall_max_concurrent": 0,
    "recall_connection_budget": 4,
    "recall_max_query_tokens": 500,
    "recall_max_candidates_per_source": 0,
    "recall_strategy_boosts": "",
    "query_analyzer_languages": "",
    "reranker_max_candidates": 300,
    "reranker_max_candidates_low": 0,
    "reranker_max_candidates_mid": 0,
    "reranker_max_candidates_high": 0,
    "recency_decay_function": "linear",
    "recency_decay_linear_window_days": 365,
    "recency_decay_halflife_days": 90,
    "tokenizer_encoding": "cl100k_base",
    "embeddings_provider": "local",
    "embeddings_local_model": None,
    "embeddings_query_prefix": "",
    "embeddings_passage_prefix": "",
    "embeddings_batch_size": None,
    "embeddings_local_backend": "auto",
    "embeddings_onnx_cache_dir": None,
    "embeddings_onnx_int8": True,
    "embeddings_query_cache_size": 1024,
    "reranker_provider": "local",
    "reranker_send_bank_as_header": False,
    "reranker_on_error": "fallback",
    "model_init_timeout": 300,
    "embedded_data_dir": None,
    "embedded_server_settings": "",
    "reranker_timeout": 30,
    "host": "127.0.0.1",
    "port": 8888,
    "service_api_key": None,
    "service_max_body_bytes": 32 * 1024 * 1024,
    "service_max_query_bytes": 8192,
    "service_request_timeout": 300,
    "service_max_recalls_in_flight": 64,
    "service_retry_after": 1,
    "service_shutdown_timeout": 5,
    "service_max_sync_retain_items": 2000,
    "service_operation_workers": 2,
    "service_operation_lease": 30,
    "service_operation_chunk_items": 2000,
    "archive_max_bytes": 256 * 1024 * 1024,
    "archive_max_entries": 100_000,
    "archive_max_depth": 32,
    "console_session_ttl": 43200,
    "service_access_log": "text",
    "console_enabled": True,
    "mcp_bank_id": "default",
    "llm_provider": None,
    "llm_model": None,
    "llm_api_key": None,
    "llm_base_url": None,
    "llm_timeout": 120,
    "llm_max_retries": 3,
    "llm_initial_backoff": 1.0,
    "llm_max_backoff": 60.0,
    "llm_max_concurrent": 32,
    "llm_stream": False,
    "llm_response_format": "json_schema",
    "retain_llm_provider": None,
    "retain_llm_model": None,
    "retain_llm_api_key": None,
    "retain_llm_base_url": None,
    "retain_llm_timeout": None,
    "retain_llm_max_retries": None,
    "retain_llm_initial_backoff": None,
    "retain_llm_max_backoff": None,
    "retain_llm_max_concurrent": None,
    "retain_chunk_size": 3000,
    "retain_extraction_mode": "concise",
    "retain_extract_causal_links": True,
    "retain_mission": None,
    "retain_custom_instructions": None,
    "retain_max_completion_tokens": 16384,
    "plugins": {},
    "recall_budget_function": "fixed",
    "recall_budget_fixed_low": 100,
    "recall_budget_fixed_mid": 300,
    "recall_budget_fixed_high": 1000,
    "recall_budget_adaptive_low": 0.025,
    "recall_budget_adaptive_mid": 0.075,
    "recall_budget_adaptive_high": 0.25,
    "recall_budget_min": 20,
    "recall_budget_max": 2000,
    "enable_temporal_retrieval": True,
    "enable_graph_retrieval": True,
    "enable_reranking": True,
    "enable_text_search": True,
    "recall_fusion": "score",
    "recall_score_weights": "keyword:1,semantic:0.5,graph:0.3,temporal:0.3",
    "recall_rrf_k": 5,
    "recall_rrf_weights": "keyword:1.5",
    "recall_context_enabled": True,
    "recall_context_neighbour_weight": 0.3,
    "recall_context_document_weight": 0.2,
    "recall_context_expand": 50,
    "recall_period_first": True,
    "webhook_delivery_workers": 4,
    "webhook_allowed_hosts": "",
    "webhook_retry_delays": (5.0, 300.0, 1800.0, 7200.0, 18000.0),
    "audit_log_enabled": True,
    "audit_log_retention_days": -1,
    "file_conversion_max_batch_size": 10,
    "file_conversion_max_batch_size_mb": 100,
    "enable_file_upload_api": True,
}


def test_every_field_has_a_tested_default() -> None:
    assert set(Settings.model_fields) == set(DEFAULTS)
    settings = Settings(_env_file=None)
    for name, default in DEFAULTS.items():
        assert getattr(settings, name) == default, name


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("semantic_min_similarity", "0.5", 0.5),
        ("ann_iterative_scan", "false", False),
        ("reranker_provider", " TEI ", "tei"),
        ("recall_budget_fixed_mid", "42", 42),
        ("database_schema", "memory_2", "memory_2"),
        ("reranker_on_error", "raise", "raise"),
        ("reranker_timeout", "2.5", 2.5),
        ("plugins", '{"reranker": {"tei": {"url": "http://x"}}}', {"reranker": {"tei": {"url": "http://x"}}}),
        ("service_max_body_bytes", "1024", 1024),
        ("host", "0.0.0.0", "0.0.0.0"),
        ("mcp_bank_id", "agent-7", "agent-7"),
    ],
)
def test_read_from_prefixed_environment(monkeypatch: pytest.MonkeyPatch, name: str, raw: str, expected: object) -> None:
    monkeypatch.setenv(f"HINDSIGHT_API_{name.upper()}", raw)
    assert getattr(load_settings(), name) == expected


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"semantic_min_similarity": 1.5}, "HINDSIGHT_API_SEMANTIC_MIN_SIMILARITY"),
        ({"graph_seed_min_similarity": -0.1}, "HINDSIGHT_API_GRAPH_SEED_MIN_SIMILARITY"),
        ({"temporal_semantic_min_similarity": 2}, "HINDSIGHT_API_TEMPORAL_SEMANTIC_MIN_SIMILARITY"),
        ({"bm25_max_query_terms": -1}, "HINDSIGHT_API_BM25_MAX_QUERY_TERMS"),
        ({"vector_index_slots": -1}, "HINDSIGHT_API_VECTOR_INDEX_SLOTS"),
        ({"vector_index_slots": 1001}, "HINDSIGHT_API_VECTOR_INDEX_SLOTS"),
        ({"vector_index_slots": "many"}, "HINDSIGHT_API_VECTOR_INDEX_SLOTS"),
        ({"database_schema": "public; drop"}, "HINDSIGHT_API_DATABASE_SCHEMA"),
        ({"vector_extension": "faiss"}, "HINDSIGHT_API_VECTOR_EXTENSION"),
        ({"reranker_on_error": "ignore"}, "HINDSIGHT_API_RERANKER_ON_ERROR"),
        ({"recall_max_concurrent": -1}, "HINDSIGHT_API_RECALL_MAX_CONCURRENT"),
        ({"db_pool_max_size": 0}, "HINDSIGHT_API_DB_POOL_MAX_SIZE"),
        ({"recall_budget_fixed_low": 0}, "HINDSIGHT_API_RECALL_BUDGET_FIXED_LOW"),
        ({"reranker_timeout": 0}, "HINDSIGHT_API_RERANKER_TIMEOUT"),
        ({"port": 70000}, "HINDSIGHT_API_PORT"),
        ({"service_max_recalls_in_flight": 0}, "HINDSIGHT_API_SERVICE_MAX_RECALLS_IN_FLIGHT"),
        ({"service_access_log": "loud"}, "HINDSIGHT_API_SERVICE_ACCESS_LOG"),
        ({"console_enabled": "maybe"}, "HINDSIGHT_API_CONSOLE_ENABLED"),
        ({"service_max_sync_retain_items": 0}, "HINDSIGHT_API_SERVICE_MAX_SYNC_RETAIN_ITEMS"),
        ({"service_operation_workers": -1}, "HINDSIGHT_API_SERVICE_OPERATION_WORKERS"),
        ({"service_operation_lease": 0.5}, "HINDSIGHT_API_SERVICE_OPERATION_LEASE"),
        ({"service_operation_chunk_items": 0}, "HINDSIGHT_API_SERVICE_OPERATION_CHUNK_ITEMS"),
        ({"archive_max_bytes": 0}, "HINDSIGHT_API_ARCHIVE_MAX_BYTES"),
        ({"archive_max_entries": 0}, "HINDSIGHT_API_ARCHIVE_MAX_ENTRIES"),
        ({"archive_max_depth": 1000}, "HINDSIGHT_API_ARCHIVE_MAX_DEPTH"),
        ({"console_session_ttl": 0}, "HINDSIGHT_API_CONSOLE_SESSION_TTL"),
        ({"plugins": {"tei": "http://x"}}, "HINDSIGHT_API_PLUGINS"),
        ({"file_conversion_max_batch_size": 0}, "HINDSIGHT_API_FILE_CONVERSION_MAX_BATCH_SIZE"),
        ({"file_conversion_max_batch_size_mb": 0}, "HINDSIGHT_API_FILE_CONVERSION_MAX_BATCH_SIZE_MB"),
        ({"enable_file_upload_api": "sometimes"}, "HINDSIGHT_API_ENABLE_FILE_UPLOAD_API"),
    ],
)
def test_hard_invalid_values_fail_naming_the_variable(overrides: dict, variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        load_settings(**overrides)


@pytest.mark.parametrize("overrides", [
    {"ann_iterative_scan": True, "ann_max_scan_tuples": 0},
    {"recall_budget_min": 50, "recall_budget_max": 10},
    {"db_pool_min_size": 10, "db_pool_max_size": 5},
])
def test_inconsistent_combinations_fail(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        load_settings(**overrides)
    assert load_settings(ann_iterative_scan=False, ann_max_scan_tuples=0).ann_max_scan_tuples == 0


def test_soft_invalid_decay_function_warns_and_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert load_settings(recency_decay_function="cubic").recency_decay_function == "linear"
    assert "RECENCY_DECAY_FUNCTION" in caplog.text


def test_bank_overrides_are_validated() -> None:
    settings = load_settings()
    assert settings.for_bank({"enable_graph_retrieval": False}).enable_graph_retrieval is False
    assert settings.for_bank(None) is settings
    with pytest.raises(ValueError):
        settings.for_bank({"recall_budget_fixed_mid": -3})
    with pytest.raises(ValueError):
        settings.for_bank({"database_url": "postgresql://elsewhere"})
    assert set(BankSettings.model_fields) < set(Settings.model_fields)


@pytest.mark.parametrize(
    ("overrides", "level", "cap"),
    [
        ({}, "mid", 300),
        ({"reranker_max_candidates": 50}, "low", 50),
        ({"reranker_max_candidates_high": 900}, "high", 900),
        ({"reranker_max_candidates_low": 10, "reranker_max_candidates": 70}, "mid", 70),
    ],
)
def test_reranker_cap_per_budget(overrides: dict, level: str, cap: int) -> None:
    assert load_settings(**overrides).reranker_cap(level) == cap


def test_unknown_tokenizer_is_a_startup_error() -> None:
    from hindsight_recall.tokens import TokenCounter

    with pytest.raises(ConfigError, match="TOKENIZER_ENCODING"):
        TokenCounter("no_such_encoding")
    assert TokenCounter().count("<|endoftext|> hello") > 2  # special tokens count as text


class DemoSettings(BaseSettings):
    """A plugin's own settings, as a plugin declares them."""

    model_config = SettingsConfigDict(env_prefix="HINDSIGHT_API_DEMO_", extra="ignore")

    url: str | None = None
    batch_size: int = Field(default=8, ge=1)


def test_plugin_settings_code_then_environment_then_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert plugin_settings(DemoSettings, "demo", kind="reranker").model_dump() == {"url": None, "batch_size": 8}
    monkeypatch.setenv("HINDSIGHT_API_DEMO_URL", "http://from-env")
    monkeypatch.setenv("HINDSIGHT_API_DEMO_BATCH_SIZE", "5")
    # The environment remains the default source of everything the code leaves out.
    from_env = plugin_settings(DemoSettings, "demo", Settings(), kind="reranker")
    assert from_env.model_dump() == {"url": "http://from-env", "batch_size": 5}
    in_code = Settings(plugins={"reranker": {"demo": {"batch_size": 2}}})
    assert plugin_settings(DemoSettings, "demo", in_code, kind="reranker").model_dump() == {
        "url": "http://from-env", "batch_size": 2}
    ready = DemoSettings(url="http://ready")
    given = Settings(plugins={"reranker": {"demo": ready}})
    assert plugin_settings(DemoSettings, "demo", given, kind="reranker") is ready


def test_plugin_settings_are_keyed_by_kind() -> None:
    """``local`` is an embedder and a reranker: each reads its own section."""
    settings = Settings(plugins={"reranker": {"demo": {"batch_size": 2}}, "embeddings": {"demo": {"batch_size": 3}}})
    assert plugin_settings(DemoSettings, "demo", settings, kind="reranker").batch_size == 2
    assert plugin_settings(DemoSettings, "demo", settings, kind="embeddings").batch_size == 3
    assert plugin_settings(DemoSettings, "demo", settings, kind="text_search").batch_size == 8
    with pytest.raises(ValueError, match="unknown plugin kind 'rerankers'"):
        plugin_settings(DemoSettings, "demo", settings, kind="rerankers")


def test_plugin_settings_without_the_kind_still_work_and_warn() -> None:
    with pytest.warns(DeprecationWarning, match=r"plugins\['demo'\] without the plugin kind is deprecated"):
        settings = Settings(plugins={"demo": {"batch_size": 4}})
    assert plugin_settings(DemoSettings, "demo", settings, kind="reranker").batch_size == 4
    assert plugin_settings(DemoSettings, "demo", settings).batch_size == 4
    # the kind's own section wins over the old form
    with pytest.warns(DeprecationWarning):
        both = Settings(plugins={"demo": {"batch_size": 4}, "reranker": {"demo": {"batch_size": 6}}})
    assert plugin_settings(DemoSettings, "demo", both, kind="reranker").batch_size == 6


@pytest.mark.parametrize(("values", "message"), [
    ({"batch_sise": 2}, "plugins['reranker']['demo']: unknown setting 'batch_sise' for the 'demo' plugin"),
    ({"batch_size": 0}, "HINDSIGHT_API_DEMO_BATCH_SIZE: Input should be greater than or equal to 1"),
    (BankSettings(), "plugins['reranker']['demo'] is a BankSettings, but the 'demo' plugin expects a DemoSettings"),
])
def test_plugin_settings_errors_name_the_setting(values: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        plugin_settings(DemoSettings, "demo", Settings(plugins={"reranker": {"demo": values}}), kind="reranker")
    assert message in str(err.value)


@pytest.mark.parametrize("plugins", [{"reranker": "tei"}, {"reranker": {"tei": "http://x"}}])
def test_a_kind_section_must_map_names_to_settings(plugins: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="HINDSIGHT_API_PLUGINS"):
        load_settings(plugins=plugins)


def test_plugin_settings_survive_bank_overrides() -> None:
    settings = Settings(plugins={"reranker": {"demo": {"url": "http://x"}}})
    assert settings.for_bank({"recall_rrf_k": 9}).plugins == {"reranker": {"demo": {"url": "http://x"}}}


def test_service_api_key_never_shows() -> None:
    settings = load_settings(service_api_key="k3y-value")
    assert "k3y-value" not in repr(settings) and "k3y-value" not in str(settings.model_dump())
    assert settings.service_api_key is not None and settings.service_api_key.get_secret_value() == "k3y-value"


def test_upstreams_mcp_bank_variable_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_MCP_BANK_ID", "from-upstream")
    assert load_settings().mcp_bank_id == "from-upstream"
    monkeypatch.setenv("HINDSIGHT_API_MCP_BANK_ID", "ours")
    assert load_settings().mcp_bank_id == "ours"


def test_recalls_at_once_follow_the_cpus_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert load_settings().recall_concurrency() == 6  # twice the CPUs this process may run on
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert load_settings().recall_concurrency() == 4  # at least 4
    monkeypatch.setenv("HINDSIGHT_API_RECALL_MAX_CONCURRENT", "32")
    assert load_settings().recall_concurrency() == 32


async def test_the_engine_runs_that_many_recalls_at_once(make_settings: Callable[..., Settings]) -> None:
    async with Engine(make_settings(recall_max_concurrent=3)) as engine:
        assert engine._recalls._value == 3
