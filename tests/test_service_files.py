"""``POST …/files/retain`` through ``serve``: uploaded text, Markdown, HTML and PDF become documents whose
memories the documents routes read and recall finds, one queued retain per file, run by the queue worker;
verbatim without a retain model, as facts with one; every bad upload refused with nothing written; and
upstream's ``hindsight-client==1.1.0`` calls it as it calls upstream.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hindsight_recall.service.files import passages
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.http_server import FixtureServer
from hindsight_recall.testing.llm_server import STAND_IN_KEY
from hindsight_recall.testing.service import ServerThread, wait_for_operation

KEY = STAND_IN_KEY
HTML = b"""<!doctype html><html><head><title>Helios handbook</title><style>p { color: red }</style>
<script>var secret = "zebra";</script></head><body><h1>Onboarding</h1>
<p>New engineers meet <b>Priya</b> at the <a href="https://example.com/desk">Munich desk</a>.</p>
<ul><li>Badge photos on Monday</li><li>Laptop pickup on Tuesday</li></ul></body></html>"""
MARKDOWN = b"# Garden log\n\n- Planted **tomatoes** in the greenhouse.\n- The basil needs repotting.\n"
TEXT = b"Alice moved to Lisbon in May.\nShe works on sailing drones."


def tiny_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose page shows ``lines`` in Helvetica, with a correct cross-reference table."""
    stream = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
               "/Resources << /Font << /F1 5 0 R >> >> >>",
               f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
               "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = "%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n" + "".join(f"{o:010d} 00000 n \n" for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    return out.encode("latin-1")


PDF = tiny_pdf(["Quarterly report: the Osprey glider shipped in March.", "Revenue grew in Rotterdam."])


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True, file_conversion_max_batch_size=4, file_conversion_max_batch_size_mb=1,
                 retain_chunk_size=400)


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(headers=EXTRAS, base_url=server.url, timeout=120) as c:
        yield c


def new_bank() -> str:
    return f"files-{uuid.uuid4().hex[:10]}"


def upload(http: httpx.Client, bank: str, files: list[tuple[str, bytes, str]],
           request: dict[str, Any] | str | None = None) -> httpx.Response:
    form = {"request": request if isinstance(request, str) else json.dumps(request or {})}
    return http.post(f"/v1/default/banks/{bank}/files/retain", data=form,
                     files=[("files", file) for file in files])



def retained(http: httpx.Client, bank: str, files: list[tuple[str, bytes, str]],
             request: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Upload ``files`` and wait for each one's operation; the operations, in the files' order."""
    response = upload(http, bank, files, request)
    assert response.status_code == 200, response.text
    ids = response.json()["operation_ids"]
    assert len(ids) == len(files) and len(set(ids)) == len(ids)
    return [wait_for_operation(http, f"/v1/default/banks/{bank}", op) for op in ids]


def document_ids(http: httpx.Client, bank: str, ops: list[dict[str, Any]]) -> list[str]:
    """Each operation's document, as the bank's list of operations shows it."""
    listed = http.get(f"/v1/default/banks/{bank}/operations", params={"limit": 100}).json()["operations"]
    by_id = {op["id"]: op["document_id"] for op in listed}
    return [by_id[op["operation_id"]] for op in ops]


def document(http: httpx.Client, bank: str, document_id: str) -> dict[str, Any]:
    response = http.get(f"/v1/default/banks/{bank}/documents/{document_id}")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def recalled(http: httpx.Client, bank: str, query: str) -> list[str]:
    response = http.post(f"/v1/default/banks/{bank}/memories/recall", json={"query": query})
    assert response.status_code == 200, response.text
    return [r["text"] for r in response.json()["results"]]


def test_text_markdown_html_and_pdf_become_documents_that_recall_finds(http: httpx.Client) -> None:
    bank = new_bank()
    meta = [{"document_id": "notes", "context": "diary", "tags": ["life"], "metadata": {"source": "phone"},
             "timestamp": "2024-05-01T00:00:00Z"},
            {"document_id": "garden"}, {"document_id": "handbook", "tags": ["work"]}, {"document_id": "report"}]
    ops = retained(http, bank, [("notes.txt", TEXT, "text/plain"), ("garden.md", MARKDOWN, "text/markdown"),
                                ("handbook.html", HTML, "text/html"), ("report.pdf", PDF, "application/pdf")],
                   {"files_metadata": meta, "document_tags": ["upload"]})
    assert document_ids(http, bank, ops) == ["notes", "garden", "handbook", "report"]
    assert all(op["task_type"] == "retain" and op["result_metadata"]["verbatim"] for op in ops)

    notes = document(http, bank, "notes")
    assert notes["original_text"] == TEXT.decode()
    assert sorted(notes["tags"]) == ["life", "upload"]
    memories = http.get(f"/v1/default/banks/{bank}/memories/list", params={"q": "Lisbon"}).json()["items"]
    assert len(memories) == 1
    memory = http.get(f"/v1/default/banks/{bank}/memories/{memories[0]['id']}").json()
    assert memory["context"] == "diary" and memory["metadata"] == {"source": "phone"}
    assert memory["occurred_start"].startswith("2024-05-01")

    assert document(http, bank, "garden")["original_text"] == MARKDOWN.decode().strip()  # Markdown kept as it is

    handbook = document(http, bank, "handbook")["original_text"]
    assert "<" not in handbook and ">" not in handbook  # no tags left
    for words in ("Helios handbook", "Onboarding", "Priya", "Munich desk", "Badge photos on Monday",
                  "Laptop pickup on Tuesday"):
        assert words in handbook
    assert "zebra" not in handbook and "color" not in handbook  # scripts and styles are not the page's text

    report = document(http, bank, "report")["original_text"]
    assert "Osprey glider shipped in March" in report and "Revenue grew in Rotterdam" in report

    assert any("Osprey glider" in text for text in recalled(http, bank, "When did the Osprey glider ship?"))
    assert any("Priya" in text for text in recalled(http, bank, "Who do new engineers meet?"))
    assert any("tomatoes" in text for text in recalled(http, bank, "What was planted in the greenhouse?"))
    listed = http.get(f"/v1/default/banks/{bank}/documents").json()
    assert {d["id"] for d in listed["items"]} == {"notes", "garden", "handbook", "report"}


def test_a_long_file_is_stored_as_passages_of_one_document(http: httpx.Client) -> None:
    bank = new_bank()
    paragraphs = [f"Paragraph {n} tells of lighthouse keeper number {n} on the rocky coast of Brittany." * 3
                  for n in range(12)]
    text = "\n\n".join(paragraphs)
    [op] = retained(http, bank, [("long.txt", text.encode(), "text/plain")],
                    {"files_metadata": [{"document_id": "lighthouses"}]})
    assert op["result_metadata"]["memories"] > 1  # passages of at most RETAIN_CHUNK_SIZE (400 here) characters
    stored = document(http, bank, "lighthouses")
    assert stored["memory_unit_count"] == op["result_metadata"]["memories"]
    assert all(p in stored["original_text"] for p in paragraphs)
    chunks = http.get(f"/v1/default/banks/{bank}/documents/lighthouses/chunks").json()["items"]
    assert len(chunks) > 1 and all(len(c["chunk_text"]) <= 400 for c in chunks)


def test_passages_cut_at_paragraphs_then_words() -> None:
    assert passages("a b\n\nc d\n\n\ne\n", 100) == ["a b\n\nc d\n\n\ne"]  # short: one passage, as written
    assert passages("one two\n\nthree four", 8) == ["one two", "three", "four"]
    assert passages("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    assert all(len(p) <= 50 for p in passages(" ".join(["word"] * 200), 50))


def test_a_charset_named_by_the_part_decodes_its_text(http: httpx.Client) -> None:
    bank = new_bank()
    retained(http, bank, [("menu.txt", "Café crème brûlée".encode("latin-1"), "text/plain; charset=latin-1"),
                          ("page.html", '<meta charset="windows-1252"><p>Café</p>'.encode("cp1252"), "text/html")],
             {"files_metadata": [{"document_id": "menu"}, {"document_id": "page"}]})
    assert document(http, bank, "menu")["original_text"] == "Café crème brûlée"
    assert document(http, bank, "page")["original_text"] == "Café"


def test_the_kind_comes_from_the_extension_when_the_type_names_none(http: httpx.Client) -> None:
    bank = new_bank()
    retained(http, bank, [("a.md", MARKDOWN, "application/octet-stream"), ("b.pdf", PDF, "application/octet-stream")],
             {"files_metadata": [{"document_id": "a"}, {"document_id": "b"}]})
    assert "tomatoes" in document(http, bank, "a")["original_text"]
    assert "Osprey" in document(http, bank, "b")["original_text"]


def test_a_file_uploaded_again_under_its_id_replaces_its_document(http: httpx.Client) -> None:
    bank = new_bank()
    retained(http, bank, [("v1.txt", b"The ferry leaves at nine.", "text/plain")],
             {"files_metadata": [{"document_id": "ferry"}]})
    retained(http, bank, [("v2.txt", b"The ferry leaves at ten.", "text/plain")],
             {"files_metadata": [{"document_id": "ferry"}]})
    assert document(http, bank, "ferry")["original_text"] == "The ferry leaves at ten."
    assert http.get(f"/v1/default/banks/{bank}/memories/list").json()["total"] == 1


ONE = [("a.txt", b"Some text.", "text/plain")]
BAD: list[tuple[str, list[tuple[str, bytes, str]], dict[str, Any] | str, int, str]] = [
    ("empty file", [("a.txt", b"", "text/plain")], {}, 400, "the file is empty"),
    ("blank file", [("a.txt", b" \n\n\t", "text/plain")], {}, 400, "holds no text"),
    ("not UTF-8", [("a.txt", "café".encode("latin-1"), "text/plain")], {}, 400, "are not UTF-8"),
    ("unknown charset", [("a.txt", b"hi", "text/plain; charset=klingon")], {}, 400, "'klingon'"),
    ("NUL bytes", [("a.txt", b"text\x00more", "text/plain")], {}, 400, "NUL characters"),
    ("unknown type", [("a.docx", b"PK\x03\x04", "application/octet-stream")], {}, 415, "it accepts text"),
    ("image", [("a.png", b"\x89PNG", "image/png")], {}, 415, "pdf: application/pdf"),
    ("not a PDF", [("a.pdf", b"%PDF-1.4 nothing else", "application/pdf")], {}, 400, "not a PDF that can be read"),
    ("PDF without text", [("a.pdf", tiny_pdf([]), "application/pdf")], {}, 400, "scanned PDF"),
    ("one bad file of two", [*ONE, ("b.txt", b"", "text/plain")], {}, 400, "'b.txt'"),
    ("too many files", ONE * 5, {}, 400, "Maximum 4 files"),
    ("too large", [("a.txt", b"x" * (1024 * 1024 + 1), "text/plain")], {}, 413, "maximum of 1MB"),
    ("request not JSON", ONE, "{nope", 400, "Invalid request JSON"),
    ("unknown field", ONE, {"colour": "red"}, 400, "colour"),
    ("per-file field at the top", ONE, {"tags": ["x"]}, 400, "must be placed in the corresponding"),
    ("metadata count", ONE, {"files_metadata": [{}, {}]}, 400, "files_metadata count (2) must match files count (1)"),
    ("unknown parser", ONE, {"parser": "iris"}, 400, "Available: ['builtin']"),
    ("unknown file parser", ONE, {"files_metadata": [{"parser": ["markitdown"]}]}, 400, "not available"),
    ("strategy", ONE, {"files_metadata": [{"strategy": "deep"}]}, 400, "no extraction strategies"),
    ("bad timestamp", ONE, {"files_metadata": [{"timestamp": "someday"}]}, 400, "files_metadata.0.timestamp"),
    ("non-text metadata", ONE, {"files_metadata": [{"metadata": {"n": 3}}]}, 400, "files_metadata.0.metadata.n"),
]


@pytest.mark.parametrize(("files", "request_", "status", "says"), [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_a_bad_upload_is_refused_and_writes_nothing(http: httpx.Client, files: list[tuple[str, bytes, str]],
                                                    request_: dict[str, Any] | str, status: int, says: str) -> None:
    bank = new_bank()
    response = upload(http, bank, files, request_)
    assert response.status_code == status, response.text
    assert says in response.json()["message"], response.json()
    assert http.get(f"/v1/default/banks/{bank}/operations").status_code == 404  # not even the bank was made


def test_a_form_without_its_fields_is_refused_as_upstream_does(server: Any) -> None:
    path = f"/v1/default/banks/{new_bank()}/files/retain"
    with httpx.Client(base_url=server.url, timeout=60) as plain:  # upstream's shapes, no extras
        missing = plain.post(path, data={"request": "{}"})
        assert missing.status_code == 422
        assert missing.json()["detail"][0]["loc"] == ["body", "files"]
        no_request = plain.post(path, files=[("files", ONE[0])])
        assert no_request.status_code == 422 and no_request.json()["detail"][0]["loc"] == ["body", "request"]
        not_multipart = plain.post(path, json={"files": []})
        assert not_multipart.status_code in (400, 422) and isinstance(not_multipart.json()["detail"], (str, list))


def test_banks_are_apart(http: httpx.Client) -> None:
    first, second = new_bank(), new_bank()
    retained(http, first, [("secret.txt", b"The vault code is kept by Ingrid.", "text/plain")],
             {"files_metadata": [{"document_id": "vault"}]})
    retained(http, second, [("other.txt", b"Bees make honey.", "text/plain")],
             {"files_metadata": [{"document_id": "bees"}]})
    assert http.get(f"/v1/default/banks/{second}/documents/vault").status_code == 404
    assert not any("Ingrid" in text for text in recalled(http, second, "Who keeps the vault code?"))
    assert any("Ingrid" in text for text in recalled(http, first, "Who keeps the vault code?"))


def test_the_route_can_be_turned_off(serve: Callable[..., ServerThread]) -> None:
    off = serve(enable_file_upload_api=False)
    with httpx.Client(base_url=off.url, timeout=60) as plain:
        response = plain.post(f"/v1/default/banks/{new_bank()}/files/retain", data={"request": "{}"},
                              files=[("files", ONE[0])])
        features = plain.get("/version").json()["features"]
    assert response.status_code == 404 and "HINDSIGHT_API_ENABLE_FILE_UPLOAD_API" in response.json()["detail"]
    assert features["file_upload_api"] is False


def test_version_says_files_are_served(http: httpx.Client) -> None:
    assert http.get("/version").json()["features"]["file_upload_api"] is True


def test_upstreams_client_uploads_files(server: Any, http: httpx.Client, tmp_path: Path) -> None:
    hindsight_client = pytest.importorskip("hindsight_client")
    bank = new_bank()
    (tmp_path / "trip.md").write_bytes(b"# Trip\n\nWe hiked the Dolomites in July.")
    (tmp_path / "menu.html").write_bytes(b"<p>The <i>risotto</i> was the best dish.</p>")
    with hindsight_client.Hindsight(base_url=server.url, timeout=120) as client:
        answer = client.retain_files(bank, [tmp_path / "trip.md", tmp_path / "menu.html"], context="holiday")
    assert len(answer.operation_ids) == 2
    ops = [wait_for_operation(http, f"/v1/default/banks/{bank}", op) for op in answer.operation_ids]
    ids = document_ids(http, bank, ops)
    assert all(document_id.startswith("file_") for document_id in ids)  # upstream's generated ids
    assert "Dolomites" in document(http, bank, ids[0])["original_text"]
    assert document(http, bank, ids[1])["original_text"] == "The *risotto* was the best dish."
    assert any("Dolomites" in text for text in recalled(http, bank, "Where did we hike?"))


def test_with_a_retain_model_a_files_facts_are_extracted(serve: Callable[..., ServerThread],
                                                          llm: FixtureServer) -> None:
    # a database of its own: the module's other servers, which have no model, would take its queued retains
    extracting = serve(own_database=True, llm_provider="openai", llm_base_url=llm.url + "/v1", llm_api_key=KEY,
                       llm_model="stub-model", llm_max_retries=1, llm_timeout=5)
    bank = new_bank()
    with httpx.Client(headers=EXTRAS, base_url=extracting.url, timeout=120) as client:
        [op] = retained(client, bank, [("notes.txt", TEXT, "text/plain")],
                        {"files_metadata": [{"document_id": "notes"}]})
        assert op["result_metadata"]["verbatim"] is False
        assert op["result_metadata"]["usage"]["total_tokens"] > 0
        texts = sorted(m["text"] for m in client.get(f"/v1/default/banks/{bank}/memories/list").json()["items"])
        assert len(texts) == 2 and any("Lisbon" in t for t in texts) and any("drones" in t for t in texts)
    assert llm.requests_to("POST", "/v1/chat/completions")


def test_an_upload_is_in_the_audit_log(http: httpx.Client) -> None:
    bank = new_bank()
    retained(http, bank, ONE)
    logged = http.get(f"/v1/default/banks/{bank}/audit-logs").json()["items"]
    assert [entry["action"] for entry in logged] == ["file_retain"]
