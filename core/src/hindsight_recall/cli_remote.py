"""The command line against a running service (``--url`` or ``HINDSIGHT_RECALL_URL``): same output,
no engine, no model. Only httpx and this package's light modules are imported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .service.client import API_KEY_ENV, URL_ENV, ServiceClient

URL = click.option("--url", envvar=URL_ENV,
                   help=f"Use the service at this URL instead of a local engine (env {URL_ENV}).")
API_KEY = click.option("--api-key", envvar=API_KEY_ENV, help=f"Bearer key for --url (env {API_KEY_ENV}).")


def client(url: str, api_key: str | None) -> ServiceClient:
    return ServiceClient(url, api_key)


def recall(url: str, api_key: str | None, bank: str, query: str, options: dict[str, Any]) -> dict[str, Any]:
    """POST the recall; ``options`` are :meth:`Engine.recall`'s names as the command line passes them."""
    body: dict[str, Any] = {"query": query, "budget": options["budget"], "max_tokens": options["max_tokens"],
                            "query_timestamp": options["query_timestamp"], "types": options["types"],
                            "tags": options["tags"], "tags_match": options["tags_match"], "trace": options["trace"],
                            "limit": options["limit"], "include": {"entities": {"max_tokens": 500}}}
    if options["include_chunks"] is not None:
        body["include"]["chunks"] = {"max_tokens": options["include_chunks"]}
    with client(url, api_key) as c:
        return c.recall(bank, body)


def retain(url: str, api_key: str | None, file: Path, bank: str | None) -> str:
    """Validate the file here (errors name their line), then send it in one request: one transaction."""
    from .jsonl import parse_lines

    text = file.read_text(encoding="utf-8")
    objects = []
    for (bank_id, _, _), raw in zip(parse_lines(text.splitlines(), bank),
                                    (line for line in text.splitlines() if line.strip()), strict=True):
        objects.append({**json.loads(raw), "bank": bank_id})
    with client(url, api_key) as c:
        stats = c.import_memories(objects)
    return (f"retained {stats['memories']} memories in {stats['banks']} bank(s) in {stats['seconds']:.2f} s "
            f"({stats['links']} links)")


def bank_list(url: str, api_key: str | None) -> list[dict[str, Any]]:
    with client(url, api_key) as c:
        return [{"bank_id": b["bank_id"], "memories": b["fact_count"], "created_at": b["created_at"]}
                for b in c.list_banks()]


def bank_stats(url: str, api_key: str | None, bank_id: str) -> dict[str, Any]:
    with client(url, api_key) as c:
        return c.bank_stats(bank_id)


def bank_delete(url: str, api_key: str | None, bank_id: str) -> bool:
    with client(url, api_key) as c:
        c.delete_bank(bank_id)
    return True


def bank_forget(url: str, api_key: str | None, bank_id: str, ids: tuple[str, ...]) -> int:
    with client(url, api_key) as c:
        c.bank_stats(bank_id)  # an unknown bank is an error, as locally
        return sum(c.forget(bank_id, memory_id) for memory_id in dict.fromkeys(ids))


def bank_config(url: str, api_key: str | None, bank_id: str, values: dict[str, Any]) -> dict[str, Any]:
    with client(url, api_key) as c:
        return c.bank_config(bank_id, values)
