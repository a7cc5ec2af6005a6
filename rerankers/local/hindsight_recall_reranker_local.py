"""Local reranker: an in-process cross-encoder, batches run in a shared thread pool.

A BERT cross-encoder whose safetensors weights are at hand (a directory, or a hub name already
downloaded or downloadable) runs on ONNX Runtime: its graph is built once from the weights, as core
builds the embedding model's, with the pooler and classifier on top. Any other model, or an option
only torch has (fp16, MPS, remote code), runs on sentence-transformers and torch, which the
``torch`` extra installs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import numpy as np
from hindsight_recall.errors import ConfigError, RerankerError
from hindsight_recall.hookspecs import Register, hookimpl
from hindsight_recall.settings import plugin_settings
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from hindsight_recall.settings import Settings

log = logging.getLogger(__name__)

MODEL_VARIABLE = "HINDSIGHT_API_RERANKER_LOCAL_MODEL"
#: the extra that brings sentence-transformers and torch
TORCH_INSTALL = "pip install 'hindsight-recall-reranker-local[torch]'"
#: the files the ONNX graph is built from
ONNX_FILES = ("config.json", "model.safetensors", "tokenizer.json")
INSTALL = (
    "pip install hindsight-recall-reranker-local  (before it is published: pip install -e rerankers/local "
    "from a clone of the hindsight-recall repository, or "
    'pip install "git+<repository URL>#subdirectory=rerankers/local")'
)
#: How the message of a model that cannot be had ends: the two ways to fix it.
FIX = f"set {MODEL_VARIABLE} to a model directory, or HINDSIGHT_API_RERANKER_PROVIDER=rrf to recall without reranking"
#: Seconds to wait for the hub's TCP port before calling it unreachable.
HUB_PROBE_TIMEOUT = 3.0

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(workers: int) -> ThreadPoolExecutor:
    """The process-wide thread pool with ``workers`` threads that every local reranker shares.

    :param workers: the pool size (``RERANKER_LOCAL_MAX_CONCURRENT``).
    """
    with _POOLS_LOCK:
        if workers not in _POOLS:
            _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix=f"hindsight-rerank-{workers}")
        return _POOLS[workers]


class LocalSettings(BaseSettings):
    """Settings of the local reranker (``HINDSIGHT_API_RERANKER_LOCAL_*``)."""

    model_config = SettingsConfigDict(env_prefix="HINDSIGHT_API_RERANKER_LOCAL_", extra="ignore")

    #: A hub name or a local directory.
    model: str = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    #: ``onnx`` (ONNX Runtime, built from safetensors weights), ``torch`` (sentence-transformers, the
    #: ``torch`` extra), or ``auto``: ``onnx`` when the model's weights allow it and no torch-only option is set
    backend: Literal["auto", "onnx", "torch"] = "auto"
    batch_size: int = Field(default=32, ge=1)
    #: Threads of the shared pool that run batches.
    max_concurrent: int = Field(default=4, ge=1)
    force_cpu: bool = False
    allow_mps: bool = False
    fp16: bool = False
    trust_remote_code: bool = False
    #: Group documents of similar length into the same batch, so that less padding is computed.
    bucket_batching: bool = False


class LocalReranker:
    """A cross-encoder run in-process (ONNX Runtime or torch); raw logits, higher is better."""

    name = "local"
    passthrough = False

    def __init__(self, settings: Settings | None = None, config: LocalSettings | None = None) -> None:
        """Remember the settings; the model loads in :meth:`start` or on first use.

        :param settings: core settings (``MODEL_INIT_TIMEOUT``).
        :param config: this plugin's settings; when omitted, ``settings.plugins["reranker"]["local"]`` and then the
            ``HINDSIGHT_API_RERANKER_LOCAL_*`` variables (:func:`~hindsight_recall.settings.plugin_settings`).
        """
        self.config = config if config is not None else (
            plugin_settings(LocalSettings, self.name, settings, kind="reranker")
        )
        self.init_timeout = settings.model_init_timeout if settings else 300.0
        self.onnx_cache = settings.embeddings_onnx_cache_dir if settings else None
        #: where the model runs once loaded: ``onnx`` or ``torch``
        self.backend: str | None = None
        self.device: str | None = None
        self._model: Any = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Load the model in a worker thread, bounded by ``MODEL_INIT_TIMEOUT``."""
        await self._ensure_model()

    async def score(self, query: str, documents: Sequence[str], *, bank_id: str | None = None) -> list[float]:
        """Score every (query, document) pair in batches on the shared pool; raw logits in input order.

        :param query: the recall query.
        :param documents: the pair texts.
        :param bank_id: unused; the model does not depend on the bank.
        """
        if not documents:
            return []
        model = await self._ensure_model()
        order = list(range(len(documents)))
        if self.config.bucket_batching:
            order.sort(key=lambda i: len(documents[i]))
        size = self.config.batch_size
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        loop = asyncio.get_running_loop()
        pool = shared_pool(self.config.max_concurrent)
        parts = await asyncio.gather(
            *(
                loop.run_in_executor(pool, _predict, model, [(query, documents[i]) for i in b])
                for b in batches
            )
        )
        scores = [0.0] * len(documents)
        for batch, part in zip(batches, parts, strict=True):
            for i, value in zip(batch, part, strict=True):
                scores[i] = value
        return scores

    async def close(self) -> None:
        """Drop the model so that its memory can be freed."""
        self._model = None

    async def _ensure_model(self) -> Any:
        async with self._lock:
            if self._model is None:
                try:
                    self._model = await asyncio.wait_for(asyncio.to_thread(self._load), self.init_timeout)
                except TimeoutError:
                    raise RerankerError(
                        f"loading the cross-encoder {self.config.model!r} took longer than "
                        f"HINDSIGHT_API_MODEL_INIT_TIMEOUT={self.init_timeout:g} s"
                    ) from None
        return self._model

    def _load(self) -> Any:
        # Before the heavy imports: a model that cannot be had fails in well under a second.
        local_only = _check_reachable(self.config.model)
        if self.config.backend != "torch" and not self._torch_only_options():
            onnx = self._load_onnx(local_only)
            if onnx is not None:
                return onnx
        return self._load_torch(local_only)

    def _torch_only_options(self) -> list[str]:
        return [name for name in ("fp16", "allow_mps", "trust_remote_code") if getattr(self.config, name)]

    def _load_onnx(self, local_only: bool) -> Any:
        """The model on ONNX Runtime; ``None`` under ``auto`` when it cannot run there (torch then runs it)."""
        chosen = self.config.backend == "onnx"
        directory = _weights_at_hand(self.config.model, local_only)
        try:
            if directory is None:
                raise ConfigError(f"no {', '.join(ONNX_FILES)} for {self.config.model!r}")
            from hindsight_recall._onnx import default_cache_dir

            model = OnnxCrossEncoder(directory, self.onnx_cache or default_cache_dir())
        except ConfigError as exc:
            if chosen:
                raise RerankerError(f"HINDSIGHT_API_RERANKER_LOCAL_BACKEND=onnx cannot run the cross-encoder "
                                    f"{self.config.model!r}: {exc}; {FIX}") from exc
            log.info("the cross-encoder %r runs on torch: %s", self.config.model, exc)
            return None
        self.backend, self.device = "onnx", "cpu"
        return model

    def _load_torch(self, local_only: bool) -> Any:
        # torch and sentence-transformers take seconds to import, so only a reranker in use pays for them.
        try:
            import torch
            from sentence_transformers import CrossEncoder
        except ImportError as exc:
            why = (f"{', '.join(self._torch_only_options())} needs" if self._torch_only_options()
                   else "HINDSIGHT_API_RERANKER_LOCAL_BACKEND=torch needs" if self.config.backend == "torch"
                   else f"the cross-encoder {self.config.model!r} has no safetensors BERT weights for ONNX Runtime, "
                        "so it needs")
            raise RerankerError(f"{why} sentence-transformers and torch: {TORCH_INSTALL}") from exc
        self.backend, self.device = "torch", _pick_device(torch, self.config)
        try:
            return CrossEncoder(
                self.config.model,
                device=self.device,
                local_files_only=local_only,
                trust_remote_code=self.config.trust_remote_code,
                model_kwargs={"dtype": torch.float16} if self.config.fp16 else None,
                # Raw logits: core normalises them, so the model's own sigmoid is skipped.
                activation_fn=torch.nn.Identity(),
            )
        except Exception as exc:
            raise RerankerError(f"cannot load the cross-encoder {self.config.model!r} ({exc}); {FIX}") from exc


class OnnxCrossEncoder:
    """A BERT cross-encoder on ONNX Runtime, predicting raw logits as ``CrossEncoder.predict`` would."""

    def __init__(self, directory: Path, cache_dir: Path) -> None:
        """Build (once, cached in ``cache_dir``) and load the graph of the model in ``directory``.

        :raises ConfigError: not a BERT sequence classifier with safetensors weights, or ONNX Runtime missing.
        """
        try:
            from hindsight_recall._onnx import built, inference_session
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigError(f"ONNX Runtime or tokenizers is missing: {exc}") from exc
        config = json.loads((directory / "config.json").read_text())
        if not any(a.endswith("ForSequenceClassification") for a in config.get("architectures") or ()):
            raise ConfigError(f"{directory} is not a sequence classifier (architectures="
                              f"{config.get('architectures')})")
        self.path = built(str(directory), cache_dir, "classify")
        self.tokenizer = Tokenizer.from_file(str(self.path.parent / "tokenizer.json"))
        self.tokenizer.enable_truncation(_max_length(directory, config))  # longest first, as transformers
        self.tokenizer.no_padding()
        self.session = inference_session(self.path)
        self.names = {i.name for i in self.session.get_inputs()}

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32, **_: Any) -> np.ndarray:
        """Raw logits of ``pairs``, in order: [pairs] for one label, else [pairs, labels]."""
        from hindsight_recall._onnx import batch_size_for, padded, run_batches

        encodings = self.tokenizer.encode_batch(list(pairs))
        size = batch_size_for(len(encodings), batch_size)
        parts = run_batches(self.session, [padded(encodings[i:i + size], self.names)
                                           for i in range(0, len(encodings), size)])
        logits = np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)
        return logits[:, 0] if logits.shape[1] == 1 else logits


def _max_length(directory: Path, config: dict[str, Any]) -> int:
    """Tokens per pair: the tokenizer's ``model_max_length`` (as CrossEncoder truncates), within the positions."""
    positions = int(config.get("max_position_embeddings", 512))
    tokenizer_config = directory / "tokenizer_config.json"
    if tokenizer_config.exists():
        declared = json.loads(tokenizer_config.read_text()).get("model_max_length")
        if isinstance(declared, int) and 0 < declared < positions:
            return declared
    return positions


def _weights_at_hand(model: str, local_only: bool) -> Path | None:
    """A directory holding :data:`ONNX_FILES` for ``model``: the directory itself, or the hub's copy
    (downloaded unless ``local_only``); ``None`` when there is none."""
    path = Path(model).expanduser()
    if not path.is_dir():
        try:
            from huggingface_hub import snapshot_download  # late: only hub names need it
        except ImportError:
            return None
        try:
            path = Path(snapshot_download(model, allow_patterns=[*ONNX_FILES, "tokenizer_config.json"],
                                          local_files_only=local_only))
        except Exception:  # not cached offline, not on the hub, no network: torch's loader says why
            return None
    return path if all((path / name).is_file() for name in ONNX_FILES) else None


def _check_reachable(model: str) -> bool:
    """Fail fast when ``model`` is neither a directory, nor cached, nor downloadable; else say if offline.

    Loading a hub name without network makes transformers retry for about 50 s and print a warning
    per attempt, so the hub is probed once first. Returns true when the model must load from the
    local cache only.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        return False
    if path.is_absolute() or model.startswith((".", "~")) or model.count("/") > 1:
        raise RerankerError(f"there is no cross-encoder directory at {model!r}: {FIX}")
    try:
        from huggingface_hub import constants, try_to_load_from_cache  # late: only hub names need it
    except ImportError:
        return False  # the import of sentence-transformers then names the missing install

    cached = isinstance(try_to_load_from_cache(model, "config.json"), str)
    if constants.HF_HUB_OFFLINE:
        why = "the Hugging Face hub is switched off (HF_HUB_OFFLINE)"
    elif not _reachable(constants.ENDPOINT):
        why = f"the Hugging Face hub ({constants.ENDPOINT}) cannot be reached"
    else:
        return False
    if cached:
        return True
    raise RerankerError(f"the cross-encoder {model!r} is not on this machine and {why}: {FIX}")


def _reachable(endpoint: str, timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((parts.hostname or "", port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    # Name resolution ignores the socket timeout, so the probe runs in a thread with a bounded wait.
    thread = threading.Thread(target=probe, name="hindsight-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def _pick_device(torch: Any, config: LocalSettings) -> str:
    if config.force_cpu:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if config.allow_mps and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _predict(model: Any, pairs: list[tuple[str, str]]) -> list[float]:
    try:
        scores = model.predict(pairs, batch_size=len(pairs), show_progress_bar=False, convert_to_numpy=True)
    except Exception as exc:
        raise RerankerError(f"the cross-encoder failed on a batch of {len(pairs)} pairs: {exc}") from exc
    values = [float(s) for s in scores.reshape(-1)]
    if len(values) != len(pairs):
        raise RerankerError(f"the cross-encoder returned {len(values)} scores for {len(pairs)} pairs")
    return values


@hookimpl
def register_rerankers(register: Register) -> None:
    """Register the local cross-encoder reranker.

    :param register: core's registration callback.
    """
    register(LocalReranker)
