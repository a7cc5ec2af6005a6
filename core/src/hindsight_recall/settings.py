"""Typed settings, read from ``HINDSIGHT_API_*`` environment variables (and a ``.env`` file).

Hard-invalid values fail at startup naming the variable; soft-invalid ones warn and fall back.
Plugins own their own small settings classes with longer prefixes.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import PREFIX as PREFIX
from .errors import ConfigError
from .errors import describe_validation_error as describe_validation_error
from .errors import redact as redact

log = logging.getLogger(__name__)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DECAY_FUNCTIONS = ("linear", "exponential", "none")
#: The keys of ``Settings.plugins``: one section per plugin kind (``hindsight_recall.protocols.KINDS``).
PLUGIN_KINDS = ("text_search", "reranker", "retriever", "budget_function", "embeddings", "llm")
GRAPH_RETRIEVERS = ("link_expansion",)


#: the largest per-arm row budget B a setting may give (the arms' LIMIT; HNSW's search depth stops at 1000)
MAX_RECALL_BUDGET = 10_000
#: the largest arm weight or context weight a setting may give
MAX_RECALL_WEIGHT = 1000.0
#: the longest text a bank setting may hold
MAX_SETTING_TEXT = 1000


#: the longest retain mission or custom instructions a setting may hold
MAX_PROMPT_TEXT = 20_000


class ExtractionSettings(BaseModel):
    """The settings that shape retain's fact extraction: the process's, and a bank's or a request's overrides.

    Whether ``custom`` mode has its instructions is checked where the layers meet
    (:func:`hindsight_recall.retain.options.extraction_options`), since any layer may give either.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    #: characters of an item's content one extraction call reads; longer content is split first
    retain_chunk_size: int = Field(3000, ge=100)
    #: ``concise`` keeps what is worth remembering; ``verbose`` keeps every detail; ``custom`` follows
    #: RETAIN_CUSTOM_INSTRUCTIONS
    retain_extraction_mode: Literal["concise", "verbose", "custom"] = "concise"
    retain_extract_causal_links: bool = True
    #: what this deployment's memories are for; the model weighs what to keep by it
    retain_mission: str | None = Field(None, max_length=MAX_PROMPT_TEXT)
    retain_custom_instructions: str | None = Field(None, max_length=MAX_PROMPT_TEXT)

    @field_validator("retain_mission", "retain_custom_instructions")
    @classmethod
    def _blank_text_is_unset(cls, value: str | None) -> str | None:
        value = value.strip() if value is not None else None
        if value and "\x00" in value:  # PostgreSQL's jsonb cannot hold it
            raise ValueError("must not contain NUL bytes")
        return value or None

    @field_validator("retain_extraction_mode", mode="before")
    @classmethod
    def _mode_any_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class BankSettings(ExtractionSettings):
    """The settings a bank may override in ``banks.config``.

    Every value is range-checked when set, so no accepted value can make a later recall fail.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    recall_budget_function: str = Field("fixed", min_length=1, max_length=64, pattern=r"^\s*[A-Za-z0-9_.-]+\s*$")
    recall_budget_fixed_low: int = Field(100, ge=1, le=MAX_RECALL_BUDGET)
    recall_budget_fixed_mid: int = Field(300, ge=1, le=MAX_RECALL_BUDGET)
    recall_budget_fixed_high: int = Field(1000, ge=1, le=MAX_RECALL_BUDGET)
    recall_budget_adaptive_low: float = Field(0.025, gt=0, le=MAX_RECALL_WEIGHT, allow_inf_nan=False)
    recall_budget_adaptive_mid: float = Field(0.075, gt=0, le=MAX_RECALL_WEIGHT, allow_inf_nan=False)
    recall_budget_adaptive_high: float = Field(0.25, gt=0, le=MAX_RECALL_WEIGHT, allow_inf_nan=False)
    recall_budget_min: int = Field(20, ge=1, le=MAX_RECALL_BUDGET)
    recall_budget_max: int = Field(2000, ge=1, le=MAX_RECALL_BUDGET)
    enable_temporal_retrieval: bool = True
    enable_graph_retrieval: bool = True
    enable_reranking: bool = True
    enable_text_search: bool = True
    # Fusion of the arms' lists (recall/fusion.py): by min-max scaled scores, or by ranks (RRF).
    recall_fusion: Literal["score", "rrf"] = "score"
    recall_score_weights: str = Field("keyword:1,semantic:0.5,graph:0.3,temporal:0.3", max_length=MAX_SETTING_TEXT)
    recall_rrf_k: int = Field(5, ge=1, le=MAX_RECALL_BUDGET)
    recall_rrf_weights: str = Field("keyword:1.5", max_length=MAX_SETTING_TEXT)
    # The context stage (recall/context.py): neighbours in a memory's document lift it.
    recall_context_enabled: bool = True
    recall_context_neighbour_weight: float = Field(0.3, ge=0, le=MAX_RECALL_WEIGHT, allow_inf_nan=False)
    recall_context_document_weight: float = Field(0.2, ge=0, le=MAX_RECALL_WEIGHT, allow_inf_nan=False)
    recall_context_expand: int = Field(50, ge=0, le=MAX_RECALL_BUDGET)
    # A question that names a past period ranks the memories of that period first (recall/scoring.period_first).
    recall_period_first: bool = True

    @field_validator("recall_score_weights", "recall_rrf_weights")
    @classmethod
    def _arm_weights(cls, value: str) -> str:
        """``arm:weight,…`` with printable text; a weight, where given, is a number from 0 to 1000."""
        if not value.isprintable():
            raise ValueError("must be printable text (arm:weight,…)")
        for entry in filter(None, (e.strip() for e in value.split(","))):
            weight = entry.partition(":")[2].strip()
            try:
                number = float(weight) if weight else 0.0
            except ValueError:
                raise ValueError(f"{entry!r}: the weight must be a number") from None
            if not 0 <= number <= MAX_RECALL_WEIGHT:
                raise ValueError(f"{entry!r}: the weight must be from 0 to {MAX_RECALL_WEIGHT:g}")
        return value

    @model_validator(mode="after")
    def _budget_clamp_ordered(self) -> BankSettings:
        if self.recall_budget_min > self.recall_budget_max:
            raise ValueError("RECALL_BUDGET_MIN must not exceed RECALL_BUDGET_MAX")
        return self


class Settings(BaseSettings, BankSettings):
    """Every core setting, one field per ``HINDSIGHT_API_<NAME>`` variable."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, env_file=".env", extra="ignore", validate_assignment=True
    )

    # Database
    database_url: str | None = None
    database_schema: str = "public"
    embedded_data_dir: Path | None = None
    embedded_server_settings: str = ""
    db_pool_min_size: int = Field(5, ge=0)
    db_pool_max_size: int = Field(100, ge=1)
    db_command_timeout: float = Field(60, ge=0)
    db_acquire_timeout: float = Field(30, ge=0)
    db_statement_timeout: float = Field(600, ge=0)
    db_session_setup_on_acquire: bool = True
    citus_direct_reads: bool = True

    # Vector search
    vector_extension: Literal["pgvector"] = "pgvector"
    ann_iterative_scan: bool = True
    ann_max_scan_tuples: int = 4000
    vector_index_min_rows: int = Field(5_000, ge=0)
    vector_index_slots: int = Field(8, ge=0, le=1000)

    # Keyword search
    text_search_extension: str = "native"
    bm25_min_score: float = 0.0
    bm25_max_query_terms: int = Field(16, ge=0)
    bm25_selective_terms: bool = True
    bm25_max_term_frequency: float = Field(1.0, gt=0, le=1)

    # Floors
    semantic_min_similarity: float = Field(0.3, ge=0, le=1)
    graph_seed_min_similarity: float = Field(0.3, ge=0, le=1)
    temporal_semantic_min_similarity: float = Field(0.1, ge=0, le=1)
    semantic_link_min_similarity: float = Field(0.7, ge=0, le=1)
    # The cosine floors above are on the bundled model's scale; carry them to the configured model's
    # (recall/floors.py).
    semantic_floor_calibration: bool = True
    # When no memory reaches any arm's floor, this many nearest memories come back as weak results.
    recall_weak_results: int = Field(5, ge=0)

    # Graph arm
    graph_retriever: str = "link_expansion"
    link_expansion_per_entity_limit: int = Field(200, ge=1)
    link_expansion_timeout: float = Field(10, gt=0)
    link_expansion_max_entity_fraction: float = Field(0.2, gt=0, le=1)

    # Recall
    #: 0: twice the CPUs this process may run on, at least 4 (:meth:`recall_concurrency`)
    recall_max_concurrent: int = Field(0, ge=0)
    recall_connection_budget: int = Field(4, ge=1)
    recall_max_query_tokens: int = Field(500, ge=0)
    recall_max_candidates_per_source: int = Field(0, ge=0)
    recall_strategy_boosts: str = ""
    query_analyzer_languages: str = ""
    reranker_max_candidates: int = Field(300, ge=1)
    reranker_max_candidates_low: int = Field(0, ge=0)
    reranker_max_candidates_mid: int = Field(0, ge=0)
    reranker_max_candidates_high: int = Field(0, ge=0)
    recency_decay_function: str = "linear"
    recency_decay_linear_window_days: float = 365
    recency_decay_halflife_days: float = 90
    tokenizer_encoding: str = "cl100k_base"

    # Embeddings
    embeddings_provider: str = "local"
    embeddings_local_model: str | None = None
    embeddings_query_prefix: str = ""
    embeddings_passage_prefix: str = ""
    #: questions whose embeddings are kept for when they are asked again, in any bank (0: none)
    embeddings_query_cache_size: int = Field(1024, ge=0)
    #: texts per forward pass; unset, the backend's best on CPU (64 on torch, 8 on ONNX Runtime, 1 with INT8)
    embeddings_batch_size: int | None = Field(None, ge=1)
    #: ``torch`` runs the model through sentence-transformers; ``onnx`` through ONNX Runtime (a
    #: dependency of core); ``auto`` picks ``onnx``, falling back to ``torch`` for a model it cannot run
    embeddings_local_backend: Literal["auto", "torch", "onnx"] = "auto"
    #: where ONNX exports are kept (default ``~/.cache/hindsight-recall/onnx``)
    embeddings_onnx_cache_dir: Path | None = None
    #: run the ONNX export with INT8 weights (dynamic quantisation): about 1.7× faster on CPU, vectors at
    #: cosine 0.95–0.99 of the float ones, LoCoMo dev unchanged within .005 (docs/benchmarks.md)
    embeddings_onnx_int8: bool = True

    # Reranking
    reranker_provider: str = "local"
    reranker_send_bank_as_header: bool = False
    reranker_on_error: Literal["fallback", "raise"] = "fallback"
    #: Seconds one reranker call may take before the recall falls back (or fails, with ``raise``).
    reranker_timeout: float = Field(30, gt=0)
    model_init_timeout: float = Field(300, gt=0)

    # The chat model that reflect asks (upstream Hindsight's setting names); unset, reflect answers 501
    #: openai (and other OpenAI-compatible names), anthropic, gemini ...; ``none`` turns it off. Unset
    #: with an API key or a base URL given means ``openai``, as upstream's default provider
    llm_provider: str | None = None
    #: the model; unset, the provider's default (upstream's table)
    llm_model: str | None = None
    llm_api_key: SecretStr | None = None
    #: the server's base URL; unset, the provider's public endpoint (or the local default of ollama, lmstudio)
    llm_base_url: str | None = None
    #: seconds one attempt may take, from sending to the reply's last byte
    llm_timeout: float = Field(120, gt=0)
    #: attempts after the first, on 429, 5xx and timeouts
    llm_max_retries: int = Field(3, ge=0, le=20)
    llm_initial_backoff: float = Field(1.0, ge=0)
    llm_max_backoff: float = Field(60.0, ge=0)
    #: calls in flight across the process
    llm_max_concurrent: int = Field(32, ge=1)
    #: ours: read replies as server-sent events (a slow model keeps the connection busy, never idle)
    llm_stream: bool = False
    #: ours: how the OpenAI-compatible provider asks for JSON: ``json_schema`` (the schema itself),
    #: ``json_object`` (any JSON; for servers without schemas) or ``none`` (the prompt alone)
    llm_response_format: Literal["json_schema", "json_object", "none"] = "json_schema"

    # Retain through the chat model (fact extraction); upstream's names. Each RETAIN_LLM_* left unset
    # takes the LLM_* value, except that a RETAIN_LLM_PROVIDER of its own brings its own default model
    retain_llm_provider: str | None = None
    retain_llm_model: str | None = None
    retain_llm_api_key: SecretStr | None = None
    retain_llm_base_url: str | None = None
    retain_llm_timeout: float | None = Field(None, gt=0)
    retain_llm_max_retries: int | None = Field(None, ge=0, le=20)
    retain_llm_initial_backoff: float | None = Field(None, ge=0)
    retain_llm_max_backoff: float | None = Field(None, ge=0)
    retain_llm_max_concurrent: int | None = Field(None, ge=1)
    # RETAIN_CHUNK_SIZE, RETAIN_EXTRACTION_MODE, RETAIN_EXTRACT_CAUSAL_LINKS, RETAIN_MISSION and
    # RETAIN_CUSTOM_INSTRUCTIONS are ExtractionSettings' (a bank may override them)
    #: the most tokens one extraction reply may take
    retain_max_completion_tokens: int = Field(16384, ge=1)

    # The HTTP service (`hindsight-recall serve`); HOST and PORT are upstream Hindsight's names
    host: str = "127.0.0.1"
    port: int = Field(8888, ge=0, le=65535)
    #: a bearer token every request but the health probes must carry; unset, no authentication
    service_api_key: SecretStr | None = None
    service_max_body_bytes: int = Field(32 * 1024 * 1024, ge=1)
    service_max_query_bytes: int = Field(8 * 1024, ge=1)
    #: seconds one request may take before it is answered 504 (0 = no limit)
    service_request_timeout: float = Field(300, ge=0)
    #: recalls admitted at once (running or waiting for RECALL_MAX_CONCURRENT); more get 503
    service_max_recalls_in_flight: int = Field(64, ge=1)
    service_retry_after: int = Field(1, ge=0)
    #: seconds in-flight requests may take to finish after SIGTERM
    service_shutdown_timeout: float = Field(5, ge=0)
    #: items a synchronous retain may carry; a larger one is refused (413) in favour of ``async: true``
    service_max_sync_retain_items: int = Field(2000, ge=1)
    #: async operations this process runs at once (0: it queues operations but runs none)
    service_operation_workers: int = Field(2, ge=0)
    #: seconds a worker's claim on an operation lasts unless renewed; a dead worker's operation is
    #: taken again after it
    service_operation_lease: float = Field(30, ge=1)
    #: items an async retain commits per transaction (its progress is recorded after each)
    service_operation_chunk_items: int = Field(2000, ge=1)
    service_access_log: Literal["text", "json", "off"] = "text"
    #: ``POST .../files/retain`` (upstream's names): served at all; the most files one request may carry,
    #: and the most megabytes they may hold together (SERVICE_MAX_BODY_BYTES bounds the request first)
    enable_file_upload_api: bool = True
    file_conversion_max_batch_size: int = Field(10, ge=1)
    file_conversion_max_batch_size_mb: int = Field(100, ge=1)
    #: the most an archive (bank import, restore, clone) may expand to, all entries together, in bytes
    archive_max_bytes: int = Field(256 * 1024 * 1024, ge=1)
    #: the most entries an archive may hold
    archive_max_entries: int = Field(100_000, ge=1)
    #: the deepest an archive's JSON may nest (a document, a line of links, the manifest)
    archive_max_depth: int = Field(32, ge=4, le=900)
    #: webhook deliveries this process makes at once (their own lane of the queue)
    webhook_delivery_workers: int = Field(4, ge=1)
    #: seconds before each new attempt of a failed delivery; one attempt more than delays in all
    webhook_retry_delays: tuple[Annotated[float, Field(ge=0)], ...] = (5, 300, 1800, 7200, 18000)
    #: hosts a webhook may name although they are private, loopback or link-local addresses
    #: (comma-separated); others are refused when the webhook is registered
    webhook_allowed_hosts: str = ""
    #: record every write (who, what, when) in the bank's audit log
    audit_log_enabled: bool = True
    #: days an entry of the audit log is kept (upstream's name); older ones are pruned in the background.
    #: -1 keeps every entry
    audit_log_retention_days: int = -1
    #: the browser console at ``/ui`` (same address and API key as the API); false answers 404 there
    console_enabled: bool = True
    #: seconds a console login lasts (its cookie holds a signed token, never the key)
    console_session_ttl: float = Field(12 * 3600, gt=0)
    #: the bank MCP tools use when neither the call, the URL (``/mcp/{bank_id}/``) nor an ``X-Bank-Id``
    #: header names one; upstream's HINDSIGHT_MCP_BANK_ID is read too
    mcp_bank_id: str = Field("default", validation_alias=AliasChoices(
        "mcp_bank_id", f"{PREFIX}MCP_BANK_ID", "HINDSIGHT_MCP_BANK_ID"))

    # Plugins
    #: Plugin kind -> plugin name -> that plugin's own settings given in code (a mapping of field
    #: names, or an instance of its settings class), e.g. ``{"reranker": {"local": {...}}}``: names
    #: are unique per kind only (``local`` is an embedder and a reranker). The plugin's environment
    #: variables fill in the rest. The older form without the kind is deprecated.
    plugins: dict[str, Any] = Field(default_factory=dict)

    @field_validator("database_schema")
    @classmethod
    def _schema_identifier(cls, value: str) -> str:
        if not _IDENTIFIER.match(value):
            raise ValueError("must be a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
        return value

    @field_validator("embedded_server_settings")
    @classmethod
    def _server_settings(cls, value: str) -> str:
        parse_server_settings(value)
        return value

    @field_validator("audit_log_retention_days")
    @classmethod
    def _retention_days(cls, value: int) -> int:
        if value != -1 and value < 1:
            raise ValueError("must be a number of days, at least 1, or -1 to keep every entry")
        return value

    @field_validator("recency_decay_function")
    @classmethod
    def _decay_known(cls, value: str) -> str:
        value = value.strip().lower()
        if value not in DECAY_FUNCTIONS:
            log.warning(
                "%sRECENCY_DECAY_FUNCTION=%r is unknown (choices: %s); using 'linear'",
                PREFIX, value, ", ".join(DECAY_FUNCTIONS),
            )
            return "linear"
        return value

    @field_validator("graph_retriever")
    @classmethod
    def _graph_known(cls, value: str) -> str:
        value = value.strip().lower()
        if value not in GRAPH_RETRIEVERS:
            log.warning(
                "%sGRAPH_RETRIEVER=%r is unknown (choices: %s); using 'link_expansion'",
                PREFIX, value, ", ".join(GRAPH_RETRIEVERS),
            )
            return "link_expansion"
        return value

    @field_validator("text_search_extension", "reranker_provider", "embeddings_provider", "recall_budget_function")
    @classmethod
    def _plugin_name(cls, value: str) -> str:
        return value.strip().lower()

    @field_validator("llm_provider", "llm_model", "llm_base_url", "retain_llm_provider", "retain_llm_model",
                     "retain_llm_base_url")
    @classmethod
    def _blank_is_unset(cls, value: str | None, info: ValidationInfo) -> str | None:
        value = value.strip() if value is not None else None
        if info.field_name in ("llm_provider", "retain_llm_provider") and value:
            value = value.lower()
        return value or None

    @field_validator("plugins")
    @classmethod
    def _plugin_values(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, section in value.items():
            if key in PLUGIN_KINDS:
                if not isinstance(section, Mapping):
                    raise ValueError(f"plugins[{key!r}] must map plugin names to their settings")
                for name, values in section.items():
                    _check_plugin_values(f"plugins[{key!r}][{name!r}]", values)
                continue
            _check_plugin_values(f"plugins[{key!r}]", section)
            warnings.warn(
                f"plugins[{key!r}] without the plugin kind is deprecated, and applies to every plugin named "
                f"{key!r} whatever its kind: write plugins={{'<kind>': {{{key!r}: ...}}}} with a kind of "
                f"{', '.join(PLUGIN_KINDS)}", DeprecationWarning, stacklevel=2,
            )
        return value

    @model_validator(mode="after")
    def _iterative_scan_tuples(self) -> Settings:
        if self.ann_iterative_scan and self.ann_max_scan_tuples < 1:
            raise ValueError("ANN_MAX_SCAN_TUPLES must be >= 1 while ANN_ITERATIVE_SCAN is on")
        if self.db_pool_min_size > self.db_pool_max_size:
            raise ValueError("DB_POOL_MIN_SIZE must not exceed DB_POOL_MAX_SIZE")
        return self

    @model_validator(mode="after")
    def _custom_mode_has_instructions(self) -> Settings:
        if self.retain_extraction_mode == "custom" and not self.retain_custom_instructions:
            raise ValueError(f"{PREFIX}RETAIN_EXTRACTION_MODE=custom needs {PREFIX}RETAIN_CUSTOM_INSTRUCTIONS: "
                             "the instructions that say what to extract")
        return self

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact(value) if name == "database_url" and isinstance(value, str) else value

    #: field -> the variable that set it, where that is not the field's own (:meth:`copy_from`)
    _set_by: dict[str, str] = PrivateAttr(default_factory=dict)

    def variable(self, field: str) -> str:
        """The environment variable that set ``field``, for messages that tell what to change.

        :param field: a field name, e.g. ``llm_timeout``.
        """
        return self._set_by.get(field, f"{PREFIX}{field.upper()}")

    def copy_from(self, values: Mapping[str, tuple[str, Any]]) -> Settings:
        """A copy with other variables' values in some fields' places (an operation's ``<OPERATION>_LLM_*``
        in its ``LLM_*``), each field then named by the variable that set it (:meth:`variable`).

        :param values: field -> (the variable whose value it takes, that value).
        """
        copy = self.model_copy(update={field: value for field, (_, value) in values.items()})
        copy._set_by = {**self._set_by, **{field: variable for field, (variable, _) in values.items()}}
        return copy

    def recall_concurrency(self) -> int:
        """Recalls that run at once: RECALL_MAX_CONCURRENT, or when it is 0, twice the CPUs this process may
        run on, at least 4. More recalls at once than the machine runs only share it out: each then costs
        more CPU (in this process and the database's), and throughput falls as clients are added."""
        if self.recall_max_concurrent:
            return self.recall_max_concurrent
        return max(4, 2 * usable_cpus())

    def pooled_connections(self) -> int:
        """Connections the pool keeps open between uses: DB_POOL_MIN_SIZE, or as many as the recalls that run
        at once can hold (RECALL_CONNECTION_BUDGET each) when that is more, within DB_POOL_MAX_SIZE. One
        more is closed when it is given back, and opened again at the next busy moment, where it costs
        the database a new backend and each statement's planning again (at 8 clients on LoCoMo, 8.3 ms of
        database CPU per recall instead of 6.4)."""
        held = self.recall_concurrency() * self.recall_connection_budget
        return min(self.db_pool_max_size, max(self.db_pool_min_size, held, 1))

    def server_settings(self) -> dict[str, str]:
        """The embedded server's PostgreSQL settings: sized to the machine, then EMBEDDED_SERVER_SETTINGS."""
        return {**sized_settings(), **parse_server_settings(self.embedded_server_settings)}

    def for_bank(self, overrides: dict[str, Any] | None) -> Settings:
        """Return these settings with a bank's stored overrides applied (validated)."""
        if not overrides:
            return self
        checked = BankSettings(**{**self.bank_values(), **overrides})
        return self.model_copy(update=checked.model_dump())

    def bank_values(self) -> dict[str, Any]:
        """The bank-configurable part of these settings."""
        return {name: getattr(self, name) for name in BankSettings.model_fields}

    def reranker_cap(self, budget: str) -> int:
        """The pre-rerank cap ``K`` for a budget level."""
        per_level: int = getattr(self, f"reranker_max_candidates_{budget}")
        return per_level or self.reranker_max_candidates


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container's cpuset narrows)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def sized_settings(memory_bytes: int | None = None) -> dict[str, str]:
    """PostgreSQL settings sized to the machine (PostgreSQL's defaults fit 1990s machines).

    ``shared_buffers`` a quarter of RAM up to 4 GB; ``effective_cache_size`` half of RAM;
    ``work_mem`` RAM/512 within 4-64 MB (per sort, per connection); ``maintenance_work_mem``
    RAM/16 within 64 MB-2 GB (HNSW builds run much faster when the graph fits); ``random_page_cost``
    1.1, as for a local SSD: the default 4 prices a random read as on a spinning disk, and the planner
    then scanned a bank's whole link table rather than probe its index for the graph arm's 20 seeds.
    """
    total = memory_bytes if memory_bytes is not None else _memory_bytes()
    mb = max(total // 2**20, 512)

    def clamp(value: int, low: int, high: int) -> str:
        return f"{max(low, min(value, high))}MB"

    return {
        "shared_buffers": clamp(mb // 4, 128, 4096),
        "effective_cache_size": clamp(mb // 2, 256, 1 << 20),
        "work_mem": clamp(mb // 512, 4, 64),
        "maintenance_work_mem": clamp(mb // 16, 64, 2048),
        "random_page_cost": "1.1",
    }


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 4 * 2**30


_SERVER_SETTING = re.compile(r"^[a-z_][a-z0-9_.]*$")


def parse_server_settings(value: str) -> dict[str, str]:
    """Parse ``name=value,name=value`` (EMBEDDED_SERVER_SETTINGS) into PostgreSQL settings."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, setting = item.partition("=")
        name = name.strip().lower()
        if not sep or not _SERVER_SETTING.match(name) or not setting.strip():
            raise ValueError(f"{item!r} is not NAME=VALUE (e.g. shared_buffers=2GB,work_mem=32MB)")
        if any(c in setting for c in "\n\r\x00"):
            raise ValueError(f"{item!r}: values cannot hold line breaks")
        out[name] = setting.strip()
    return out


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment, turning validation errors into :class:`ConfigError`.

    :param overrides: values that win over the environment (tests use these).
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None


M = TypeVar("M", bound=BaseModel)


def _check_plugin_values(where: str, values: Any) -> None:
    if not isinstance(values, Mapping | BaseModel):
        raise ValueError(f"{where} must be a mapping of setting names to values")


def plugin_settings(model: type[M], name: str, settings: Settings | None = None, *, kind: str | None = None) -> M:
    """Build a plugin's own settings: values given in code, then its environment variables, then defaults.

    The code values are ``settings.plugins[kind][name]``, either a mapping of field names or a ready
    ``model`` instance (returned as it is); the deprecated ``settings.plugins[name]`` is read when
    that is missing. A ``model`` that is a pydantic-settings ``BaseSettings`` reads its own prefix
    (e.g. ``HINDSIGHT_API_RERANKER_TEI_``) for fields the code leaves out; that is the only place
    the environment is consulted, so a plugin constructor calls this instead of reading
    ``os.environ``. Unknown names and invalid values raise :class:`ConfigError`, naming the variable.

    :param model: the plugin's settings class.
    :param name: the plugin's name.
    :param settings: core settings; ``None`` means no values in code.
    :param kind: the plugin's kind, one of :data:`PLUGIN_KINDS` (``None`` reads only the old form).
    :raises ValueError: for a kind that is not one of :data:`PLUGIN_KINDS`.
    """
    if kind is not None and kind not in PLUGIN_KINDS:
        raise ValueError(f"unknown plugin kind {kind!r} (kinds: {', '.join(PLUGIN_KINDS)})")
    plugins = settings.plugins if settings is not None else {}
    section = plugins.get(kind, {}) if kind is not None else {}
    where = f"plugins[{kind!r}][{name!r}]" if name in section else f"plugins[{name!r}]"
    given = section[name] if name in section else (plugins.get(name) if name not in PLUGIN_KINDS else None)
    if isinstance(given, model):
        return given
    if isinstance(given, BaseModel):
        raise ConfigError(
            f"{where} is a {type(given).__name__}, but the {name!r} plugin expects a {model.__name__}"
        )
    values = dict(given or {})
    prefix = str(model.model_config.get("env_prefix", "") or "")
    unknown = sorted(set(values) - set(model.model_fields))
    if unknown:
        raise ConfigError(
            f"{where}: unknown setting {unknown[0]!r} for the {name!r} plugin "
            f"(known: {', '.join(model.model_fields)})"
        )
    try:
        return model(**values)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, prefix)) from None
