"""The local cross-encoder reranker, run for real with a tiny model: on ONNX Runtime, and on torch in the
``torch`` tests."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hindsight_recall.errors import RerankerError
from hindsight_recall.protocols import Reranker
from hindsight_recall.settings import Settings
from hindsight_recall_reranker_local import (
    LocalReranker,
    LocalSettings,
    _pick_device,
    register_rerankers,
    shared_pool,
)

QUERY = "where did the fox go"
DOCS = [f"the fox went to place number {i}" + " and further" * (i % 9) for i in range(300)]


class Spy:
    """Wraps a model's ``predict`` to record batch sizes, threads and overlap."""

    def __init__(self, model: Any, pause: float = 0.0, gate: threading.Event | None = None) -> None:
        self.predict, self.pause, self.gate = model.predict, pause, gate
        #: per call: whether the event loop opened the gate while this call was waiting in it
        self.opened: list[bool] = []
        self.sizes: list[int] = []
        self.threads: set[str] = set()
        self.lengths: list[list[int]] = []
        self.running = self.max_running = 0
        self._lock = threading.Lock()
        model.predict = self

    def __call__(self, pairs: list[tuple[str, str]], **kwargs: Any) -> Any:
        with self._lock:
            self.sizes.append(len(pairs))
            self.lengths.append([len(d) for _, d in pairs])
            self.threads.add(threading.current_thread().name)
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            time.sleep(self.pause)  # stands in for a heavier model
            if self.gate is not None:  # only a loop that keeps running while the model works opens it
                self.opened.append(self.gate.wait(timeout=30))
            return self.predict(pairs, **kwargs)
        finally:
            with self._lock:
                self.running -= 1


def record_connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every address a socket of this process connects to from now on, in order."""
    import socket

    attempts: list[Any] = []
    connect = socket.socket.connect

    def recording(sock: socket.socket, address: Any) -> None:
        attempts.append(address)
        connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", recording)
    return attempts


def make(tiny_model: Path, settings: Settings | None = None, **config: Any) -> LocalReranker:
    return LocalReranker(settings or Settings(), LocalSettings(model=str(tiny_model), **config))


@pytest.fixture(scope="module")
async def reranker(tiny_model: Path) -> LocalReranker:
    reranker = make(tiny_model)
    await reranker.start()
    return reranker


async def test_scores_are_raw_logits_in_input_order(reranker: LocalReranker) -> None:
    assert (reranker.backend, reranker.device) == ("onnx", "cpu")  # weights at hand: no torch needed
    docs = DOCS[:20]
    scores = await reranker.score(QUERY, docs)
    assert len(scores) == 20 and all(isinstance(s, float) for s in scores)
    assert any(not 0 <= s <= 1 for s in scores) and len(set(scores)) > 10
    assert await reranker.score(QUERY, docs[::-1]) == pytest.approx(scores[::-1], abs=1e-5)


@pytest.mark.torch
async def test_onnx_gives_the_logits_torch_gives(reranker: LocalReranker, tiny_model: Path) -> None:
    from sentence_transformers import CrossEncoder

    docs = [*DOCS[:20], "a passage far longer than the model reads " * 80]  # truncated alike
    scores = await reranker.score(QUERY, docs)
    on_torch = make(tiny_model, backend="torch")
    assert await on_torch.score(QUERY, docs) == pytest.approx(scores, abs=1e-4)
    assert on_torch.backend == "torch"
    # The model's default head applies a sigmoid; ours must be its inverse image, pair by pair.
    squashed = CrossEncoder(str(tiny_model)).predict([(QUERY, d) for d in docs], show_progress_bar=False)
    for raw, expected in zip(scores, squashed, strict=True):
        assert 1 / (1 + math.exp(-raw)) == pytest.approx(float(expected), abs=1e-5)


async def test_backend_onnx_refuses_a_model_without_safetensors(tmp_path: Path, tiny_model: Path) -> None:
    model = tmp_path / "bin-only"
    model.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (model / name).write_bytes((tiny_model / name).read_bytes())
    with pytest.raises(RerankerError, match=r"BACKEND=onnx cannot run .*model.safetensors.*PROVIDER=rrf"):
        await make(model, backend="onnx").start()


async def test_a_model_that_is_not_a_classifier_is_refused_by_onnx(tmp_path: Path, tiny_model: Path) -> None:
    import json
    import shutil

    model = tmp_path / "encoder"
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    with pytest.raises(RerankerError, match="not a sequence classifier"):
        await make(model, Settings(embeddings_onnx_cache_dir=tmp_path / "c"), backend="onnx").start()


@pytest.mark.parametrize(("option", "why"), [({"backend": "torch"}, "BACKEND=torch needs"),
                                             ({"fp16": True}, "fp16 needs"),
                                             ({"trust_remote_code": True}, "trust_remote_code needs")])
async def test_torch_without_the_extra_names_the_install(tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
                                                         option: dict[str, Any], why: str) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(RerankerError, match=rf"{why} sentence-transformers and torch: "
                                            r"pip install 'hindsight-recall-reranker-local\[torch\]'"):
        await make(tiny_model, **option).start()


async def test_a_hub_model_in_the_cache_runs_on_onnx_offline(tiny_model: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--acme--tiny-ce"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (snapshot / name).write_bytes((tiny_model / name).read_bytes())
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    attempts = record_connections(monkeypatch)
    hub = LocalReranker(Settings(embeddings_onnx_cache_dir=tmp_path / "c"), LocalSettings(model="acme/tiny-ce"))
    scores = await hub.score(QUERY, DOCS[:5])
    assert hub.backend == "onnx" and attempts == []
    assert scores == pytest.approx(await make(tiny_model).score(QUERY, DOCS[:5]), abs=1e-5)


def test_the_onnx_path_imports_no_torch(tiny_model: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from hindsight_recall_reranker_local import LocalReranker, LocalSettings\n"
        f"r = LocalReranker(None, LocalSettings(model={str(tiny_model)!r}))\n"
        "assert len(asyncio.run(r.score('q', ['a', 'b']))) == 2\n"
        "print(r.backend, sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["onnx", "[]"], out.stderr


async def test_300_pairs_go_in_batches_of_32_without_blocking_the_loop(reranker: LocalReranker) -> None:
    gate = threading.Event()
    spy = Spy(reranker._model, pause=0.05, gate=gate)

    async def open_gate() -> None:
        # runs only if the loop is free while a batch is inside the model
        while not spy.running:
            await asyncio.sleep(0.001)
        gate.set()

    task = asyncio.create_task(open_gate())
    try:
        scores = await reranker.score(QUERY, DOCS)
    finally:
        task.cancel()
        reranker._model.predict = spy.predict
    assert len(scores) == 300
    assert sorted(spy.sizes) == [12] + [32] * 9
    assert spy.max_running == 4 and all(t.startswith("hindsight-rerank-4") for t in spy.threads)
    assert spy.opened == [True] * 10  # the loop ran while the model worked: no call blocked it


async def test_batch_size_setting(tiny_model: Path) -> None:
    reranker = make(tiny_model, batch_size=7)
    await reranker.start()
    spy = Spy(reranker._model)
    await reranker.score(QUERY, DOCS[:30])
    assert sorted(spy.sizes) == [2, 7, 7, 7, 7]


async def test_max_concurrent_setting_shares_one_pool(tiny_model: Path) -> None:
    first, second = make(tiny_model, max_concurrent=1), make(tiny_model, max_concurrent=1)
    await first.start()
    second._model = first._model
    spy = Spy(first._model, pause=0.01)
    await asyncio.gather(first.score(QUERY, DOCS[:64]), second.score(QUERY, DOCS[:64]))
    assert spy.max_running == 1 and len(spy.threads) == 1
    assert shared_pool(1) is shared_pool(1) and shared_pool(1)._max_workers == 1


async def test_bucket_batching_groups_similar_lengths(tiny_model: Path, reranker: LocalReranker) -> None:
    bucketed = make(tiny_model, bucket_batching=True, batch_size=16)
    await bucketed.start()
    spy = Spy(bucketed._model)
    docs = DOCS[:64]
    scores = await bucketed.score(QUERY, docs)
    for lengths in spy.lengths:
        assert lengths == sorted(lengths)
    assert max(max(b) - min(b) for b in spy.lengths) < max(len(d) for d in docs) - min(len(d) for d in docs)
    assert scores == pytest.approx(await reranker.score(QUERY, docs), abs=1e-4)


@pytest.mark.torch
async def test_force_cpu_and_trust_remote_code(tiny_model: Path) -> None:
    reranker = make(tiny_model, force_cpu=True, trust_remote_code=True)
    await reranker.start()
    assert reranker.device == "cpu" and str(reranker._model.device) == "cpu"
    assert reranker._model.trust_remote_code is True
    assert make(tiny_model).config.trust_remote_code is False


@pytest.mark.torch
async def test_fp16(tiny_model: Path) -> None:
    import torch

    reranker = make(tiny_model, fp16=True, force_cpu=True)
    scores = await reranker.score(QUERY, DOCS[:8])
    assert next(reranker._model.model.parameters()).dtype == torch.float16
    assert all(math.isfinite(s) for s in scores)


def test_device_choice() -> None:
    def fake_torch(cuda: bool, mps: bool) -> Any:
        return SimpleNamespace(
            cuda=SimpleNamespace(is_available=lambda: cuda),
            backends=SimpleNamespace(mps=SimpleNamespace(is_available=lambda: mps)),
        )

    assert _pick_device(fake_torch(True, True), LocalSettings(force_cpu=True)) == "cpu"
    assert _pick_device(fake_torch(True, True), LocalSettings()) == "cuda"
    assert _pick_device(fake_torch(False, True), LocalSettings()) == "cpu"
    assert _pick_device(fake_torch(False, True), LocalSettings(allow_mps=True)) == "mps"
    assert _pick_device(fake_torch(False, False), LocalSettings(allow_mps=True)) == "cpu"


async def test_score_loads_lazily_and_empty_input_loads_nothing(tiny_model: Path) -> None:
    reranker = make(tiny_model)
    assert await reranker.score(QUERY, []) == [] and reranker._model is None
    assert len(await reranker.score(QUERY, DOCS[:3])) == 3 and reranker._model is not None
    await reranker.close()
    assert reranker._model is None


async def test_unloadable_model_names_the_variable(tmp_path: Path) -> None:
    reranker = LocalReranker(Settings(), LocalSettings(model=str(tmp_path / "no-such-model")))
    with pytest.raises(RerankerError, match="HINDSIGHT_API_RERANKER_LOCAL_MODEL"):
        await reranker.start()


async def test_loading_is_bounded_by_model_init_timeout(tiny_model: Path) -> None:
    reranker = make(tiny_model, Settings(model_init_timeout=0.001))
    with pytest.raises(RerankerError, match="HINDSIGHT_API_MODEL_INIT_TIMEOUT=0.001"):
        await reranker.score(QUERY, DOCS[:3])


def test_settings_defaults_and_prefix() -> None:
    config = LocalSettings()
    assert LocalSettings.model_config["env_prefix"] == "HINDSIGHT_API_RERANKER_LOCAL_"
    assert config.model_dump() == {
        "model": "cross-encoder/ms-marco-MiniLM-L-6-v2",
        "backend": "auto",
        "batch_size": 32,
        "max_concurrent": 4,
        "force_cpu": False,
        "allow_mps": False,
        "fp16": False,
        "trust_remote_code": False,
        "bucket_batching": False,
    }
    assert LocalReranker(None, config).init_timeout == 300


def test_settings_read_their_variables(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    names = ["FORCE_CPU", "ALLOW_MPS", "FP16", "TRUST_REMOTE_CODE", "BUCKET_BATCHING"]
    env.write_text(
        "HINDSIGHT_API_RERANKER_LOCAL_MODEL=/models/ce\nHINDSIGHT_API_RERANKER_LOCAL_BATCH_SIZE=8\n"
        "HINDSIGHT_API_RERANKER_LOCAL_MAX_CONCURRENT=2\nHINDSIGHT_API_RERANKER_LOCAL_BACKEND=torch\n"
        + "".join(f"HINDSIGHT_API_RERANKER_LOCAL_{n}=true\n" for n in names)
    )
    config = LocalSettings(_env_file=env)  # type: ignore[call-arg]
    assert (config.model, config.batch_size, config.max_concurrent, config.backend) == ("/models/ce", 8, 2, "torch")
    assert all(getattr(config, n.lower()) is True for n in names)


def test_import_is_cheap() -> None:
    code = (
        "import sys, hindsight_recall_reranker_local; "
        "print('torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_registers_a_reranker_class() -> None:
    registered: list[object] = []
    register_rerankers(registered.append)
    assert registered == [LocalReranker]
    assert isinstance(LocalReranker, Reranker)
    assert LocalReranker.name == "local" and LocalReranker.passthrough is False


async def test_a_hub_name_offline_fails_fast_with_one_line_that_says_the_fix(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    attempts = record_connections(monkeypatch)
    reranker = LocalReranker(Settings(), LocalSettings(model="cross-encoder/not-cached-here"))
    with pytest.raises(RerankerError) as err:
        await reranker.start()
    assert attempts == []  # offline means no connection at all, so nothing to wait for
    message = str(err.value)
    assert "\n" not in message and "HF_HUB_OFFLINE" in message
    assert "HINDSIGHT_API_RERANKER_LOCAL_MODEL" in message and "HINDSIGHT_API_RERANKER_PROVIDER=rrf" in message
    assert capfd.readouterr().err == ""  # no retry warnings


async def test_a_hub_name_without_network_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from huggingface_hub import constants

    with socket.socket() as sock:  # a port that refuses connections: the hub "cannot be reached"
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    attempts = record_connections(monkeypatch)
    reranker = LocalReranker(Settings(), LocalSettings(model="cross-encoder/not-cached-here"))
    with pytest.raises(RerankerError, match=rf"hub \(http://127.0.0.1:{port}\) cannot be reached: set "):
        await reranker.start()
    # failing fast: one probe of the port, then no download attempts and no retries with back-off
    assert attempts == [("127.0.0.1", port)]


async def test_a_missing_model_directory_is_named(tmp_path: Path) -> None:
    reranker = LocalReranker(Settings(), LocalSettings(model=str(tmp_path / "gone")))
    with pytest.raises(RerankerError, match=r"no cross-encoder directory at .*gone.*PROVIDER=rrf"):
        await reranker.start()


def test_settings_given_in_code(tiny_model: Path) -> None:
    reranker = LocalReranker(Settings(plugins={"reranker": {"local": {"model": str(tiny_model), "batch_size": 3}}}))
    assert (reranker.config.model, reranker.config.batch_size) == (str(tiny_model), 3)
    config = LocalSettings(model=str(tiny_model), fp16=True)
    assert LocalReranker(Settings(plugins={"reranker": {"local": config}})).config is config
