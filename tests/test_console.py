"""The console at ``/ui`` against a real ``serve``: over HTTP (escaping, form tokens, the key, bank
isolation, bad input) and in a real browser (Debian's chromium driven by selenium)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.settings import Settings, load_settings
from hindsight_recall.testing.service import ServerThread

KEY = "console-key-1"
XSS = "<img src=x onerror=alert(1)> Carol keeps a <script>alert(2)</script> diary"
FACTS = [
    {"content": "Alice works as a data engineer at Helios Robotics in Munich.", "tags": ["work"],
     "entities": [{"text": "Alice"}, {"text": "Helios Robotics"}], "timestamp": "2024-03-01T00:00:00Z"},
    {"content": "Alice ran her first marathon in Hamburg.", "tags": ["personal"], "entities": [{"text": "Alice"}]},
    {"content": "Bob cooked pasta carbonara for dinner with Alice.", "entities": [{"text": "Bob"}, {"text": "Alice"}]},
    {"content": XSS, "tags": ["<b>tag</b>"]},
]
SHOTS = Path(os.environ.get("HINDSIGHT_CONSOLE_SHOTS") or tempfile.mkdtemp(prefix="console-shots-"))


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True)


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120, headers=EXTRAS) as c:
        yield c


def _retain(http: httpx.Client, bank_id: str, items: list[dict[str, Any]], document: str) -> None:
    response = http.post(f"/v1/default/banks/{bank_id}/memories",
                         json={"items": [{**i, "document_id": document} for i in items]})
    assert response.status_code == 200, response.text


def _ids(http: httpx.Client, bank_id: str) -> dict[str, str]:
    """text -> memory id, through the API."""
    rows = http.get(f"/v1/default/banks/{bank_id}/memories/list", params={"limit": 100}).json()["items"]
    return {r["text"]: r["id"] for r in rows}


@pytest.fixture(scope="module")
def banks(http: httpx.Client) -> dict[str, str]:
    """Two banks: ``main`` holds FACTS, ``other`` one secret memory no page of ``main`` may show."""
    main, other = f"con-{uuid.uuid4().hex[:8]}", f"oth-{uuid.uuid4().hex[:8]}"
    _retain(http, main, FACTS, "chat-1")
    _retain(http, other, [{"content": "The vault code of the other bank is 4711 ZEBRA."}], "secret-doc")
    return {"main": main, "other": other}


def _form_token(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, "no form token on the page"
    return found.group(1)


# --- over HTTP -------------------------------------------------------------------------------------------

def test_every_page_renders(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    memory_id = _ids(http, main)[FACTS[0]["content"]]
    for path in ("/ui/", f"/ui/banks/{main}", f"/ui/banks/{main}/recall", f"/ui/banks/{main}/recall?query=Alice",
                 f"/ui/banks/{main}/memories", f"/ui/banks/{main}/memories/{memory_id}",
                 f"/ui/banks/{main}/documents", f"/ui/banks/{main}/entities"):
        response = http.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert response.headers["content-type"].startswith("text/html")
    assert http.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
    assert http.get("/ui/static/console.css").status_code == 200


def test_the_bank_list_shows_counts(http: httpx.Client, banks: dict[str, str]) -> None:
    html = http.get("/ui/").text
    row = re.search(rf'{banks["main"]}</a></td>\s*<td>[^<]*</td>\s*<td class="n">(\d+)</td>', html)
    assert row and int(row.group(1)) == len(FACTS)
    assert banks["other"] in html


def test_security_headers(server: Any, banks: dict[str, str]) -> None:
    response = httpx.get(f"{server.url}/ui/")  # a new browser: it gets a session cookie
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp and "script-src" not in csp
    assert response.headers["x-frame-options"] == "DENY"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie


def test_stored_text_is_escaped_everywhere(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    memory_id = _ids(http, main)[XSS]
    for path in (f"/ui/banks/{main}/memories", f"/ui/banks/{main}/memories/{memory_id}",
                 f"/ui/banks/{main}/recall?query=Carol+diary&types=world&types=experience"):
        html = http.get(path).text
        assert "&lt;img src=x onerror=alert(1)&gt;" in html, path
        assert "<img src=x" not in html and "<script>alert" not in html and "<b>tag</b>" not in html


def test_a_setting_is_saved_only_with_the_form_token(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    page = http.get(f"/ui/banks/{main}")
    token = _form_token(page.text)
    refused = http.post(f"/ui/banks/{main}/config", data={"recall_rrf_k": "17"})
    assert refused.status_code == 403
    forged = http.post(f"/ui/banks/{main}/config", data={"recall_rrf_k": "17", "csrf": "0" * 64})
    assert forged.status_code == 403
    assert "recall_rrf_k" not in http.get(f"/v1/default/banks/{main}/config").json()["overrides"]
    saved = http.post(f"/ui/banks/{main}/config", data={"recall_rrf_k": "17", "csrf": token}, follow_redirects=False)
    assert saved.status_code == 303, saved.text
    assert http.get(f"/v1/default/banks/{main}/config").json()["overrides"]["recall_rrf_k"] == 17
    reset = http.post(f"/ui/banks/{main}/config", data={"reset": "recall_rrf_k", "csrf": token}, follow_redirects=False)
    assert reset.status_code == 303
    assert "recall_rrf_k" not in http.get(f"/v1/default/banks/{main}/config").json()["overrides"]


def test_a_token_from_another_browser_is_refused(http: httpx.Client, server: Any, banks: dict[str, str]) -> None:
    token = _form_token(http.get(f"/ui/banks/{banks['main']}").text)
    with httpx.Client(base_url=server.url) as stranger:
        stranger.get("/ui/")  # its own session cookie
        response = stranger.post(f"/ui/banks/{banks['main']}/config", data={"recall_rrf_k": "9", "csrf": token})
    assert response.status_code == 403


def test_settings_are_validated_as_the_api_validates_them(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    token = _form_token(http.get(f"/ui/banks/{main}").text)
    for field, bad in (("recall_rrf_k", "0"), ("recall_fusion", "median"), ("enable_reranking", "maybe")):
        response = http.post(f"/ui/banks/{main}/config", data={field: bad, "csrf": token})
        assert response.status_code == 422 and field in response.text
        assert field not in http.get(f"/v1/default/banks/{main}/config").json()["overrides"]
    response = http.post(f"/ui/banks/{main}/config", data={"no_such_setting": "1", "reset": "no_such_setting",
                                                           "csrf": token})
    assert response.status_code == 422 and "no_such_setting" in response.text


def test_the_profile_is_saved_and_checked(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    token = _form_token(http.get(f"/ui/banks/{main}").text)
    form = {"name": "Console <Bank>", "mission": "remember", "skepticism": "4", "literalism": "3", "empathy": "2",
            "csrf": token}
    assert http.post(f"/ui/banks/{main}/profile", data=form, follow_redirects=False).status_code == 303
    profile = http.get(f"/v1/default/banks/{main}/profile").json()
    assert profile["name"] == "Console <Bank>" and profile["disposition"]["skepticism"] == 4
    assert "Console &lt;Bank&gt;" in http.get(f"/ui/banks/{main}").text
    bad = http.post(f"/ui/banks/{main}/profile", data={**form, "empathy": "9"})
    assert bad.status_code == 422 and "disposition.empathy" in bad.text
    assert http.get(f"/v1/default/banks/{main}/profile").json()["disposition"]["empathy"] == 2


def test_the_recall_page_shows_the_apis_trace(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    api = http.post(f"/v1/default/banks/{main}/memories/recall",
                    json={"query": "Where does Alice work?", "budget": "mid", "trace": True}).json()
    html = http.get(f"/ui/banks/{main}/recall", params={"query": "Where does Alice work?", "budget": "mid"}).text
    results = html.split('id="results"')[1].split("</table>")[0]
    shown = re.findall(r'class="mid">([^<]+)</a>', results)
    assert shown == [r["id"] for r in api["results"]]
    phases = api["trace"]["summary"]["phase_metrics"]
    chart = html.split('id="phase-chart"')[1].split("</svg>")[0]
    assert chart.count("<rect") == len(phases)
    for phase in phases:
        fact_type = phase["details"].get("fact_type")
        assert f">{phase['phase_name']}{f' ({fact_type})' if fact_type else ''}</text>" in chart
    fused = {n["node_id"]: n["rrf_score"] for n in api["trace"]["rrf_merged"]}
    top = api["results"][0]["id"]
    assert f"{fused[top]:.4f}" in results


def test_why_not_names_the_stage(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    ids = _ids(http, main)
    query = {"query": "Where does Alice work?", "max_tokens": "20"}
    returned = http.get(f"/ui/banks/{main}/recall", params={**query, "why": ids[FACTS[0]["content"]]}).text
    assert "It was returned, at rank 1." in returned
    packed_out = http.get(f"/ui/banks/{main}/recall", params={**query, "why": ids[FACTS[2]["content"]]}).text
    answer = re.search(r'id="why-answer">(.*?)</p>', packed_out, re.S)
    assert answer and ("cut by packing" in answer.group(1) or "No retrieval arm" in answer.group(1))
    typed = http.get(f"/ui/banks/{main}/recall", params={**query, "types": "observation",
                                                          "why": ids[FACTS[0]["content"]]}).text
    assert "was not among the types asked for" in typed
    missing = http.get(f"/ui/banks/{main}/recall", params={**query, "why": "no-such-id"}).text
    assert "This bank has no memory with that id." in missing


def test_no_page_shows_another_banks_data(http: httpx.Client, banks: dict[str, str]) -> None:
    main, other = banks["main"], banks["other"]
    secret_id = _ids(http, other)["The vault code of the other bank is 4711 ZEBRA."]
    assert http.get(f"/ui/banks/{main}/memories/{secret_id}").status_code == 404
    pages = [f"/ui/banks/{main}/memories?q=ZEBRA", f"/ui/banks/{main}/documents", f"/ui/banks/{main}/entities",
             f"/ui/banks/{main}", f"/ui/banks/{main}/recall?query=vault+code+ZEBRA&why={secret_id}",
             f"/ui/banks/{main}/memories?document=secret-doc"]
    for path in pages:
        response = http.get(path)
        assert response.status_code == 200 and "ZEBRA</" not in response.text and "secret-doc</a>" not in response.text
        assert "4711" not in response.text.replace("ZEBRA", ""), path
    assert "This bank has no memory with that id." in http.get(pages[4]).text


def test_an_unknown_bank_is_404_and_not_created(http: httpx.Client, banks: dict[str, str]) -> None:
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    for path in ("", "/recall?query=x", "/memories", "/documents", "/entities", "/memories/x", "/operations",
                 f"/operations/{uuid.uuid4()}", "/links.svg", "/memories?start_date=bad"):
        assert http.get(f"/ui/banks/{ghost}{path}").status_code == 404, path
    token = _form_token(http.get(f"/ui/banks/{banks['main']}").text)
    assert http.post(f"/ui/banks/{ghost}/config", data={"recall_rrf_k": "3", "csrf": token}).status_code == 404
    assert http.post(f"/ui/banks/{ghost}/profile", data={"name": "x", "csrf": token}).status_code == 404
    assert http.post(f"/ui/banks/{ghost}/operations/{uuid.uuid4()}/cancel", data={"csrf": token}).status_code == 404
    assert http.get(f"/v1/default/banks/{ghost}/config").status_code == 404


@pytest.mark.parametrize(("path", "status", "field"), [
    ("/memories?offset=1000000000000000000000000000000", 400, "offset"),
    ("/memories?type=opinion", 400, "type"),
    ("/memories?entity=not-a-uuid", 400, "entity"),
    ("/recall?query=x&budget=huge", 400, "budget"),
    ("/recall?query=x&types=opinion", 400, "types"),
    ("/recall?query=x&max_tokens=-1", 400, "max_tokens"),
    ("/recall?query=%00%00", 400, "query"),
    ("?period=5y", 400, "period"),
    ("/memories?time_field=birthday", 400, "time_field"),
    ("/operations?offset=x", 400, "offset"),
])
def test_bad_input_is_a_clear_error(http: httpx.Client, banks: dict[str, str], path: str, status: int,
                                    field: str) -> None:
    response = http.get(f"/ui/banks/{banks['main']}{path}")
    assert response.status_code == status and field in response.text
    assert response.headers["content-type"].startswith("text/html")


def test_an_empty_query_shows_the_engines_reason(http: httpx.Client, banks: dict[str, str]) -> None:
    response = http.get(f"/ui/banks/{banks['main']}/recall", params={"query": "?!"})
    assert response.status_code == 422 and "query" in response.text


def test_memory_filters_and_paging(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    assert re.search(r'id="total">1<', http.get(f"/ui/banks/{main}/memories?tag=work").text)
    assert re.search(r'id="total">1<', http.get(f"/ui/banks/{main}/memories?q=marathon").text)
    assert re.search(rf'id="total">{len(FACTS)}<', http.get(f"/ui/banks/{main}/memories?document=chat-1").text)
    entities = http.get(f"/ui/banks/{main}/entities").text
    alice = re.search(r'memories\?entity=([0-9a-f-]{36})">Alice<', entities)
    assert alice, entities[:500]
    assert re.search(r'id="total">3<', http.get(f"/ui/banks/{main}/memories?entity={alice.group(1)}").text)
    assert "entity-graph" in entities
    memory = http.get(f"/ui/banks/{main}/memories/{_ids(http, main)[FACTS[0]['content']]}").text
    assert "Helios Robotics" in memory.split('id="entities"')[1].split("</p>")[0]


# --- operations, sizes, dates -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sql(server: Any) -> Iterator[Any]:
    """A direct connection to the service's database: operations in every status, without running them."""
    import psycopg

    with psycopg.connect(server.engine.db.url, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="module")
def ops(http: httpx.Client, sql: Any, banks: dict[str, str]) -> Iterator[dict[str, str]]:
    """A bank named with markup whose queue is held by another worker's live operation (so nothing in it
    runs), with a pending, a failed (its error markup too) and a completed operation; and one of ``other``."""
    bank_id = f"ops-{uuid.uuid4().hex[:8]}"
    _retain(http, bank_id, [{"content": "The lighthouse keeper logged a ship at dawn."}], "log")
    assert http.put(f"/v1/default/banks/{bank_id}", json={"name": XSS}).status_code == 200
    ids = {name: str(uuid.uuid4()) for name in ("held", "completed", "failed", "pending", "foreign")}
    rows = [(bank_id, ids["held"], "processing", None, "1 hour", 3),
            (bank_id, ids["completed"], "completed", None, None, 2),
            (bank_id, ids["failed"], "failed", XSS, None, 1),
            (bank_id, ids["pending"], "pending", None, None, 0),
            (banks["other"], ids["foreign"], "failed", "ZEBRA 4711", None, 0)]
    for bank, oid, status, error, lease, age in rows:
        sql.execute("INSERT INTO operations (bank_id, operation_id, operation_type, status, error_message, "
                    "worker_id, lease_until, items_count, created_at) VALUES (%s, %s, 'retain', %s, %s, %s, "
                    "now() + CAST(%s AS interval), 3, now() - make_interval(mins => %s))",
                    (bank, oid, status, error, lease and "elsewhere", lease, age))
    try:
        yield {"bank": bank_id, **ids}
    finally:
        sql.execute("DELETE FROM operations WHERE operation_id = ANY(%s)", ([uuid.UUID(i) for i in ids.values()],))


def _status(http: httpx.Client, bank_id: str, operation_id: str) -> str:
    return str(http.get(f"/v1/default/banks/{bank_id}/operations/{operation_id}").json()["status"])


def test_the_operations_page_lists_the_apis_operations(http: httpx.Client, ops: dict[str, str]) -> None:
    bank_id = ops["bank"]
    html = http.get(f"/ui/banks/{bank_id}/operations").text
    api = http.get(f"/v1/default/banks/{bank_id}/operations", params={"limit": 100}).json()
    shown = re.findall(r'/operations/([0-9a-f-]{36})">', html)
    assert shown == [o["id"] for o in api["operations"]] == [ops["pending"], ops["failed"], ops["completed"],
                                                              ops["held"]]
    assert re.search(r'id="total">4<', html)
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img src=x" not in html
    assert ops["foreign"] not in html and "ZEBRA" not in html
    assert f'id="cancel-{ops["pending"]}"' in html and f'id="retry-{ops["failed"]}"' in html
    assert f'id="retry-{ops["completed"]}"' not in html and f'id="cancel-{ops["completed"]}"' not in html
    failed = http.get(f"/ui/banks/{bank_id}/operations", params={"status": "failed"}).text
    assert re.findall(r'/operations/([0-9a-f-]{36})">', failed) == [ops["failed"]]
    assert f'href="/ui/banks/{bank_id}/operations"' in http.get(f"/ui/banks/{bank_id}").text


def test_an_operations_page_shows_its_details(http: httpx.Client, ops: dict[str, str]) -> None:
    html = http.get(f"/ui/banks/{ops['bank']}/operations/{ops['failed']}").text
    assert 'id="op-status">failed<' in html
    error = re.search(r'id="op-error">(.*?)</dd>', html, re.S)
    assert error and error.group(1) == "&lt;img src=x onerror=alert(1)&gt; Carol keeps a &lt;script&gt;alert(2)" \
        "&lt;/script&gt; diary"
    assert "0 of 3 items" in html and "<script>" not in html


def test_cancel_and_retry_do_what_the_api_does(http: httpx.Client, ops: dict[str, str]) -> None:
    bank_id, pending, failed = ops["bank"], ops["pending"], ops["failed"]
    token = _form_token(http.get(f"/ui/banks/{bank_id}/operations").text)
    assert http.post(f"/ui/banks/{bank_id}/operations/{pending}/cancel").status_code == 403
    assert http.post(f"/ui/banks/{bank_id}/operations/{pending}/cancel", data={"csrf": "0" * 64}).status_code == 403
    assert _status(http, bank_id, pending) == "pending"
    done = http.post(f"/ui/banks/{bank_id}/operations/{pending}/cancel", data={"csrf": token},
                     follow_redirects=False)
    assert done.status_code == 303
    assert done.headers["location"] == f"/ui/banks/{bank_id}/operations/{pending}?done=cancel"
    assert _status(http, bank_id, pending) == "cancelled"
    assert "Cancelled." in http.get(done.headers["location"]).text
    again = http.post(f"/ui/banks/{bank_id}/operations/{pending}/cancel", data={"csrf": token})
    api = http.delete(f"/v1/default/banks/{bank_id}/operations/{pending}")
    assert again.status_code == api.status_code == 409 and api.json()["message"] in again.text.replace("&#39;", "'")
    retried = http.post(f"/ui/banks/{bank_id}/operations/{failed}/retry", data={"csrf": token},
                        follow_redirects=False)
    assert retried.status_code == 303 and _status(http, bank_id, failed) == "pending"
    assert http.get(f"/v1/default/banks/{bank_id}/operations/{failed}").json()["error_message"] is None
    assert http.post(f"/ui/banks/{bank_id}/operations/{ops['completed']}/retry", data={"csrf": token}).status_code \
        == 409
    assert _status(http, bank_id, ops["completed"]) == "completed"


def test_operations_of_another_bank_never_show(http: httpx.Client, ops: dict[str, str], banks: dict[str, str]) -> None:
    bank_id, foreign = ops["bank"], ops["foreign"]
    token = _form_token(http.get(f"/ui/banks/{bank_id}/operations").text)
    page = http.get(f"/ui/banks/{bank_id}/operations/{foreign}")
    assert page.status_code == 404 and "ZEBRA" not in page.text
    for action in ("cancel", "retry"):
        refused = http.post(f"/ui/banks/{bank_id}/operations/{foreign}/{action}", data={"csrf": token})
        assert refused.status_code == 404, action
    assert _status(http, banks["other"], foreign) == "failed"
    for path in (f"/ui/banks/{bank_id}/operations/not-a-uuid", f"/ui/banks/{bank_id}/operations/{uuid.uuid4()}"):
        assert http.get(path).status_code == 404, path
    assert http.post(f"/ui/banks/{bank_id}/operations/not-a-uuid/cancel", data={"csrf": token}).status_code == 404
    assert http.get(f"/ui/banks/{bank_id}/operations?status=lost").status_code == 400


def test_sizes_on_disk_are_estimates_for_every_bank(http: httpx.Client, ops: dict[str, str],
                                                    banks: dict[str, str]) -> None:
    html = http.get("/ui/").text
    for bank_id in (banks["main"], banks["other"], ops["bank"]):
        row = re.search(rf'>{bank_id}</a></td>.*?<td class="n size">([^<]*)</td>', html, re.S)
        assert row and re.fullmatch(r"≈ [0-9.]+ (B|kB|MB|GB|TB)", row.group(1)), bank_id
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img src=x" not in html
    bank = http.get(f"/ui/banks/{ops['bank']}").text
    assert re.search(r'id="size">≈ [0-9.]+ (B|kB|MB|GB|TB)<', bank)
    assert "&lt;img src=x onerror=alert(1)&gt;" in bank and "<img src=x" not in bank


def test_the_bank_page_counts_as_the_apis_stats(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    html = http.get(f"/ui/banks/{main}").text
    stats = http.get(f"/v1/default/banks/{main}/stats").json()
    cards = dict((name, int(n)) for n, name in re.findall(r"<b(?: id=\"[^\"]+\")?>(\d+)</b> (\w+)</div>", html))
    assert cards["memories"] == stats["total_nodes"] and cards["documents"] == stats["total_documents"]
    assert cards["entities"] == stats["entities"]
    assert all(cards[t] == n for t, n in stats["nodes_by_fact_type"].items())
    assert f'src="/ui/banks/{main}/links.svg"' in html
    image = http.get(f"/ui/banks/{main}/links.svg")
    assert image.headers["content-type"].startswith("image/svg+xml") and "default-src 'none'" in image.headers[
        "content-security-policy"]
    assert re.search(rf">{stats['total_links']}</text>", image.text)
    series = http.get(f"/v1/default/banks/{main}/stats/memories-timeseries", params={"period": "30d"}).json()
    stored = sum(b[t] for b in series["buckets"] for t in ("world", "experience", "observation"))
    titles = re.findall(r"<title>[^<]*: (\d+)</title>", html.split('id="timeline"')[1].split("</svg>")[0])
    assert sum(int(n) for n in titles) == stored
    assert http.get(f"/ui/banks/{banks['other']}/links.svg").status_code == 200
    assert http.get(f"/ui/banks/ghost-{uuid.uuid4().hex[:6]}/links.svg").status_code == 404


def test_memories_by_date_are_the_apis(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    window = {"time_field": "mentioned_at", "start_date": "2024-02-01", "end_date": "2024-04-01"}
    api = http.get(f"/v1/default/banks/{main}/memories/list", params=window).json()
    html = http.get(f"/ui/banks/{main}/memories", params=window).text
    shown = re.findall(r'class="mid" href="[^"]+">([^<]+)</a>', html)
    assert shown == [m["id"] for m in api["items"]] and api["total"] >= 1
    assert "Helios Robotics" in html and "marathon" not in html
    assert re.search(rf'id="total">{api["total"]}<', html)
    assert 'name="start_date" id="start_date" value="2024-02-01"' in html
    later = http.get(f"/ui/banks/{main}/memories", params={**window, "start_date": "2030-01-01",
                                                            "end_date": "2031-01-01"}).text
    assert re.search(r'id="total">0<', later) and "No memories match." in later
    stored = http.get(f"/ui/banks/{main}/memories", params={"start_date": "2000-01-01"}).text
    assert re.search(rf'id="total">{len(FACTS)}<', stored)


@pytest.mark.parametrize(("params", "field"), [
    ({"start_date": "yesterday"}, "start_date"),
    ({"end_date": "2024-13-45"}, "end_date"),
    ({"start_date": "2024-05-01", "end_date": "2024-04-01"}, "start_date"),
    ({"start_date": "<script>alert(1)</script>"}, "start_date"),
])
def test_a_bad_date_is_a_clear_message_on_the_page(http: httpx.Client, banks: dict[str, str],
                                                   params: dict[str, str], field: str) -> None:
    response = http.get(f"/ui/banks/{banks['main']}/memories", params=params)
    assert response.status_code == 400 and response.headers["content-type"].startswith("text/html")
    error = re.search(r'id="error">([^<]*)</p>', response.text)
    assert error and field in error.group(1)
    assert 'id="filters"' in response.text and "<script>alert(1)" not in response.text


def test_a_text_filter_pages_without_counting_every_match(http: httpx.Client, banks: dict[str, str]) -> None:
    main = banks["main"]
    html = http.get(f"/ui/banks/{main}/memories", params={"q": "alice"}).text
    assert re.search(r'id="total">3<', html) and "next-page" not in html
    shown = re.findall(r'class="mid" href="[^"]+">([^<]+)</a>', html)
    api = http.get(f"/v1/default/banks/{main}/memories/list", params={"q": "alice"}).json()
    assert shown == [m["id"] for m in api["items"]]


@pytest.fixture(scope="module")
def keyed(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(service_api_key=KEY)


def test_the_key_is_asked_for_and_kept_in_a_strict_cookie(keyed: Any) -> None:
    with httpx.Client(base_url=keyed.url) as c:
        first = c.get("/ui/banks/b/memories?q=x", follow_redirects=False)
        assert first.status_code == 303 and first.headers["location"].startswith("/ui/login?next=")
        login = c.get(first.headers["location"])
        assert login.status_code == 200
        token = _form_token(login.text)
        wrong = c.post("/ui/login", data={"key": "nope", "csrf": token, "next": "/ui/"})
        assert wrong.status_code == 401 and "That is not the key." in wrong.text
        assert c.post("/ui/login", data={"key": KEY, "next": "/ui/"}).status_code == 403  # no form token
        right = c.post("/ui/login", data={"key": KEY, "csrf": token, "next": "//evil.example/"}, follow_redirects=False)
        assert right.status_code == 303 and right.headers["location"] == "/ui/"
        cookie = [h for h in right.headers.get_list("set-cookie") if h.startswith("hindsight_console_login=")][0]
        assert KEY not in cookie and "max-age=43200" in cookie.lower()  # a signed token that expires, not the key
        cookie = cookie.lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        assert c.get("/ui/").status_code == 200
        # the cookie opens the console only: the API still wants the header
        assert c.get("/v1/default/banks").status_code == 401
        logout = c.post("/ui/logout", data={"csrf": _form_token(c.get("/ui/").text)}, follow_redirects=False)
        assert logout.status_code == 303
        assert c.get("/ui/", follow_redirects=False).status_code == 303
    for forged in ("wrong", KEY, "v1.99999999999.nonce.signature"):
        with httpx.Client(base_url=keyed.url, cookies={"hindsight_console_login": forged}) as c:
            assert c.get("/ui/", follow_redirects=False).status_code == 303, forged
    bearer = httpx.get(f"{keyed.url}/ui/", headers={"Authorization": f"Bearer {KEY}"})
    assert bearer.status_code == 200
    assert httpx.get(f"{keyed.url}/ui/static/console.css").status_code == 200


def test_logging_out_ends_the_login_in_every_process(keyed: Any, make_settings: Callable[..., Settings]) -> None:
    """After "Log out" the old cookie opens no page, here or in another process serving the key."""
    with httpx.Client(base_url=keyed.url) as c:
        token = _form_token(c.get("/ui/login").text)
        c.post("/ui/login", data={"key": KEY, "csrf": token, "next": "/ui/"}, follow_redirects=False)
        login = c.cookies["hindsight_console_login"]
        c.post("/ui/login", data={"key": KEY, "csrf": token, "next": "/ui/"}, follow_redirects=False)
        other = c.cookies["hindsight_console_login"]  # a second login of the same browser
        assert login != other
        logout = c.post("/ui/logout", data={"csrf": _form_token(c.get("/ui/").text)}, follow_redirects=False)
        assert logout.status_code == 303
    with httpx.Client(base_url=keyed.url, cookies={"hindsight_console_login": other}) as c:
        refused = c.get("/ui/?q=x", follow_redirects=False)
        assert refused.status_code == 303 and refused.headers["location"].startswith("/ui/login?next=")
        assert c.post("/ui/logout", follow_redirects=False).status_code == 303  # to the login form, as anyone
    with httpx.Client(base_url=keyed.url, cookies={"hindsight_console_login": login}) as c:
        assert c.get("/ui/", follow_redirects=False).status_code == 200  # the first login was not ended
    with (ServerThread(make_settings(service_api_key=KEY)) as second,
          httpx.Client(base_url=second.url, cookies={"hindsight_console_login": other}) as c):
        assert c.get("/ui/", follow_redirects=False).status_code == 303
    assert httpx.get(f"{keyed.url}/ui/", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_a_login_expires_and_a_new_key_ends_every_login() -> None:
    from hindsight_recall.service.console.auth import Logins

    logins = Logins(KEY, lifetime=60)
    token = logins.issue(now=1000)
    assert KEY not in token and logins.valid(token, now=1059) and not logins.valid(token, now=1061)
    assert Logins(KEY, lifetime=60).valid(token, now=1030)  # another process serving the same key
    assert not Logins(KEY + "-rotated", lifetime=60).valid(token, now=1030)
    body, _, signature = token.rpartition(".")
    later = body.split(".")
    assert not logins.valid(f"v1.{int(later[1]) + 10**6}.{later[2]}.{signature}", now=1030)  # a changed expiry
    for bad in ("", "v1", "v1.x.y.z", "v2.9999999999.n.s", "." * 300):
        assert not logins.valid(bad, now=1030)


def test_rotating_the_key_logs_every_browser_out(make_settings: Callable[..., Settings]) -> None:
    with ServerThread(make_settings(service_api_key=KEY)) as first, httpx.Client(base_url=first.url) as c:
        token = _form_token(c.get("/ui/login").text)
        c.post("/ui/login", data={"key": KEY, "csrf": token, "next": "/ui/"}, follow_redirects=False)
        login = c.cookies["hindsight_console_login"]
        assert c.get("/ui/", follow_redirects=False).status_code == 200
    for key, status in ((KEY, 200), (KEY + "-new", 303)):
        with (ServerThread(make_settings(service_api_key=key)) as running,
              httpx.Client(base_url=running.url, cookies={"hindsight_console_login": login}) as c):
            assert c.get("/ui/", follow_redirects=False).status_code == status


def test_the_console_can_be_switched_off(make_settings: Callable[..., Settings]) -> None:
    with ServerThread(make_settings(console_enabled=False)) as running:
        for path in ("/ui", "/ui/", "/ui/login", "/ui/static/console.css", "/ui/banks/x"):
            assert httpx.get(f"{running.url}{path}").status_code == 404, path
        assert httpx.get(f"{running.url}/v1/default/banks").status_code == 200


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_API_CONSOLE_ENABLED", "false")
    assert load_settings().console_enabled is False
    monkeypatch.delenv("HINDSIGHT_API_CONSOLE_ENABLED")
    assert load_settings().console_enabled is True


# --- in a real browser ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium through the system chromedriver: nothing is downloaded, no statistics sent."""
    if not (shutil.which("chromium") and Path("/usr/bin/chromedriver").exists()):
        pytest.fail("the browser tests need Chromium: apt-get install -y chromium chromium-driver")
    os.environ["SE_AVOID_STATS"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    # --disable-dev-shm-usage: a container's /dev/shm (64 MB in Docker) is too small for Chromium's pages
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--window-size=1280,1000",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_full_page_screenshot(str(SHOTS / f"{name}.png")) if hasattr(driver, "save_full_page_screenshot") \
        else driver.save_screenshot(str(SHOTS / f"{name}.png"))


def _submit(driver: Any, button_id: str) -> None:
    """Click a form's button and wait until the next page has replaced this one."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, button_id).click()

    def replaced(_: Any) -> bool:
        try:
            page.is_enabled()
        except WebDriverException:  # stale, or (chromium, mid-navigation) "does not belong to the document"
            return True
        return False

    WebDriverWait(driver, 30).until(replaced)


def _no_alert(driver: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018


def test_browser_loads_every_page(browser: Any, server: Any, http: httpx.Client, banks: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    main = banks["main"]
    memory_id = _ids(http, main)[FACTS[0]["content"]]
    pages = {"banks": ("/ui/", "banks"), "bank": (f"/ui/banks/{main}", "timeline"),
             "memories": (f"/ui/banks/{main}/memories", "memories"),
             "memory": (f"/ui/banks/{main}/memories/{memory_id}", "links"),
             "documents": (f"/ui/banks/{main}/documents", "documents"),
             "entities": (f"/ui/banks/{main}/entities", "entity-graph"),
             "operations": (f"/ui/banks/{main}/operations", "operations")}
    for name, (path, element) in pages.items():
        browser.get(server.url + path)
        assert browser.find_element(By.ID, element).is_displayed(), name
        _shot(browser, name)
        _no_alert(browser)


def test_browser_runs_a_recall_and_draws_the_trace(browser: Any, server: Any, banks: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/ui/banks/{banks['main']}/recall")
    box = browser.find_element(By.ID, "query")
    box.clear()
    box.send_keys("Where does Alice work?")
    _submit(browser, "run")
    chart = browser.find_element(By.ID, "phase-chart")
    bars = chart.find_elements(By.CSS_SELECTOR, "g.bar rect")
    assert len(bars) > 3 and all(float(b.get_attribute("width")) >= 1 for b in bars)
    assert chart.size["height"] > 50
    rows = browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")
    assert "Helios Robotics" in rows[0].text
    assert "query=Where+does+Alice+work" in browser.current_url
    _shot(browser, "recall")


def test_browser_edits_a_setting(browser: Any, server: Any, http: httpx.Client, banks: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    main = banks["main"]
    browser.get(f"{server.url}/ui/banks/{main}")
    field = browser.find_element(By.ID, "f-recall_budget_fixed_mid")
    field.clear()
    field.send_keys("250")
    Select(browser.find_element(By.ID, "f-recall_fusion")).select_by_visible_text("rrf")
    _submit(browser, "save-settings")
    assert "Saved" in browser.find_element(By.ID, "saved").text
    assert browser.find_element(By.ID, "f-recall_budget_fixed_mid").get_attribute("value") == "250"
    overrides = http.get(f"/v1/default/banks/{main}/config").json()["overrides"]
    assert overrides["recall_budget_fixed_mid"] == 250 and overrides["recall_fusion"] == "rrf"
    field = browser.find_element(By.ID, "f-recall_rrf_k")
    field.clear()
    field.send_keys("0")
    _submit(browser, "save-settings")
    assert "recall_rrf_k" in browser.find_element(By.ID, "error").text
    token = _form_token(http.get(f"/ui/banks/{main}").text)
    http.post(f"/ui/banks/{main}/config", data={"reset": ["recall_budget_fixed_mid", "recall_fusion"], "csrf": token})


def test_browser_shows_injected_markup_as_text(browser: Any, server: Any, http: httpx.Client,
                                               banks: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    main = banks["main"]
    memory_id = _ids(http, main)[XSS]
    browser.get(f"{server.url}/ui/banks/{main}/memories/{memory_id}")
    _no_alert(browser)
    assert browser.find_element(By.ID, "memory-text").text == XSS
    assert not browser.find_elements(By.CSS_SELECTOR, "main img") and not browser.find_elements(By.CSS_SELECTOR,
                                                                                                "main script")
    browser.get(f"{server.url}/ui/banks/{main}/recall?query=Carol+diary")
    _no_alert(browser)
    assert XSS in browser.find_element(By.ID, "results").text


def test_browser_retries_an_operation(browser: Any, server: Any, http: httpx.Client, sql: Any,
                                      ops: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    bank_id = ops["bank"]
    failed = str(uuid.uuid4())
    sql.execute("INSERT INTO operations (bank_id, operation_id, operation_type, status, error_message) "
                "VALUES (%s, %s, 'retain', 'failed', %s)", (bank_id, failed, XSS))
    try:
        browser.get(f"{server.url}/ui/banks/{bank_id}/operations")
        Select(browser.find_element(By.ID, "status")).select_by_visible_text("failed")
        _submit(browser, "filter")
        assert "status=failed" in browser.current_url
        _no_alert(browser)
        table = browser.find_element(By.ID, "operations")
        assert XSS in table.text and not table.find_elements(By.CSS_SELECTOR, "img, script")
        _shot(browser, "operations")
        _submit(browser, f"retry-{failed}")
        assert browser.find_element(By.ID, "saved").text == "Queued again."
        assert browser.find_element(By.ID, "op-status").text == "pending"
        assert _status(http, bank_id, failed) == "pending"
    finally:
        sql.execute("DELETE FROM operations WHERE operation_id = %s", (uuid.UUID(failed),))


def test_browser_filters_memories_by_date(browser: Any, server: Any, banks: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{server.url}/ui/banks/{banks['main']}/memories")
    Select(browser.find_element(By.ID, "time_field")).select_by_visible_text("mentioned")
    browser.find_element(By.ID, "start_date").send_keys("2024-02-01")
    browser.find_element(By.ID, "end_date").send_keys("2024-04-01")
    _submit(browser, "filter")
    rows = browser.find_elements(By.CSS_SELECTOR, "#memories tbody tr")
    assert len(rows) == 1 and "Helios Robotics" in rows[0].text
    _shot(browser, "memories-by-date")
    box = browser.find_element(By.ID, "start_date")
    box.clear()
    box.send_keys("last tuesday")
    _submit(browser, "filter")
    assert "start_date" in browser.find_element(By.ID, "error").text
    assert browser.find_element(By.ID, "start_date").get_attribute("value") == "last tuesday"


def test_browser_logs_in_with_the_key(browser: Any, keyed: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{keyed.url}/ui/")
    assert "/ui/login" in browser.current_url
    _shot(browser, "login")
    browser.find_element(By.ID, "key").send_keys("wrong")
    _submit(browser, "login")
    assert "That is not the key." in browser.find_element(By.ID, "error").text
    browser.find_element(By.ID, "key").send_keys(KEY)
    _submit(browser, "login")
    assert browser.find_element(By.ID, "banks").is_displayed()
    cookie = browser.get_cookie("hindsight_console_login")
    assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict" and KEY not in cookie["value"]


def test_serve_prints_the_console_address(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner
    from hindsight_recall.cli import main
    from hindsight_recall.service import run

    started: list[Any] = []
    monkeypatch.setattr(run, "serve", started.append)  # the address is printed before the server starts
    monkeypatch.setattr(run, "configure_logging", lambda level: None)
    done = CliRunner().invoke(main, ["serve", "--port", "9123"])
    assert done.exit_code == 0 and "console at http://127.0.0.1:9123/ui/" in done.output
    monkeypatch.setenv("HINDSIGHT_API_CONSOLE_ENABLED", "false")
    done = CliRunner().invoke(main, ["serve", "--port", "9123"])
    assert "console off (HINDSIGHT_API_CONSOLE_ENABLED=false)" in done.output and "/ui/" not in done.output
    assert len(started) == 2 and started[1].console_enabled is False


def test_why_not_reads_the_pre_rerank_cap_from_the_trace() -> None:
    """The cap's stage, which a small bank never reaches: a trace shaped as the engine writes it."""
    from hindsight_recall.service.console.story import read_trace, why_not

    def node(i: str) -> dict[str, Any]:
        return {"node_id": i, "text": f"text {i}", "fact_type": "world"}

    response = {
        "results": [{"id": "a", "text": "text a", "type": "world", "scores": {"final": 0.9}}],
        "trace": {
            "query": {"budget": 1},
            "retrieval_results": [{"method_name": "semantic", "fact_type": "world", "results": [
                {**node(i), "rank": r, "score": 1 / r, "score_name": "similarity"}
                for r, i in enumerate("abcd", start=1)]}],
            "rrf_merged": [{**node(i), "rrf_score": 0.5, "source_ranks": {}, "final_rrf_rank": r}
                           for r, i in enumerate("abc", start=1)],
            "reranked": [{**node(i), "rerank_score": 0.5, "rerank_rank": r, "rrf_rank": r, "rank_change": 0,
                          "score_components": {}} for r, i in enumerate("abc", start=1)],
            "summary": {"total_duration_seconds": 0.01, "phase_metrics": [
                {"phase_name": "rerank_prefilter", "duration_seconds": 0.001,
                 "details": {"kept": 3, "dropped": 1, "max_candidates": 3}},
                {"phase_name": "token_filtering", "duration_seconds": 0.001,
                 "details": {"max_tokens": 10, "tokens_used": 8, "results_selected": 1}}]},
        },
    }
    view = read_trace(response)
    assert [s.id for s in view.cut_before_rerank] == ["d"] and [s.id for s in view.cut_by_packing] == ["b", "c"]
    memory = {"id": "d", "type": "world", "tags": []}
    assert "cut by the pre-rerank cap: the 3 best fused candidates were kept and 1 dropped" in why_not(
        view, memory, ["world"], [])
    assert "cut by packing" in why_not(view, {**memory, "id": "b"}, ["world"], [])
    assert "below the 2 candidates" in why_not(view, {**memory, "id": "c"}, ["world"], [])
    assert "No retrieval arm returned it" in why_not(view, {**memory, "id": "z"}, ["world"], [])
    assert "does not carry the tags" in why_not(view, {**memory, "id": "z"}, ["world"], ["t"])
