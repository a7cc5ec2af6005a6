"""Server time of each console page on an existing bank: a real ``serve`` over a data directory.

Run ``python -m hindsight_recall.bench.console --data-dir DIR --out FILE`` on a directory that
``python -m hindsight_recall.bench.banks`` filled (the largest bank is used unless ``--bank`` names
one). Each page is fetched ``--repeat`` times after one warm-up; the median and the worst are printed,
with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx


def pages(client: httpx.Client, bank_id: str) -> dict[str, str]:
    """Every console page of the bank, with real ids taken from the API."""
    base = f"/ui/banks/{quote(bank_id, safe='')}"
    listing = client.get(f"/v1/default/banks/{quote(bank_id, safe='')}/memories/list", params={"limit": 1}).json()
    memory = listing["items"][0]
    entities = client.get(f"{base}/entities").text
    entity = entities.split("memories?entity=", 1)[1][:36] if "memories?entity=" in entities else ""
    return {
        "banks": "/ui/", "bank": base, "recall (form only)": f"{base}/recall",
        "recall (mid, traced)": f"{base}/recall?query={quote(memory['text'][:60])}&budget=mid",
        "recall + why not": f"{base}/recall?query={quote(memory['text'][:60])}&why={quote(memory['id'])}",
        "memories": f"{base}/memories", "memories, text filter": f"{base}/memories?q=the",
        "memories, page 100": f"{base}/memories?offset=5000",
        "memories, by entity": f"{base}/memories?entity={entity}",
        "memory": f"{base}/memories/{quote(memory['id'], safe='')}",
        "memories, by date": f"{base}/memories?time_field=created_at&start_date=2000-01-01",
        "documents": f"{base}/documents", "entities": f"{base}/entities",
        "operations": f"{base}/operations", "bank's link count (image)": f"{base}/links.svg",
    }


def main() -> None:
    from ..settings import load_settings
    from ..testing.service import ServerThread

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--bank")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    a = parser.parse_args()
    server = ServerThread(load_settings(embedded_data_dir=a.data_dir, reranker_provider="rrf")).start()
    try:
        with httpx.Client(base_url=server.url, timeout=300) as client:
            banks = client.get("/v1/default/banks").json()["banks"]
            bank = a.bank or max(banks, key=lambda b: b.get("fact_count") or 0)["bank_id"]
            size = next((b.get("fact_count") for b in banks if b["bank_id"] == bank), None)
            timings: dict[str, Any] = {}
            for name, path in pages(client, bank).items():
                assert client.get(path).status_code == 200, path
                samples = []
                for _ in range(a.repeat):
                    started = time.perf_counter()
                    response = client.get(path)
                    samples.append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200, path
                timings[name] = {"median_ms": round(statistics.median(samples), 1), "max_ms": round(max(samples), 1)}
                print(f"{name:24} median {timings[name]['median_ms']:8.1f} ms   max {timings[name]['max_ms']:8.1f} ms")
    finally:
        server.stop()
    result = {"bank": bank, "memories": size, "repeat": a.repeat, "load_average": os.getloadavg(), "pages": timings}
    print(json.dumps(result))
    with a.out.open("a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
