"""Transaction-local HNSW settings for the arms that search the vector index."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncConnection

from ...settings import Settings
from ...store.ann import set_local as set_local  # re-exported: the arms set their HNSW settings with it

log = logging.getLogger(__name__)

def hnsw_settings(ef_search: int, settings: Settings) -> dict[str, str]:
    """The search depth, plus iterative scans (``ANN_ITERATIVE_SCAN``) so filters cannot starve a LIMIT."""
    wanted = {"hnsw.ef_search": str(ef_search)}
    if settings.ann_iterative_scan:
        wanted["hnsw.iterative_scan"] = "strict_order"
        wanted["hnsw.max_scan_tuples"] = str(settings.ann_max_scan_tuples)
    return wanted


class AnnSettings:
    """Sends ``hnsw.*`` settings with ``SET LOCAL``; settings the server rejects are dropped.

    pgvector before 0.8 has no iterative scans and rejects their settings. Until every wanted
    setting has been accepted once, each goes in its own savepoint, so a rejected one never aborts
    the recall's transaction. After that, all of them go in one statement: one round trip instead of
    three per setting.
    """

    def __init__(self) -> None:
        #: settings the server rejected; never sent again
        self.unsupported: set[str] = set()
        self._accepted: set[str] = set()

    async def apply(self, conn: AsyncConnection, wanted: Mapping[str, str]) -> None:
        names = [n for n in wanted if n not in self.unsupported]
        if not names:
            return
        if self._accepted.issuperset(names):
            await conn.exec_driver_sql(set_local({n: wanted[n] for n in names}))
            return
        for name in names:
            try:
                async with conn.begin_nested():
                    await conn.exec_driver_sql(set_local({name: wanted[name]}))
            except Exception as exc:  # an older pgvector: remember, and never abort the query
                log.warning("the server rejects %s (%s); not sending it again", name, exc)
                self.unsupported.add(name)
            else:
                self._accepted.add(name)
