"""Chunks read back: a document's in order, or one by its id alone.

A chunk id starts with its bank (``{bank}_{document}_{index}``, with ``_`` and ``~`` escaped in the
bank and document ids, as upstream Hindsight forms them), so a lookup by id alone reads only the
banks the id can name, through the table's (bank, id) key, and never answers with another bank's
chunk: of two banks holding the same id (possible only for ids stored before escaping), the one the
id names when read as escaped wins, and when neither does the id is refused as ambiguous.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import InvalidRequest
from .banks import MAX_BANK_ID

_COLUMNS = "chunk_id, document_id, bank_id, chunk_index, chunk_text, created_at"
#: ``~`` escapes itself and ``_`` in the parts of a chunk id, so the parts can be told apart again
_ESCAPES = {"~": "~7E", "_": "~5F"}
_UNESCAPES = {v: k for k, v in _ESCAPES.items()}


def escape_part(value: str) -> str:
    """A bank or document id as a part of a chunk id: without ``_`` (upstream Hindsight's escaping)."""
    return "".join(_ESCAPES.get(ch, ch) for ch in value)
#: ``sha256:`` and 64 hex digits: the id of a chunk whose bank id was too long to lead it
_BARE_DIGEST_LENGTH = 71


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        token = value[i : i + 3]
        if token in _UNESCAPES:
            out.append(_UNESCAPES[token])
            i += 3
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def candidate_banks(chunk_id: str) -> list[str]:
    """Every bank id ``chunk_id`` can begin with: each prefix before a ``_``, as written and unescaped."""
    out: dict[str, None] = {}
    for i, ch in enumerate(chunk_id):
        if i > 4 * MAX_BANK_ID:
            break
        if ch == "_" and i:
            prefix = chunk_id[:i]
            for bank in (prefix, _unescape(prefix)):
                if len(bank) <= MAX_BANK_ID:
                    out[bank] = None
    return list(out)


def _named(row: Any) -> bool:
    """Whether the row's id is the one its own bank, document and index make as escaped ids are made."""
    bank = escape_part(row.bank_id)
    if row.chunk_id.startswith(f"{bank}_sha256:"):
        return True
    if row.document_id is None:
        return bool(row.chunk_id.startswith(f"{bank}__"))
    return bool(row.chunk_id == f"{bank}_{escape_part(row.document_id)}_{row.chunk_index}")


def _row(r: Any) -> dict[str, Any]:
    return {"chunk_id": r.chunk_id, "document_id": r.document_id or "", "bank_id": r.bank_id,
            "chunk_index": r.chunk_index, "chunk_text": r.chunk_text,
            "created_at": r.created_at.isoformat() if r.created_at else ""}


async def get_chunk(conn: AsyncConnection, chunk_id: str) -> dict[str, Any] | None:
    """The chunk ``chunk_id`` names, or ``None``; an id two banks hold and neither names as escaped
    is a 409 (:class:`InvalidRequest`)."""
    banks = candidate_banks(chunk_id)
    if banks:
        rows = (await conn.execute(text(f"SELECT {_COLUMNS} FROM chunks WHERE bank_id = ANY(:banks) "
                                        "AND chunk_id = :id"), {"banks": banks, "id": chunk_id})).all()
    elif chunk_id.startswith("sha256:") and len(chunk_id) == _BARE_DIGEST_LENGTH:
        rows = (await conn.execute(text(f"SELECT {_COLUMNS} FROM chunks WHERE chunk_id = :id"),
                                   {"id": chunk_id})).all()
    else:
        return None
    if len(rows) > 1:
        rows = [r for r in rows if _named(r)]
        if len(rows) != 1:
            raise InvalidRequest("chunk_id", "names a chunk in more than one bank (an id stored before ids were "
                                             "escaped); read it through its bank's documents/{document_id}/chunks",
                                 status=409)
    return _row(rows[0]) if rows else None


async def document_chunks(
    conn: AsyncConnection, bank_id: str, document_id: str, *, limit: int = 100, offset: int = 0,
) -> dict[str, Any] | None:
    """A page of the document's chunks by index with their total, or ``None`` when the bank has no
    such document."""
    params = {"bank": bank_id, "doc": document_id}
    known = await conn.scalar(text("SELECT EXISTS (SELECT 1 FROM documents WHERE bank_id = :bank "
                                   "AND document_id = :doc)"), params)
    if not known:
        return None
    total = int(await conn.scalar(text("SELECT count(*) FROM chunks WHERE bank_id = :bank AND document_id = :doc"),
                                  params) or 0)
    rows = await conn.execute(text(
        f"SELECT {_COLUMNS} FROM chunks WHERE bank_id = :bank AND document_id = :doc "
        "ORDER BY chunk_index, chunk_id LIMIT :limit OFFSET :offset"
    ), {**params, "limit": limit, "offset": offset})
    return {"items": [_row(r) for r in rows], "total": total, "limit": limit, "offset": offset}
