"""The ONNX Runtime backend of the local embedder: a sentence-transformers mean-pooling model, built once.

The graph is written from the model's safetensors weights (:mod:`._bert_graph`: the BERT encoder,
mean pooling and normalisation), so neither torch nor transformers is needed, and run with
``onnxruntime``; it is cached, keyed by the contents of the model's weights and config. The local cross-encoder
reranker builds its graphs here too (:func:`built`, :func:`inference_session`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ._bert_graph import INPUTS, Head, UnsupportedModel
from .errors import ConfigError
from .settings import usable_cpus

#: how to repair an install that lost a dependency (both are dependencies of hindsight-recall)
INSTALL = "pip install 'onnxruntime>=1.20' 'onnx>=1.17'"
#: part of every cache key: a change to the graph builder builds every model again
GRAPH_VERSION = "bert-graph-1"
#: the files a graph is built from
WEIGHTS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.json"


def default_cache_dir() -> Path:
    """Where built graphs are kept unless ``EMBEDDINGS_ONNX_CACHE_DIR`` says otherwise."""
    return Path.home() / ".cache" / "hindsight-recall" / "onnx"


def cache_key(model: str, head: Head = "mean") -> str:
    """A folder name that changes when the model's weights or config, the head or the graph builder change.

    The files' contents decide it, not where they lie: every virtual environment that installs the same
    model shares one graph (and a reinstall builds none).
    """
    digest = hashlib.sha256(f"{GRAPH_VERSION}:{Path(model).name}".encode()
                            + (b"" if head == "mean" else f"#{head}".encode()))
    path = Path(model)
    if path.is_dir():
        for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")) + [path / CONFIG]:
            if f.exists():
                stat = f.stat()
                digest.update(f"{f.name}:{_content_digest(str(f.resolve()), stat.st_size, stat.st_mtime_ns)}".encode())
    return f"{path.name or 'model'}-{digest.hexdigest()[:16]}"


@functools.lru_cache(maxsize=64)
def _content_digest(path: str, size: int, mtime_ns: int) -> str:
    """A file's BLAKE2 digest, read once per process for each size and modification time it has."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "blake2b").hexdigest()


def _mean_pooling_model(model: str) -> tuple[int, bool]:
    """The max sequence length and whether the model pools by mean (the only pooling built here)."""
    path = Path(model)
    max_len = 512
    config = path / "sentence_bert_config.json"
    if config.exists():
        max_len = int(json.loads(config.read_text()).get("max_seq_length") or max_len)
    pooling = path / "1_Pooling" / "config.json"
    mean = not pooling.exists() or bool(json.loads(pooling.read_text()).get("pooling_mode_mean_tokens"))
    return max_len, mean


def export(model: str, target: Path, head: Head = "mean") -> Path:
    """Write the ONNX graph of ``model`` (a directory with safetensors weights) with ``head`` to
    ``target``, and its tokenizer beside it; return ``target``.

    :raises ConfigError: the directory lacks a file, or holds a model the builder does not write.
    """
    import onnx  # late: only a first run builds

    from . import _bert_graph, _safetensors

    path = Path(model)
    missing = [name for name in (WEIGHTS, CONFIG, TOKENIZER) if not (path / name).is_file()]
    if missing:
        raise ConfigError(f"{model!r} is not a model directory with {', '.join(missing)}: the graph is built "
                          f"from {WEIGHTS}, {CONFIG} and {TOKENIZER}")
    try:
        graph = _bert_graph.build(_safetensors.read(path / WEIGHTS), json.loads((path / CONFIG).read_text()), head)
    except (UnsupportedModel, ValueError) as exc:
        raise ConfigError(f"{model!r} cannot be built as an ONNX graph: {exc}") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f"{target.name}.{os.getpid()}.part")
    onnx.save(graph, str(part))
    tokenizer = target.with_name(f"{TOKENIZER}.{os.getpid()}.part")
    shutil.copyfile(path / TOKENIZER, tokenizer)
    tokenizer.replace(target.with_name(TOKENIZER))
    part.replace(target)  # atomic, and last: a concurrent process sees the whole graph (and its tokenizer) or none
    return target


def built(model: str, cache_dir: Path, head: Head) -> Path:
    """The cached graph of ``model`` with ``head``, built first when absent."""
    target = cache_dir / cache_key(model, head) / "model.onnx"
    if not target.exists():
        try:
            import onnx  # noqa: F401  (the builder writes through it)
        except ImportError as exc:
            raise ConfigError(f"building the model's ONNX graph needs the onnx package: {INSTALL}") from exc
        export(model, target, head)
    return target


def inference_session(path: Path) -> Any:
    """An ONNX Runtime session on ``path`` for a server's CPU: one thread per run (:func:`run_batches`
    spreads batches over the cores instead), no spinning, no per-shape memory patterns."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # A query is one short text: split over two cores it cost 4.6-5.1 ms of CPU against 3.1-3.4 on
    # one, in the same time. Whole batches side by side, each on one thread, embedded 320 passages a
    # second against 266 with every thread on each batch in turn.
    options.intra_op_num_threads = 1
    # no busy-waiting between ops: the threads would spin on cores PostgreSQL and the arms need
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # no memory pattern per input shape: every batch has its own (rows, tokens) shape, and the
    # patterns ONNX Runtime keeps for each shape it has seen grew a long-running server for hours
    options.enable_mem_pattern = False
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@functools.cache
def _cpus() -> int:
    """The CPUs batches are spread over, read once: the pool and the split into batches agree."""
    return usable_cpus()


@functools.cache
def _runners() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_cpus(), thread_name_prefix="onnx")


def run_batches(session: Any, batches: Sequence[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """The first output of ``session`` for each batch of inputs, in order: one batch in the calling
    thread, more side by side on a thread per CPU (a run releases the GIL)."""
    if len(batches) == 1:
        return [session.run(None, batches[0])[0]]
    return list(_runners().map(lambda inputs: session.run(None, inputs)[0], batches))


def batch_size_for(count: int, batch_size: int) -> int:
    """Texts per batch for ``count`` texts: at most ``batch_size``, and small enough that every CPU
    gets a batch of a call with few texts."""
    return max(1, min(batch_size, -(-count // _cpus())))


def padded(encodings: Sequence[Any], names: set[str]) -> dict[str, np.ndarray]:
    """A model's inputs for one batch of tokenizer encodings, right-padded with zeros to the longest."""
    width = max(len(e.ids) for e in encodings)
    arrays = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in INPUTS}
    for row, e in enumerate(encodings):
        n = len(e.ids)
        arrays["input_ids"][row, :n] = e.ids
        arrays["attention_mask"][row, :n] = e.attention_mask
        arrays["token_type_ids"][row, :n] = e.type_ids
    return {name: array for name, array in arrays.items() if name in names}


def _no_preprocessing_advice(record: logging.LogRecord) -> bool:
    # the quantiser advises shape inference on the root logger; the export is already fit for it
    return not record.getMessage().startswith("Please consider to run pre-processing")


def quantized(export: Path) -> Path:
    """The INT8 copy of ``export`` (dynamic quantisation of its weights), made once beside it."""
    target = export.with_name("model.int8.onnx")
    if not target.exists():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        part = target.with_name(f"{target.name}.{os.getpid()}.part")
        root = logging.getLogger()
        root.addFilter(_no_preprocessing_advice)
        try:
            quantize_dynamic(str(export), str(part), weight_type=QuantType.QInt8)
        finally:
            root.removeFilter(_no_preprocessing_advice)
        part.replace(target)  # atomic, as the export
    return target


class OnnxEncoder:
    """Encodes like ``SentenceTransformer.encode`` (length-sorted batches, normalised) with ONNX Runtime."""

    def __init__(self, model: str, cache_dir: Path, int8: bool = False) -> None:
        """Load the cached graph of ``model`` from ``cache_dir``, building it first when absent.

        :param model: a sentence-transformers model directory (safetensors weights, config, tokenizer.json).
        :param cache_dir: where graphs are kept, one folder per model and weights.
        :param int8: run a copy with INT8 weights (dynamic quantisation, made once from the graph).
        """
        try:
            import onnxruntime  # noqa: F401  (inference_session runs it)
            from tokenizers import Tokenizer  # not transformers: that imports torch (2 s, 300 MB)
        except ImportError as exc:
            raise ConfigError(f"HINDSIGHT_API_EMBEDDINGS_LOCAL_BACKEND=onnx needs onnxruntime: {INSTALL}") from exc
        self.max_length, mean = _mean_pooling_model(model)
        if not mean:
            raise ConfigError(f"the onnx backend builds mean-pooling models only; {model!r} pools otherwise: "
                              "set HINDSIGHT_API_EMBEDDINGS_LOCAL_BACKEND=torch")
        self.path = built(model, cache_dir, "mean")
        if int8:
            self.path = quantized(self.path)
        self.tokenizer = Tokenizer.from_file(str(self.path.parent / TOKENIZER))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()  # batches are padded one by one, to their own longest text
        self.session = inference_session(self.path)
        self.names = {i.name for i in self.session.get_inputs()}

    def get_embedding_dimension(self) -> int:
        """Dimensions of the vectors."""
        return int(self.encode(["x"])[0].shape[0])

    def encode(self, texts: Sequence[str], batch_size: int = 8, **_: Any) -> np.ndarray:
        """Normalised embeddings of ``texts``, in input order.

        :param texts: the texts.
        :param batch_size: texts per session run. Batches hold texts of similar token counts (sorted
            on the tokenizer's own counts, not on characters as sentence-transformers does), so that
            almost no padding is computed.
        """
        encodings = self.tokenizer.encode_batch(list(texts))  # truncated, not padded
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        size = batch_size_for(len(order), batch_size)
        chunks = [order[start:start + size] for start in range(0, len(order), size)]
        out = np.zeros((len(encodings), 0), dtype=np.float32)
        batches = [padded([encodings[i] for i in chunk], self.names) for chunk in chunks]
        for chunk, vectors in zip(chunks, run_batches(self.session, batches), strict=True):
            if out.shape[1] == 0:
                out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            out[chunk] = vectors
        return out
