"""The ONNX Runtime backend of the local embedder: a sentence-transformers mean-pooling model, exported once.

``sentence-transformers[onnx]`` needs ``optimum-onnx``, which pins ``transformers<4.58`` while
sentence-transformers 6 needs ``transformers>=5``, so pip cannot install both. This module exports the
model itself with ``torch.onnx`` (pooling and normalisation inside the graph) and runs it with
``onnxruntime``; the export is cached, keyed by the model's path and weights.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError

#: how to repair an install that lost a dependency (both are dependencies of hindsight-recall)
INSTALL = "pip install 'onnxruntime>=1.20' 'onnx>=1.17'"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17


def cache_key(model: str) -> str:
    """A folder name that changes when the model's path or weights change."""
    digest = hashlib.sha256(model.encode())
    path = Path(model)
    if path.is_dir():
        for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")) + [path / "config.json"]:
            if f.exists():
                stat = f.stat()
                digest.update(f"{f.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return f"{path.name or 'model'}-{digest.hexdigest()[:16]}"


def _mean_pooling_model(model: str) -> tuple[int, bool]:
    """The max sequence length and whether the model pools by mean (the only pooling exported here)."""
    path = Path(model)
    max_len = 512
    config = path / "sentence_bert_config.json"
    if config.exists():
        max_len = int(json.loads(config.read_text()).get("max_seq_length") or max_len)
    pooling = path / "1_Pooling" / "config.json"
    mean = not pooling.exists() or bool(json.loads(pooling.read_text()).get("pooling_mode_mean_tokens"))
    return max_len, mean


def export(model: str, target: Path) -> Path:
    """Export ``model`` (transformer, mean pooling, L2 normalisation) to ``target`` as ONNX; return ``target``."""
    # late: torch and transformers take seconds to import, and only the first run exports
    import torch
    from transformers import AutoModel, AutoTokenizer

    base = AutoModel.from_pretrained(model).eval()
    tokenizer = AutoTokenizer.from_pretrained(model)

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base = base

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.base(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=-1)

    sample = tokenizer(["an example", "a second, longer example"], padding=True, return_tensors="pt")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f"{target.name}.{os.getpid()}.part")
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUTS}
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer warns about branches on shapes that hold for every input (mask present, no cache)
        warnings.simplefilter("ignore")
        torch.onnx.export(Pooled().eval(), tuple(sample[k] for k in INPUTS), str(part), input_names=list(INPUTS),
                          output_names=["embedding"], dynamic_axes={**axes, "embedding": {0: "batch"}},
                          opset_version=OPSET, dynamo=False)
    tokenizer.save_pretrained(str(target.parent))
    part.replace(target)  # atomic: a concurrent process sees the whole file or none
    return target


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
        """Load the cached export of ``model`` from ``cache_dir``, exporting it first when absent.

        :param model: a sentence-transformers model directory or name.
        :param cache_dir: where exports are kept, one folder per model and weights.
        :param int8: run a copy with INT8 weights (dynamic quantisation, made once from the export).
        """
        try:
            import onnxruntime
            from tokenizers import Tokenizer  # not transformers: that imports torch (2 s, 300 MB)
        except ImportError as exc:
            raise ConfigError(f"HINDSIGHT_API_EMBEDDINGS_LOCAL_BACKEND=onnx needs onnxruntime: {INSTALL}") from exc
        self.max_length, mean = _mean_pooling_model(model)
        if not mean:
            raise ConfigError(f"the onnx backend exports mean-pooling models only; {model!r} pools otherwise: "
                              "set HINDSIGHT_API_EMBEDDINGS_LOCAL_BACKEND=torch")
        self.path = cache_dir / cache_key(model) / "model.onnx"
        if not self.path.exists():
            try:
                import onnx  # noqa: F401  (torch.onnx.export writes through it)
            except ImportError as exc:
                raise ConfigError(f"exporting the model to ONNX needs the onnx package: {INSTALL}") from exc
            export(model, self.path)
        if int8:
            self.path = quantized(self.path)
        self.tokenizer = Tokenizer.from_file(str(self.path.parent / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()  # batches are padded one by one, to their own longest text
        options = onnxruntime.SessionOptions()
        # no busy-waiting between ops: the threads would spin on cores PostgreSQL and the arms need
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # no memory pattern per input shape: every batch has its own (rows, tokens) shape, and the
        # patterns ONNX Runtime keeps for each shape it has seen grew a long-running server for hours
        options.enable_mem_pattern = False
        self.session = onnxruntime.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
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
        out = np.zeros((len(encodings), 0), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            vectors = self.session.run(None, self._feed([encodings[i] for i in chunk]))[0]
            if out.shape[1] == 0:
                out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            out[chunk] = vectors
        return out

    def _feed(self, encodings: list[Any]) -> dict[str, np.ndarray]:
        """The model's inputs for one batch, right-padded with zeros to its longest text."""
        width = max(len(e.ids) for e in encodings)
        arrays = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in INPUTS}
        for row, e in enumerate(encodings):
            n = len(e.ids)
            arrays["input_ids"][row, :n] = e.ids
            arrays["attention_mask"][row, :n] = e.attention_mask
            arrays["token_type_ids"][row, :n] = e.type_ids
        return {name: array for name, array in arrays.items() if name in self.names}
