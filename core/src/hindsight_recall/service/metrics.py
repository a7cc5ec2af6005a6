"""Prometheus metrics of one service process, in a registry of its own (``GET /metrics``).

Labels are bounded: the route is the path *template* (``/v1/default/banks/{bank_id}/memories/recall``),
never the path itself, so bank ids and memory ids cannot grow the series.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

#: request latency buckets (seconds): a warm recall is milliseconds, a large retain many seconds
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _PoolCollector(Collector):
    """The connection pool's state, read when scraped."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def collect(self) -> Any:
        engine = self.pool()
        if engine is None:
            return
        pool = engine.pool
        checked_out = GaugeMetricFamily("hindsight_db_pool_checked_out", "Pooled connections in use")
        checked_out.add_metric([], pool.checkedout())
        yield checked_out
        size = GaugeMetricFamily("hindsight_db_pool_size", "Connections the pool keeps open (without overflow)")
        size.add_metric([], pool.size())
        yield size
        overflow = GaugeMetricFamily("hindsight_db_pool_overflow", "Connections open beyond the pool size")
        overflow.add_metric([], max(pool.overflow(), 0))
        yield overflow


class _ExtractionCollector(Collector):
    """What retain's fact extraction has cost the process (the engine keeps the totals), read when scraped."""

    def __init__(self, facts: Any) -> None:
        self.facts = facts

    def collect(self) -> Any:
        calls = CounterMetricFamily("hindsight_retain_llm_calls", "Retain model calls of extractions that succeeded")
        calls.add_metric([], self.facts.calls)
        yield calls
        tokens = CounterMetricFamily("hindsight_retain_llm_tokens", "Tokens of those calls", labels=["kind"])
        tokens.add_metric(["input"], self.facts.usage.input_tokens)
        tokens.add_metric(["output"], self.facts.usage.output_tokens)
        yield tokens


class _QueryVectorCollector(Collector):
    """How often a recall's question embedding came from the cache, read when scraped."""

    def __init__(self, query_vectors: Any) -> None:
        self.query_vectors = query_vectors

    def collect(self) -> Any:
        lookups = CounterMetricFamily("hindsight_query_embedding_cache_lookups",
                                      "Recall questions looked up in the embedding cache", labels=["result"])
        lookups.add_metric(["hit"], self.query_vectors.hits)
        lookups.add_metric(["miss"], self.query_vectors.misses)
        yield lookups


class ServiceMetrics:
    """The counters and histograms the service records."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("hindsight_http_requests", "HTTP requests answered", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("hindsight_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.requests_in_flight = Gauge("hindsight_http_requests_in_flight", "HTTP requests being answered",
                                        registry=self.registry)
        self.in_flight = Gauge("hindsight_recalls_in_flight", "Recalls admitted and not yet answered",
                               registry=self.registry)
        self.rejected = Counter("hindsight_recalls_rejected", "Recalls refused with 503 (too many in flight)",
                                registry=self.registry)
        self.phases = Histogram("hindsight_recall_phase_duration_seconds", "Duration of each recall phase",
                                ["phase"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.fallbacks = Counter("hindsight_reranker_fallbacks", "Recalls whose reranker failed and kept fused order",
                                 registry=self.registry)

    def watch_pool(self, engine: Any) -> None:
        """Report ``engine``'s connection pool at every scrape (once the database is open)."""
        self.registry.register(_PoolCollector(lambda: getattr(engine.db, "engine", None)))

    def watch_extraction(self, engine: Any) -> None:
        """Report what ``engine``'s retain model has cost (its fact extractions' calls and tokens) at every scrape."""
        self.registry.register(_ExtractionCollector(engine.facts))

    def watch_query_vectors(self, engine: Any) -> None:
        """Report the hits and misses of ``engine``'s question embedding cache at every scrape."""
        self.registry.register(_QueryVectorCollector(engine.query_vectors))

    def record_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route, str(status)).observe(seconds)

    def record_phases(self, phases: list[dict[str, Any]]) -> None:
        """A recall's phase timings, and a reranker fallback (handed over by the recall's trace)."""
        for phase in phases:
            self.phases.labels(phase["phase_name"]).observe(phase["duration_seconds"])
            if phase["phase_name"] == "reranking" and (phase.get("details") or {}).get("fallback"):
                self.fallbacks.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
