"""A bank's memory graph, one page of it: memories, the links among them and the entities they name."""

from __future__ import annotations

from typing import Any

from ..store.graph import MAX_EDGES as MAX_EDGES  # re-exported: what a face shows of a page
from ..store.graph import GraphPage as GraphPage
from ..store.graph import graph_page
from ._part import Part, require_bank


class Graph(Part):
    """Read a page of a bank's memory graph."""

    async def page(self, bank_id: str, **filters: Any) -> GraphPage:
        """The newest memories matching ``filters`` (``fact_type``, ``search``, ``tags``, ``tags_match``,
        ``document_id``, ``chunk_id``, ``limit``), with their links and entity names.

        :raises BankNotFound: no such bank.
        """
        async with self._transaction("graph") as conn:
            await require_bank(conn, bank_id)
            return await graph_page(conn, bank_id, **filters)
