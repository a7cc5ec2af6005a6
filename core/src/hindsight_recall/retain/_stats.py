"""What a retain call did, summed over its transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RetainStats:
    """What a retain call did and how long each part took."""

    memories: int = 0
    banks: int = 0
    links: int = 0
    seconds: float = 0.0
    embedding_seconds: float = 0.0
    #: rows, entities and chunks written
    load_seconds: float = 0.0
    #: what links add to the call: on a new bank, waiting for their computation (which overlaps the
    #: load and the index build) plus writing them
    link_seconds: float = 0.0
    #: computing the links on their own, overlapped or not
    link_compute_seconds: float = 0.0
    #: flagging a bank that reached VECTOR_INDEX_MIN_ROWS into HNSW indexes (row updates)
    index_seconds: float = 0.0
    #: building a slot's HNSW indexes after the load committed (``CREATE INDEX CONCURRENTLY``)
    index_build_seconds: float = 0.0
    #: VACUUM (ANALYZE) after a bulk load
    maintenance_seconds: float = 0.0
    #: memories forgotten because the documents they belonged to were replaced
    removed: int = 0
    per_bank: dict[str, int] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return self.memories / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "memories": self.memories, "banks": self.banks, "links": self.links,
            "seconds": round(self.seconds, 3), "embedding_seconds": round(self.embedding_seconds, 3),
            "load_seconds": round(self.load_seconds, 3), "link_seconds": round(self.link_seconds, 3),
            "link_compute_seconds": round(self.link_compute_seconds, 3),
            "index_seconds": round(self.index_seconds, 3),
            "index_build_seconds": round(self.index_build_seconds, 3),
            "maintenance_seconds": round(self.maintenance_seconds, 3),
            "memories_per_second": round(self.per_second, 1),
        }
