"""Documents and chunks over HTTP, driven by upstream's ``hindsight-client==1.1.0`` and by httpx.

A document is the items retained under one ``document_id``: its text is theirs joined by newlines, its
tags their union, and each item is one chunk, as upstream shows them.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.service import ServerThread

hindsight_client = pytest.importorskip("hindsight_client")
from hindsight_client_api import ApiClient, Configuration  # noqa: E402
from hindsight_client_api.api import DocumentsApi  # noqa: E402
from hindsight_client_api.exceptions import ApiException  # noqa: E402

ITEMS = [
    {"content": "Alice joined Helios Robotics in Munich.", "context": "career chat", "tags": ["work"],
     "metadata": {"source": "slack"}, "timestamp": "2023-08-01T00:00:00Z"},
    {"content": "Alice ran the Hamburg marathon.", "tags": ["personal"], "timestamp": "2023-04-23T00:00:00Z"},
]


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True)


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(headers=EXTRAS, base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture
def client(server: Any) -> Iterator[Any]:
    with hindsight_client.Hindsight(base_url=server.url, timeout=120) as c:
        yield c


def sql(server: Any, query: str, params: dict[str, Any]) -> list[Any]:
    """A statement on the service's database, past the API (its own connection)."""
    import psycopg

    with psycopg.connect(server.engine.db.url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def new_bank() -> str:
    return f"doc-{uuid.uuid4().hex[:10]}"


def docs_api(server: Any, method: str, **kwargs: Any) -> Any:
    """One call of upstream's generated (async) DocumentsApi, as upstream's own tests make it."""
    loop = asyncio.new_event_loop()  # its own: the tests' shared loop stays as it is
    try:
        return loop.run_until_complete(docs(server, method, **kwargs))
    finally:
        loop.close()


def retain(http: httpx.Client, bank: str, items: list[dict[str, Any]], document_id: str | None = None,
           **body: Any) -> None:
    if document_id is not None:
        items = [{**item, "document_id": document_id} for item in items]
    response = http.post(f"/v1/default/banks/{bank}/memories", json={"items": items, **body})
    assert response.status_code == 200, response.text


def path(bank: str, rest: str = "") -> str:
    return f"/v1/default/banks/{bank}/documents{rest}"


def assert_error(response: httpx.Response, status: int, code: str | None = None, field: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert "Traceback" not in response.text and body["detail"]
    if code:
        assert body["code"] == code, body
    if field:
        assert field in body["message"], body


# ---- upstream's own client tests -----------------------------------------------------------------

async def docs(server: Any, method: str, **kwargs: Any) -> Any:
    async with ApiClient(Configuration(host=server.url)) as api_client:
        return await getattr(DocumentsApi(api_client), method)(**kwargs)


async def test_get_document_as_upstreams_suite(server: Any) -> None:
    bank, doc_id = new_bank(), f"test-doc-{uuid.uuid4().hex[:8]}"
    client = hindsight_client.Hindsight(base_url=server.url, timeout=120)
    await client.aretain(bank_id=bank, content="Test document content for retrieval", document_id=doc_id)
    document = await docs(server, "get_document", bank_id=bank, document_id=doc_id)
    assert document.id == doc_id and "Test document content" in document.original_text
    await client.aclose()


async def test_delete_document_as_upstreams_suite(server: Any) -> None:
    bank, doc_id = new_bank(), f"test-doc-{uuid.uuid4().hex[:8]}"
    client = hindsight_client.Hindsight(base_url=server.url, timeout=120)
    await client.aretain(bank_id=bank, content="Test document content for deletion", document_id=doc_id)
    response = await docs(server, "delete_document", bank_id=bank, document_id=doc_id)
    assert response.success is True and response.document_id == doc_id and response.memory_units_deleted == 1
    await client.aclose()


# ---- get -----------------------------------------------------------------------------------------

async def test_a_document_is_its_items(server: Any) -> None:
    bank = new_bank()
    client = hindsight_client.Hindsight(base_url=server.url, timeout=120)
    await client.aretain_batch(bank, ITEMS, document_id="chat-1", document_tags=["team"])
    doc = await client.documents.get_document(bank_id=bank, document_id="chat-1")  # the client's own accessor
    await client.aclose()
    body = "\n".join(item["content"] for item in ITEMS)
    assert doc.original_text == body and doc.bank_id == bank
    assert doc.content_hash == hashlib.sha256(body.encode()).hexdigest()
    assert doc.memory_unit_count == 2 and doc.nodes_by_fact_type == {"world": 2, "experience": 0, "observation": 0}
    assert sorted(doc.tags) == ["personal", "team", "work"]
    assert doc.document_metadata == {"source": "slack"}
    assert doc.retain_params["context"] == "career chat"
    assert doc.created_at and doc.updated_at and doc.created_at <= doc.updated_at


def test_the_sync_client_retains_a_document(client: Any, http: httpx.Client) -> None:
    bank = new_bank()
    client.retain(bank, "One fact.", document_id="d1")
    assert http.get(path(bank, "/d1")).json()["original_text"] == "One fact."


async def test_unknown_documents_are_404_through_the_client(server: Any, http: httpx.Client) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "x"}], document_id="known")
    for method, kwargs in (("get_document", {}), ("delete_document", {}), ("list_document_chunks", {})):
        with pytest.raises(ApiException) as caught:
            await docs(server, method, bank_id=bank, document_id="nope", **kwargs)
        assert caught.value.status == 404


def test_unknown_documents_are_404(http: httpx.Client) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "x"}], document_id="known")
    for response in (http.get(path(bank, "/nope")), http.get(path("no-such-bank", "/known")),
                     http.patch(path(bank, "/nope"), json={"tags": []}), http.delete(path(bank, "/nope")),
                     http.get(path(bank, "/nope/chunks"))):
        assert_error(response, 404, "document_not_found")



def test_document_ids_may_hold_slashes_and_odd_characters(http: httpx.Client) -> None:
    bank = new_bank()
    for doc in ("notes/2024/may", "a b&c?d=e#f", "ünï/çødé"):
        retain(http, bank, [{"content": f"Text of {doc}."}], document_id=doc)
        quoted = path(bank, "/" + urllib.parse.quote(doc, safe="/"))
        got = http.get(quoted)
        assert got.status_code == 200 and got.json()["id"] == doc, got.text
        assert http.get(quoted + "/chunks").json()["items"][0]["chunk_text"] == f"Text of {doc}."
    assert http.get(path(bank, "/notes%2F2024%2Fmay")).json()["id"] == "notes/2024/may"
    assert http.delete(path(bank, "/notes/2024/may")).json()["memory_units_deleted"] == 1


def test_nul_bytes_in_ids_are_400(http: httpx.Client) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "x"}], document_id="d")
    assert_error(http.get(path(bank, "/d%00x")), 400, field="document_id")
    assert_error(http.get("/v1/default/chunks/a%00b"), 400, field="chunk_id")


# ---- list ----------------------------------------------------------------------------------------

def test_list_pages_newest_first_with_a_total(server: Any, http: httpx.Client) -> None:
    bank = new_bank()
    for i in range(5):
        retain(http, bank, [{"content": f"Fact number {i}."}], document_id=f"d{i}")
    page = docs_api(server, "list_documents", bank_id=bank, limit=2, offset=1)
    assert (page.total, page.limit, page.offset, page.total_is_estimate) == (5, 2, 1, False)
    assert [d.id for d in page.items] == ["d3", "d2"]
    item = page.items[0]
    assert item.memory_unit_count == 1 and item.text_length == len("Fact number 3.") and item.matched_fields == []
    assert item.content_hash == hashlib.sha256(b"Fact number 3.").hexdigest()
    everything = http.get(path(bank)).json()
    assert everything["limit"] == 100 and [d["id"] for d in everything["items"]] == ["d4", "d3", "d2", "d1", "d0"]
    # touched again: first
    retain(http, bank, [{"content": "Fact number 1, again."}], document_id="d1")
    assert http.get(path(bank)).json()["items"][0]["id"] == "d1"
    by_creation = http.get(path(bank), params={"time_field": "created_at"}).json()["items"]
    assert by_creation[0]["id"] == "d4"


def test_search_is_literal_text_of_ids_and_texts(http: httpx.Client) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "Progress: 100%_done (a|b) & !c:* <x> 'q' \\ end"}], document_id="odd")
    retain(http, bank, [{"content": "Progress: 1000 done"}], document_id="report-2024")
    retain(http, bank, [{"content": "Nothing about it"}], document_id="plain")

    def ids(q: str) -> list[str]:
        response = http.get(path(bank), params={"q": q})
        assert response.status_code == 200, response.text
        return sorted(d["id"] for d in response.json()["items"])

    assert ids("%_") == ["odd"] and ids("100%") == ["odd"] and ids("_") == ["odd"]
    for q in ("&", "|", "!", "(", ")", ":*", "<x>", "'q'", "\\"):
        assert ids(q) == ["odd"], q
    assert ids("PROGRESS") == ["odd", "report-2024"]
    assert ids("report") == ["report-2024"]
    found = http.get(path(bank), params={"q": "report"}).json()["items"][0]
    assert found["matched_fields"] == ["id"]
    found = http.get(path(bank), params={"q": "1000"}).json()["items"][0]
    assert found["matched_fields"] == ["original_text"]


def test_list_filters_by_tags_and_time(http: httpx.Client) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "a", "tags": ["x"]}], document_id="tx")
    retain(http, bank, [{"content": "b", "tags": ["y"]}, {"content": "c", "tags": ["x"]}], document_id="txy")
    retain(http, bank, [{"content": "d"}], document_id="untagged")

    def ids(**params: Any) -> list[str]:
        response = http.get(path(bank), params=params)
        assert response.status_code == 200, response.text
        return sorted(d["id"] for d in response.json()["items"])

    assert ids(tags="x") == ["tx", "txy"]  # any_strict: untagged documents are left out
    assert ids(tags=["x", "y"], tags_match="all_strict") == ["txy"]
    assert ids(tags="x", tags_match="any") == ["tx", "txy", "untagged"]
    assert ids(tags="x", tags_match="exact") == ["tx"]
    assert ids(tags_match="exact") == ["untagged"]
    created = http.get(path(bank, "/txy")).json()["created_at"]
    assert ids(start_date=created) == ["txy", "untagged"]
    assert ids(end_date=created) == ["tx"]
    assert ids(start_date="2999-01-01T00:00:00Z") == []


@pytest.mark.parametrize(("params", "status", "field"), [
    ({"limit": str(10**30)}, 400, "limit"),
    ({"limit": "-1"}, 400, "limit"),
    ({"limit": "²"}, 400, "limit"),
    ({"offset": str(2**63)}, 400, "offset"),
    ({"offset": "1e3"}, 400, "offset"),
    ({"q": "a\x00b"}, 400, "q"),
    ({"q": "x" * 4097}, 400, "q"),
    ({"tags": "a\x00"}, 400, "tags"),
    ({"tags_match": "some"}, 400, "tags_match"),
    ({"tag_groups": '[{"tags": ["a"]}]'}, 400, "tag_groups"),
    ({"time_field": "deleted_at"}, 400, "time_field"),
    ({"start_date": "yesterday"}, 400, "start_date"),
    ({"start_date": "2024-01-02", "end_date": "2024-01-01"}, 400, "end_date"),
])
def test_bad_list_input_is_a_clear_error(http: httpx.Client, params: dict[str, str], status: int, field: str) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "x"}])
    assert_error(http.get(path(bank), params=params), status, field=field)


def test_listing_an_unknown_bank_is_404(http: httpx.Client) -> None:
    assert_error(http.get(path(new_bank())), 404, "bank_not_found")


# ---- update --------------------------------------------------------------------------------------

def test_patch_replaces_the_tags_of_the_document_and_its_memories(http: httpx.Client, server: Any) -> None:
    from hindsight_client_api.models import UpdateDocumentRequest

    bank = new_bank()
    retain(http, bank, ITEMS, document_id="chat", document_tags=["team"])
    retain(http, bank, [{"content": "Other document.", "tags": ["work"]}], document_id="other")
    before = http.get(path(bank, "/chat")).json()["updated_at"]
    time.sleep(0.01)
    answer = docs_api(server, "update_document", bank_id=bank, document_id="chat",
                      update_document_request=UpdateDocumentRequest(tags=["moved", "moved", " kept "]))
    assert answer.success is True
    doc = http.get(path(bank, "/chat")).json()
    assert doc["tags"] == ["kept", "moved"] and doc["updated_at"] > before
    memories = http.get(f"/v1/default/banks/{bank}/memories/list").json()["items"]
    assert {m["document_id"]: sorted(m["tags"]) for m in memories if m["document_id"] == "chat"} == {
        "chat": ["kept", "moved"]}
    assert [m["tags"] for m in memories if m["document_id"] == "other"] == [["work"]]
    recalled = http.post(f"/v1/default/banks/{bank}/memories/recall",
                         json={"query": "Alice", "tags": ["moved"], "tags_match": "all_strict"}).json()["results"]
    assert len(recalled) == 2
    assert http.patch(path(bank, "/chat"), json={"tags": []}).json() == {"success": True}
    assert http.get(path(bank, "/chat")).json()["tags"] == []


def test_patch_needs_tags_and_refuses_observation_scopes(http: httpx.Client) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "x"}], document_id="d")
    assert_error(http.patch(path(bank, "/d"), json={}), 422, field="tags")
    assert_error(http.patch(path(bank, "/d"), json={"observation_scopes": "shared"}), 400, "unsupported_field")
    assert_error(http.patch(path(bank, "/d"), json={"tags": ["a\x00"]}), 400, field="tags")
    assert_error(http.patch(path(bank, "/d"), json={"tags": "a"}), 422)
    assert_error(http.patch(path(bank, "/d"), json={"tags": [], "colour": 1}), 422)
    assert_error(http.patch(path(bank, "/d"), content=b"{", headers={"content-type": "application/json"}), 400)


# ---- delete --------------------------------------------------------------------------------------

def test_delete_takes_memories_chunks_links_and_entities(http: httpx.Client, server: Any) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "Alice likes tea.", "entities": [{"text": "Alice"}]},
                        {"content": "Alice likes coffee.", "entities": [{"text": "Alice"}]}], document_id="gone")
    retain(http, bank, [{"content": "Bob likes tea.", "entities": [{"text": "Bob"}]}], document_id="stays")
    answer = http.delete(path(bank, "/gone")).json()
    assert answer == {"success": True, "document_id": "gone", "memory_units_deleted": 2,
                      "message": "Document 'gone' and 2 associated memory units deleted successfully"}
    assert [m["document_id"] for m in http.get(f"/v1/default/banks/{bank}/memories/list").json()["items"]] == ["stays"]
    assert [d["id"] for d in http.get(path(bank)).json()["items"]] == ["stays"]
    assert [e["canonical_name"] for e in http.get(f"/v1/default/banks/{bank}/entities").json()["items"]] == ["Bob"]

    assert [sql(server, q, {"bank": bank})[0][0] for q in (
        "SELECT count(*) FROM chunks WHERE bank_id = %(bank)s AND document_id = 'gone'",
        "SELECT count(*) FROM documents WHERE bank_id = %(bank)s AND document_id = 'gone'",
        "SELECT count(*) FROM memory_links l WHERE bank_id = %(bank)s AND NOT EXISTS "
        "(SELECT 1 FROM memory_units u WHERE u.bank_id = l.bank_id AND u.id = l.from_unit_id)")] == [0, 0, 0]
    assert_error(http.delete(path(bank, "/gone")), 404, "document_not_found")


def test_a_document_whose_memories_are_all_forgotten_is_gone(http: httpx.Client) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "Lonely fact."}], document_id="solo")
    memory_id = http.get(f"/v1/default/banks/{bank}/memories/list").json()["items"][0]["id"]
    assert http.delete(f"/v1/default/banks/{bank}/memories/{memory_id}").status_code == 200
    assert_error(http.get(path(bank, "/solo")), 404, "document_not_found")
    assert http.get(path(bank)).json()["total"] == 0


def test_deleting_the_bank_takes_its_documents(http: httpx.Client) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "x"}], document_id="d")
    assert http.delete(f"/v1/default/banks/{bank}").status_code == 200
    assert_error(http.get(path(bank, "/d")), 404, "document_not_found")
    retain(http, bank, [{"content": "y"}], document_id="e")
    assert [d["id"] for d in http.get(path(bank)).json()["items"]] == ["e"]


def test_a_resent_document_replaces_its_text_and_chunks(http: httpx.Client) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "first"}, {"content": "second"}, {"content": "third"}], document_id="d")
    created = http.get(path(bank, "/d")).json()["created_at"]
    retain(http, bank, [{"content": "first"}, {"content": "changed"}], document_id="d")
    doc = http.get(path(bank, "/d")).json()
    assert doc["original_text"] == "first\nchanged" and doc["memory_unit_count"] == 2
    assert doc["created_at"] == created and doc["updated_at"] > created
    chunks = http.get(path(bank, "/d/chunks")).json()
    assert [c["chunk_text"] for c in chunks["items"]] == ["first", "changed"] and chunks["total"] == 2
    retain(http, bank, [{"content": "appended", "update_mode": "append"}], document_id="d")
    assert http.get(path(bank, "/d")).json()["original_text"] == "first\nchanged\nappended"


def test_appends_racing_on_one_document_all_land(server: Any) -> None:
    """Each append is numbered after the document's end as read; one that lost the race to another
    is numbered again (before, both took the same places and the later one overwrote the earlier)."""
    import concurrent.futures

    bank = new_bank()
    with httpx.Client(base_url=server.url, timeout=120) as http:
        retain(http, bank, [{"content": "the first line"}], document_id="log")

    def append(writer: int) -> int:
        items = [{"content": f"writer {writer} line {i}", "document_id": "log", "update_mode": "append"}
                 for i in range(3)]
        with httpx.Client(base_url=server.url, timeout=120) as http:
            return http.post(f"/v1/default/banks/{bank}/memories", json={"items": items}).status_code

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(append, range(4))) == [200] * 4
    with httpx.Client(base_url=server.url, timeout=120) as http:
        text = http.get(path(bank, "/log")).json()["original_text"].split("\n")
    assert len(text) == 13 and sorted(text[1:]) == sorted(f"writer {w} line {i}" for w in range(4) for i in range(3))


# ---- history -------------------------------------------------------------------------------------

def test_history_lists_the_documents_async_retains(http: httpx.Client, server: Any) -> None:
    """Rebuilt from the bank's async operations, as upstream's: a synchronous retain is not in it."""
    bank = new_bank()
    retain(http, bank, [{"content": "x"}], document_id="d")
    assert http.get(path(bank, "/d/history")).json() == {"document_id": "d", "total": 0, "limit": 100, "offset": 0,
                                                          "items": []}
    history = docs_api(server, "get_document_history", bank_id=bank, document_id="d")
    assert history.total == 0 and history.items == []
    assert_error(http.get(path(bank, "/nope/history")), 404, "document_not_found")


# ---- chunks --------------------------------------------------------------------------------------

def test_each_item_is_a_chunk_listed_in_order(http: httpx.Client, server: Any) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": f"Part {i}."} for i in range(5)], document_id="book")
    page = docs_api(server, "list_document_chunks", bank_id=bank, document_id="book", limit=2, offset=1)
    assert (page.total, page.limit, page.offset) == (5, 2, 1)
    assert [(c.chunk_index, c.chunk_text) for c in page.items] == [(1, "Part 1."), (2, "Part 2.")]
    assert page.items[0].chunk_id == f"{bank}_book_1" and page.items[0].document_id == "book"
    assert page.items[0].created_at
    chunk = docs_api(server, "get_chunk", chunk_id=f"{bank}_book_3")
    assert (chunk.bank_id, chunk.document_id, chunk.chunk_index, chunk.chunk_text) == (bank, "book", 3, "Part 3.")
    memory = http.get(f"/v1/default/banks/{bank}/memories/list", params={"q": "Part 3"}).json()["items"][0]
    assert memory["chunk_id"] == chunk.chunk_id


@pytest.mark.parametrize(("params", "field"), [({"limit": "0"}, "limit"), ({"limit": "1001"}, "limit"),
                                               ({"offset": "-1"}, "offset"), ({"offset": str(10**30)}, "offset")])
def test_bad_chunk_paging_is_400(http: httpx.Client, params: dict[str, str], field: str) -> None:
    bank = new_bank()
    retain(http, bank, [{"content": "x"}], document_id="d")
    assert_error(http.get(path(bank, "/d/chunks"), params=params), 400, field=field)


def test_unknown_chunks_are_404(http: httpx.Client) -> None:
    for chunk_id in ("nothing", "no-bank_doc_0", "sha256:" + "0" * 64, "_x_0"):
        assert_error(http.get(f"/v1/default/chunks/{chunk_id}"), 404, "chunk_not_found")


# ---- isolation -----------------------------------------------------------------------------------

def test_one_banks_documents_never_answer_through_another(http: httpx.Client) -> None:
    a, b = new_bank(), new_bank()
    retain(http, a, [{"content": "A's secret text."}], document_id="shared")
    retain(http, a, [{"content": "Only in A."}], document_id="a-only")
    retain(http, b, [{"content": "B's own text."}], document_id="shared")
    assert http.get(path(b, "/shared")).json()["original_text"] == "B's own text."
    assert_error(http.get(path(b, "/a-only")), 404)
    assert_error(http.get(path(b, "/a-only/chunks")), 404)
    assert_error(http.patch(path(b, "/a-only"), json={"tags": ["x"]}), 404)
    assert_error(http.delete(path(b, "/a-only")), 404)
    assert [d["id"] for d in http.get(path(b)).json()["items"]] == ["shared"]
    assert http.get(path(b), params={"q": "secret"}).json()["total"] == 0
    assert http.delete(path(b, "/shared")).status_code == 200
    assert http.get(path(a, "/shared")).json()["original_text"] == "A's secret text."


def test_chunk_ids_name_one_bank_even_when_names_hold_separators(http: httpx.Client) -> None:
    """Bank "x" with document "y_z" and bank "x_y" with document "z" once both made "x_y_z_0"."""
    tag = uuid.uuid4().hex[:6]
    pairs = [(f"x{tag}", "y_z", "from the first bank"), (f"x{tag}_y", "z", "from the second bank"),
             (f"x{tag}~q", "r~s", "tildes")]
    ids = []
    for bank, doc, content in pairs:
        retain(http, bank, [{"content": content}], document_id=doc)
        ids.append(http.get(path(bank, f"/{doc}/chunks")).json()["items"][0]["chunk_id"])
    assert len(set(ids)) == 3 and ids[0] == f"x{tag}_y~5Fz_0" and ids[2] == f"x{tag}~7Eq_r~7Es_0"
    for (bank, doc, content), chunk_id in zip(pairs, ids, strict=True):
        chunk = http.get(f"/v1/default/chunks/{chunk_id}").json()
        assert (chunk["bank_id"], chunk["document_id"], chunk["chunk_text"]) == (bank, doc, content)


def test_an_ambiguous_old_chunk_id_is_refused_not_guessed(http: httpx.Client, server: Any) -> None:
    tag = uuid.uuid4().hex[:6]
    first, second = f"o{tag}", f"o{tag}_p"
    for bank in (first, second):
        retain(http, bank, [{"content": "x"}])
    old_id = f"o{tag}_p_q_0"  # as ids were written before escaping: both banks could own it

    for bank, doc in ((first, "p_q"), (second, "q")):
        sql(server, "INSERT INTO chunks (chunk_id, document_id, bank_id, chunk_index, chunk_text) "
                    "VALUES (%(id)s, %(doc)s, %(bank)s, 0, %(t)s)",
            {"id": old_id, "doc": doc, "bank": bank, "t": f"text of {bank}"})
    assert_error(http.get(f"/v1/default/chunks/{old_id}"), 409, field="more than one bank")
    sql(server, "DELETE FROM chunks WHERE bank_id = %(b)s AND chunk_id = %(id)s", {"b": second, "id": old_id})
    assert http.get(f"/v1/default/chunks/{old_id}").json()["chunk_text"] == f"text of {first}"
