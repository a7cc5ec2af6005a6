"""Archives are checked whole before anything is written: every malformed entry a 400 naming the entry
and field, the size, entry count and nesting capped, and a refused import changes nothing at all."""

from __future__ import annotations

import contextlib
import io
import json
import os
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hindsight_recall.service.wire import EXTRAS
from hindsight_recall.testing.service import ServerThread

DEEP = b"[" * 200_000 + b"]" * 200_000


@pytest.fixture(scope="module")
def server(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True, archive_max_entries=50, archive_max_bytes=20_000_000)


@pytest.fixture
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120, headers=EXTRAS) as c:
        yield c


def new_bank(http: httpx.Client, documents: dict[str, int] | None = None) -> str:
    """A bank with ``documents`` (id -> number of items), 'keep' with 4 by default."""
    bank = f"ar-{uuid.uuid4().hex[:10]}"
    for document, n in (documents or {"keep": 4}).items():
        items = [{"content": f"{document} line {i}: the ferry left at {i} o'clock.", "document_id": document}
                 for i in range(n)]
        http.post(f"/v1/default/banks/{bank}/memories", json={"items": items}).raise_for_status()
    return bank


def zipped(entries: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, value in entries.items():
            zf.writestr(name, value if isinstance(value, bytes) else json.dumps(value))
    return buf.getvalue()


MANIFEST = {"schema_version": 1, "source_bank_id": "src", "archive_type": "bank"}


def document(doc_id: str, facts: list[Any]) -> dict[str, Any]:
    return {"id": doc_id, "chunks": [], "facts": facts}


GOOD = document("good", [{"text": f"Good fact {i}."} for i in range(3)])


def tables(server: Any, *banks: str) -> Any:
    """Every bank-keyed row of the banks (transfer records aside), read over a connection of its own."""
    from hindsight_recall.testing.snapshot import read_bank_rows

    return read_bank_rows(server.engine.db.url, banks, skip={"operations": ["*"], "bank_transfers": ["*"]})


def refused(response: httpx.Response, *words: str) -> str:
    assert response.status_code == 400, (response.status_code, response.text)
    message = str(response.json()["message"])
    for word in words:
        assert word in message, (word, message)
    return message


def post(http: httpx.Client, path: str, archive: bytes, **params: str) -> httpx.Response:
    return http.post(path, params=params, files={"file": ("a.zip", archive)})


#: archive -> words its refusal must hold (the entry and the field)
HOSTILE: dict[str, tuple[Callable[[], bytes], tuple[str, ...]]] = {
    "deep manifest": (lambda: zipped({"manifest.json": DEEP}), ("manifest.json", "nested deeper")),
    "deep document": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": DEEP}),
                      ("documents/000000.json", "nested deeper")),
    "deep link line": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": GOOD,
                                       "hindsight-recall/links.jsonl": DEEP + b"\n"}),
                       ("hindsight-recall/links.jsonl line 1", "nested deeper")),
    "causal relations not a list": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": document(
        "d", [{"text": "x", "causal_relations": 5}])}), ("documents/000000.json", "facts[0].causal_relations")),
    "observation sources not a list": (lambda: zipped({"manifest.json": MANIFEST, "observations.json": [
        {"text": "obs", "sources": 5}]}), ("observations.json", "sources")),
    "observation metadata not an object": (lambda: zipped({"manifest.json": MANIFEST, "observations.json": [
        {"text": "obs", "hindsight_recall": {"metadata": [1]}}]}), ("observations.json", "metadata")),
    "fact ours not an object": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": document(
        "d", [{"text": "x", "hindsight_recall": [1, 2]}])}), ("documents/000000.json", "facts[0].hindsight_recall")),
    "fact text not a string": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": GOOD,
                                               "documents/000001.json": document("zbaddoc", [{"text": 5}])}),
                               ("documents/000001.json", "zbaddoc", "facts[0].text")),
    "bad date": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": document(
        "d", [{"text": "x", "occurred_start": "yesterday-ish"}])}), ("documents/000000.json", "occurred_start")),
    "metadata value an object": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": document(
        "d", [{"text": "x", "metadata": {"k": {"deep": 1}}}])}), ("documents/000000.json", "metadata.k")),
    "chunk without text": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": {
        "id": "d", "chunks": [{"chunk_index": 0}], "facts": []}}), ("documents/000000.json", "chunks[0]")),
    "one id twice": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": document(
        "a", [{"text": "x", "source_id": "same"}]), "documents/000001.json": document(
        "b", [{"text": "y", "source_id": "same"}])}), ("documents/000001.json", "'same' appears twice")),
    "source outside the archive": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": document(
        "a", [{"text": "x", "hindsight_recall": {"id": "m", "sources": ["ghost"]}}])}), ("'ghost'", "sources")),
    "link weight out of range": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": GOOD,
                                                 "hindsight-recall/links.jsonl": b'{"from":"a","to":"b",'
                                                 b'"type":"semantic","weight":7}\n'}), ("line 1", "weight")),
    "bad invalidated memory": (lambda: zipped({"manifest.json": MANIFEST, "hindsight-recall/invalidated.jsonl":
                                               b'{"memory": {"id": "x", "text": 3}}\n'}),
                               ("invalidated.jsonl line 1", "memory.text")),
    "banks.json config a list": (lambda: zipped({"manifest.json": MANIFEST, "banks.json": [{"config": [1]}]}),
                                 ("banks.json", "config")),
    "manifest a list": (lambda: zipped({"manifest.json": [1]}), ("manifest.json",)),
    "manifest without source": (lambda: zipped({"manifest.json": {"schema_version": 1}}),
                                ("manifest.json", "source_bank_id")),
    "not JSON": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": b"{nope"}),
                 ("documents/000000.json", "not valid JSON")),
    "too many entries": (lambda: zipped({"manifest.json": MANIFEST, **{f"x/{i}": b"" for i in range(60)}}),
                         ("61 entries", "ARCHIVE_MAX_ENTRIES")),
    "too big expanded": (lambda: zipped({"manifest.json": MANIFEST, "documents/000000.json": b" " * 25_000_000}),
                         ("expand to", "ARCHIVE_MAX_BYTES")),
    "not a zip": (lambda: b"PK\x03\x04 but not really", ("not a readable .zip",)),
}


@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize("mode", ["restore", "merge", "document-transfer"])
def test_a_hostile_archive_is_refused_naming_entry_and_field_and_changes_nothing(
    server: Any, http: httpx.Client, name: str, mode: str
) -> None:
    make, words = HOSTILE[name]
    if mode != "restore" and name in ("source outside the archive", "link weight out of range",
                                      "bad invalidated memory", "banks.json config a list",
                                      "observation sources not a list", "observation metadata not an object",
                                      "deep link line"):
        words = ()  # a merge reads documents only: these entries are not its to read
    bank = new_bank(http)
    target = f"{bank}-new"
    before = tables(server, bank, target)
    archive = make()
    if mode == "restore":
        response = post(http, f"/v1/default/banks/{bank}/transfer/import", archive, target_bank_id=target)
    elif mode == "merge":
        response = post(http, f"/v1/default/banks/{bank}/transfer/import", archive, mode="merge")
    else:
        response = post(http, f"/v1/default/banks/{target}/document-transfer", archive)
    if words:
        refused(response, *words)
    else:
        assert response.status_code in (202, 400), response.text
        if response.status_code == 202:
            return  # the documents were fine; what a merge does not read cannot refuse it
    assert tables(server, bank, target) == before
    assert http.get(f"/v1/default/banks/{target}/stats").status_code == 404


def test_a_refused_merge_writes_none_of_the_archive(server: Any, http: httpx.Client) -> None:
    bank = new_bank(http)
    archive = zipped({"manifest.json": MANIFEST, "documents/000000.json": GOOD,
                      "documents/000001.json": document("zbaddoc", [{"text": 5}])})
    before = tables(server, bank)
    refused(post(http, f"/v1/default/banks/{bank}/transfer/import", archive, mode="merge"), "zbaddoc", "facts[0]")
    assert tables(server, bank) == before
    m2 = f"{bank}-m2"
    refused(post(http, f"/v1/default/banks/{m2}/document-transfer", archive), "zbaddoc")
    assert http.get(f"/v1/default/banks/{m2}/stats").status_code == 404  # no bank left behind


def test_a_refused_replace_deletes_nothing(server: Any, http: httpx.Client) -> None:
    bank = new_bank(http)
    archive = zipped({"manifest.json": MANIFEST, "documents/000000.json": document(
        "keep", [{"text": "new version"}, {"text": 5}])})
    before = tables(server, bank)
    refused(post(http, f"/v1/default/banks/{bank}/transfer/import", archive, mode="merge",
                 document_conflict="replace"), "keep", "facts[1].text")
    assert tables(server, bank) == before
    listed = http.get(f"/v1/default/banks/{bank}/memories/list", params={"document_id": "keep"}).json()
    assert listed["total"] == 4


def test_a_merge_that_replaces_is_whole(server: Any, http: httpx.Client) -> None:
    bank = new_bank(http)
    archive = zipped({"manifest.json": MANIFEST, "documents/000000.json": document(
        "keep", [{"text": "new version"}])})
    post(http, f"/v1/default/banks/{bank}/transfer/import", archive, mode="merge",
         document_conflict="replace").raise_for_status()
    listed = http.get(f"/v1/default/banks/{bank}/memories/list", params={"document_id": "keep"}).json()
    assert [m["text"] for m in listed["items"]] == ["new version"]


def test_the_limits_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from hindsight_recall.settings import load_settings

    defaults = load_settings()
    assert (defaults.archive_max_bytes, defaults.archive_max_entries, defaults.archive_max_depth) == (
        256 * 1024 * 1024, 100_000, 32)
    monkeypatch.setenv("HINDSIGHT_API_ARCHIVE_MAX_BYTES", "1000")
    monkeypatch.setenv("HINDSIGHT_API_ARCHIVE_MAX_ENTRIES", "7")
    monkeypatch.setenv("HINDSIGHT_API_ARCHIVE_MAX_DEPTH", "8")
    got = load_settings()
    assert (got.archive_max_bytes, got.archive_max_entries, got.archive_max_depth) == (1000, 7, 8)
    from hindsight_recall.errors import ConfigError

    with pytest.raises(ConfigError, match="ARCHIVE_MAX_DEPTH"):
        load_settings(archive_max_depth=2)


def test_the_depth_limit_holds_below_the_parser_s_own(tmp_path: Path) -> None:
    from hindsight_recall.archive_reader import Limits, Reader

    nested: Any = {"text": "x"}
    for _ in range(10):
        nested = {"k": nested}
    path = tmp_path / "a.zip"
    path.write_bytes(zipped({"manifest.json": MANIFEST, "documents/000000.json": document(
        "d", [{"text": "x", "metadata": nested}])}))
    with pytest.raises(Exception, match=r"documents/000000.json: nested deeper than 8 levels"):
        Reader(str(path), Limits(10**9, 100, 8), merge=False).run(io.BytesIO())


def _bomb(path: Path, entries: int, entry_bytes: int) -> Path:
    """An archive whose documents are ``entries`` runs of JSON whitespace of ``entry_bytes`` each."""
    block = b" " * (1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("manifest.json", json.dumps(MANIFEST))
        for number in range(entries):
            with zf.open(f"documents/{number:06d}.json", "w", force_zip64=True) as handle:
                for _ in range(entry_bytes >> 20):
                    handle.write(block)
    return path


#: probes /health/live every 5 ms until its stdin closes; prints "wall-clock latency status" per probe
_PROBE = """
import sys, threading, time
import httpx
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
with httpx.Client(base_url=sys.argv[1], timeout=10) as client:
    while not stop.is_set():
        at, started = time.time(), time.perf_counter()
        status = client.get("/health/live").status_code
        print(at, time.perf_counter() - started, status, flush=True)
        time.sleep(0.005)
"""


@pytest.mark.slow
def test_health_answers_at_once_while_archives_are_refused_or_imported(tmp_path: Path) -> None:
    """/health/live stays under 100 ms (p99, probed from a process of its own) while 1 GB-expanding
    archives are refused, one just under the limit is parsed and refused, and a 3,000-fact archive is
    imported."""
    import statistics
    import subprocess
    import sys
    import time

    from hindsight_recall.testing.service import ServeProcess

    env = {k: v for k, v in os.environ.items() if not k.startswith("HINDSIGHT_API_")}
    env.update({"HINDSIGHT_API_EMBEDDED_DATA_DIR": str(tmp_path / "pg" / "data"),
                "HINDSIGHT_API_RERANKER_PROVIDER": "rrf"})
    if os.environ.get("HINDSIGHT_TEST_DATABASE_URL"):
        env["HINDSIGHT_API_DATABASE_URL"] = os.environ["HINDSIGHT_TEST_DATABASE_URL"]
    gigabyte = _bomb(tmp_path / "gigabyte.zip", 5, 200 << 20)
    heavy = _bomb(tmp_path / "heavy.zip", 1, 250 << 20)
    facts = [{"text": f"Fact {i}: the ferry to island {i % 50} left at dawn.", "entities": [f"Island {i % 50}"]}
             for i in range(3000)]
    legit = zipped({"manifest.json": MANIFEST, **{f"documents/{d:06d}.json": document(
        f"d{d}", facts[d * 100 : (d + 1) * 100]) for d in range(30)}})
    server = ServeProcess(env, (tmp_path / "serve.log").open("w")).start()
    phases: list[tuple[str, float, float]] = []
    try:
        with httpx.Client(base_url=server.url, timeout=600, headers=EXTRAS) as http:
            http.put("/v1/default/banks/host", json={}).raise_for_status()
            prober = subprocess.Popen([sys.executable, "-c", _PROBE, server.url], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            time.sleep(1)
            url = "/v1/default/banks/host/transfer/import"
            started = time.time()
            for _ in range(8):
                refused(http.post(url, params={"target_bank_id": "bomb"}, files={"file": gigabyte.open("rb")}),
                        "ARCHIVE_MAX_BYTES")
            phases.append(("8 uploads of a 1 GB-expanding archive refused", started, time.time()))
            refused(http.post(url, params={"target_bank_id": "heavy"}, files={"file": heavy.open("rb")}),
                    "documents/000000.json", "not valid JSON")
            phases.append(("a 250 MB entry parsed and refused", phases[-1][2], time.time()))
            imported = http.post(url, params={"target_bank_id": "legit"}, files={"file": ("a.zip", legit)})
            assert imported.status_code == 202, imported.text
            phases.append(("3,000 facts imported", phases[-1][2], time.time()))
            out, _ = prober.communicate(input="", timeout=60)
            assert http.get("/v1/default/banks/legit/stats").json()["total_nodes"] == 3000
    finally:
        server.stop()
    probes = [(float(at), float(seconds), int(status)) for at, seconds, status in map(str.split, out.splitlines())]
    assert {status for _, _, status in probes} == {200}

    def p99(values: list[float]) -> float:
        return sorted(values)[max(int(len(values) * 0.99) - 1, 0)]

    every: list[float] = []
    for name, start, end in phases:
        values = [seconds for at, seconds, _ in probes if start <= at < end]
        every += values
        print(f"/health/live while {name} ({end - start:.1f} s): {len(values)} probes, median "
              f"{statistics.median(values) * 1000:.1f} ms, p99 {p99(values) * 1000:.1f} ms, "
              f"max {max(values) * 1000:.1f} ms")
        assert p99(values) < 0.1, name
    refusals = phases[0][2] - phases[0][1]
    print(f"a 1 GB-expanding archive refused in {refusals / 8:.2f} s on average")
    assert refusals / 8 < 5 and p99(every) < 0.1


def test_a_killed_imports_files_are_removed_at_the_next_start(tmp_path: Path) -> None:
    """``serve`` killed (SIGKILL) while it reads an uploaded archive leaves the upload and the reader's
    records in the temporary folder; the next start removes them."""
    import signal
    import threading
    import time

    import psutil
    from hindsight_recall.store import embedded
    from hindsight_recall.testing.service import ServeProcess

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    data_dir = tmp_path / "pg" / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINDSIGHT_API_")}
    env.update({"HINDSIGHT_API_EMBEDDED_DATA_DIR": str(data_dir), "HINDSIGHT_API_RERANKER_PROVIDER": "rrf",
                "TMPDIR": str(temporary)})
    if os.environ.get("HINDSIGHT_TEST_DATABASE_URL"):
        env["HINDSIGHT_API_DATABASE_URL"] = os.environ["HINDSIGHT_TEST_DATABASE_URL"]
    heavy = _bomb(tmp_path / "heavy.zip", 1, 250 << 20)  # its reader takes seconds
    killed = ServeProcess(env, (tmp_path / "killed.log").open("w")).start()

    def upload() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{killed.url}/v1/default/banks/host/transfer/import", params={"target_bank_id": "heavy"},
                       files={"file": heavy.open("rb")}, headers=EXTRAS, timeout=120)

    def files() -> list[Path]:
        return sorted(p for p in temporary.rglob("*") if p.is_file())

    sender = threading.Thread(target=upload)
    sender.start()
    try:
        deadline = time.monotonic() + 60
        while not any(p.name == "records" for p in files()) and time.monotonic() < deadline:
            time.sleep(0.05)  # the upload is saved and its reader has started
        reader = psutil.Process(killed.process.pid).children(recursive=True)
        killed.stop(signal.SIGKILL)
        for child in reader:  # the reader would write on in its folder until it ends
            with contextlib.suppress(psutil.Error):
                child.kill()
        sender.join(timeout=60)
        left = [p for p in files() if p.name in ("archive.zip", "records")]  # (the model's caches are here too)
        assert sorted(p.name for p in left) == ["archive.zip", "records"], left
        ServeProcess(env, (tmp_path / "next.log").open("w")).start().stop()
        assert not [p for p in left if p.parent.exists()]
        assert not [p for p in files() if p.name in ("archive.zip", "records")]
    finally:
        killed.stop(signal.SIGKILL)
        with contextlib.suppress(Exception):
            embedded.stop_server(data_dir)


_HOLD = """
import sys
from hindsight_recall.scratch import work_folder
with work_folder("upload") as folder:
    print(folder, flush=True)
    sys.stdin.read()
"""


def test_only_the_work_folders_of_gone_processes_are_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys
    import tempfile

    from hindsight_recall import scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    holders = [subprocess.Popen([sys.executable, "-c", _HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env) for _ in range(2)]
    live, dead = (Path(h.stdout.readline().strip()) for h in holders)  # type: ignore[union-attr]
    holders[1].kill()
    holders[1].wait()
    (tmp_path / scratch.place().name / "not-a-work-folder").mkdir()
    with scratch.work_folder("clone") as mine:
        assert live.parent == dead.parent == mine.parent == scratch.place()
        assert scratch.sweep() == 1
        assert not dead.exists() and live.is_dir() and mine.is_dir()
        assert (scratch.place() / "not-a-work-folder").is_dir()
    assert not mine.exists()
    holders[0].communicate("")
    assert not live.exists()
