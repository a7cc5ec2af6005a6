"""``hindsight-recall serve`` as a process, and the command line as a thin client of it (``--url``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hindsight_recall.testing.service import ServerThread

#: runs the command line, then reports whether the model stack was imported
PROBE = (
    "import sys\n"
    "from hindsight_recall.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:], prog_name='hindsight-recall')\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "else:\n"
    "    code = 0\n"
    "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules)\n"
    "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HINDSIGHT_API_", "HINDSIGHT_RECALL_"))}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **extra}


def thin(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``hindsight-recall ARGS`` in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120,
                          env=cli_env(**env))


@pytest.fixture(scope="module")
def served(serve: Callable[..., ServerThread]) -> ServerThread:
    return serve(own_database=True)


@pytest.fixture(scope="module")
def loaded(served: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A bank retained through ``retain FILE --url``; returns its id."""
    bank = f"cli-{uuid.uuid4().hex[:8]}"
    path = tmp_path_factory.mktemp("cli") / "memories.jsonl"
    lines = [
        {"id": "job", "text": "Priya works at Orbital Foods as a pastry chef.", "occurred_at": "2024-03-01T00:00:00Z",
         "entities": ["Priya"], "tags": ["work"]},
        {"id": "pet", "text": "Priya adopted a grey cat called Miso.", "type": "experience"},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    done = thin("retain", str(path), "--bank", bank, "--url", served.url)
    assert done.returncode == 0, done.stderr
    assert "retained 2 memories in 1 bank(s)" in done.stdout and "HEAVY=\n" in done.stderr
    return bank


def test_recall_over_http_imports_no_model(served: Any, loaded: str) -> None:
    done = thin("recall", "Where does Priya work?", "--bank", loaded, "--json", HINDSIGHT_RECALL_URL=served.url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["id"] == "job"
    assert "HEAVY=\n" in done.stderr


def test_recall_over_http_prints_like_the_local_command(served: Any, loaded: str) -> None:
    done = thin("recall", "Which pet does Priya have?", "--bank", loaded, "--url", served.url, "--limit", "1",
                "--types", "experience")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith("pet: Priya adopted a grey cat called Miso.")


def test_bank_commands_over_http(served: Any, loaded: str) -> None:
    listed = thin("bank", "list", "--url", served.url)
    assert f"{loaded}\t2" in listed.stdout
    stats = json.loads(thin("bank", "stats", loaded, "--url", served.url).stdout)
    assert stats["total_nodes"] == 2
    config = thin("bank", "config", loaded, "enable_graph_retrieval=false", "--url", served.url)
    assert json.loads(config.stdout) == {"enable_graph_retrieval": False}
    forgot = thin("bank", "forget", loaded, "pet", "nope", "--url", served.url)
    assert "forgot 1 of 2 memories" in forgot.stdout
    missing = thin("bank", "stats", "no-such-bank", "--url", served.url)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    deleted = thin("bank", "delete", loaded, "--yes", "--url", served.url)
    assert deleted.returncode == 0 and "HEAVY=\n" in deleted.stderr


def test_errors_from_the_service_are_one_line(served: Any) -> None:
    done = thin("recall", "&|!", "--bank", "b", "--url", served.url)
    assert done.returncode == 1 and "422" in done.stderr and "query" in done.stderr
    assert "Traceback" not in done.stderr
    unreachable = thin("recall", "x", "--bank", "b", "--url", "http://127.0.0.1:9")
    assert unreachable.returncode == 1 and "cannot reach the service" in unreachable.stderr


def test_serve_runs_and_shuts_down_gracefully(tmp_path: Path) -> None:
    """SIGTERM: the retain in flight completes with 200, new connections are refused, the process exits 0."""
    from hindsight_recall.testing.service import free_port

    port = free_port()
    env = cli_env(HINDSIGHT_API_EMBEDDED_DATA_DIR=str(tmp_path / "pg"), HINDSIGHT_API_RERANKER_PROVIDER="rrf",
                  HINDSIGHT_API_PORT=str(port), HINDSIGHT_API_SERVICE_SHUTDOWN_TIMEOUT="120")
    process = subprocess.Popen([sys.executable, "-m", "hindsight_recall.cli", "serve"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        items = [{"content": f"Memory number {i} about topic {i % 17} and item {i * 7}."} for i in range(400)]
        answer: dict[str, Any] = {}

        def retain() -> None:
            try:
                answer["response"] = httpx.post(f"{url}/v1/default/banks/grace/memories", json={"items": items},
                                                timeout=300)
            except httpx.HTTPError as exc:
                answer["response"] = exc

        worker = threading.Thread(target=retain)
        worker.start()
        while worker.is_alive() and "hindsight_http_requests_in_flight 2.0" not in httpx.get(f"{url}/metrics").text:
            time.sleep(0.05)  # until the retain is in flight (the scrape itself is the other one)
        process.send_signal(signal.SIGTERM)
        worker.join(timeout=300)
        response = answer["response"]
        assert isinstance(response, httpx.Response), f"{response!r}: {process.stdout.read() if process.stdout else ''}"
        assert response.status_code == 200, f"{response.text}: {process.stdout.read() if process.stdout else ''}"
        assert response.json()["items_count"] == 400
        assert process.wait(timeout=120) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health/live", timeout=2)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = process.stdout.read() if process.stdout else ""
    assert "127.0.0.1" in log and "Traceback" not in log
