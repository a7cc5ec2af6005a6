"""pgvector's ``vector`` type on a psycopg connection: set up once per connection, with dumper classes
made once per process.

``pgvector.psycopg.register_vector_async`` looks up four types and makes two new dumper classes for
each on every call, and those classes are never freed (psycopg keeps the classes it has adapted
with), so calling it on every retain grew the server by a few KB per retain without end.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

from ..errors import DatabaseError

#: psycopg connections whose adapters already know ``vector`` (entries go with their connections)
_ready: weakref.WeakSet[Any] = weakref.WeakSet()
#: distinct ``vector`` type oids given their own dumper classes; one database has one
MAX_OIDS = 8


@functools.lru_cache(maxsize=MAX_OIDS)
def dumpers(oid: int) -> tuple[type[Any], type[Any]]:
    """The text and binary dumpers of pgvector's ``vector`` for type ``oid`` (named by oid, so that
    ``copy.set_types`` finds them)."""
    from pgvector.psycopg.vector import VectorBinaryDumper, VectorDumper

    return (type("VectorOidDumper", (VectorDumper,), {"oid": oid}),
            type("VectorOidBinaryDumper", (VectorBinaryDumper,), {"oid": oid}))


async def register_vector(raw: Any) -> None:
    """Dump numpy arrays and pgvector ``Vector`` objects as ``vector``, and load ``vector`` columns as
    ``Vector`` objects, on the psycopg connection ``raw``; a connection already set up costs nothing."""
    if raw in _ready:
        return
    from pgvector import Vector
    from pgvector.psycopg.vector import VectorBinaryLoader, VectorLoader
    from psycopg.types import TypeInfo

    info = await TypeInfo.fetch(raw, "vector")
    if info is None:
        raise DatabaseError("the vector type is missing from the database: is the pgvector extension installed?")
    info.register(raw)
    text_dumper, binary_dumper = dumpers(info.oid)
    adapters = raw.adapters
    for python_type in (Vector, "numpy.ndarray"):
        adapters.register_dumper(python_type, text_dumper)
        adapters.register_dumper(python_type, binary_dumper)
    adapters.register_loader(info.oid, VectorLoader)
    adapters.register_loader(info.oid, VectorBinaryLoader)
    _ready.add(raw)
