"""Embeddings behind one interface: an OpenAI-compatible HTTP endpoint when configured, and for
the embedded default WordLlama's 256-dimension model, whose weights ship inside its wheel (loaded
from the package's files, never fetched). Vectors are stored unit-length as float32 bytes with
the model's name: only vectors of one model are ever compared."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Protocol

import httpx
import numpy as np

from gymctl.config import Settings
from gymctl.errors import DomainError
from gymctl.models import Movement

LOCAL_MODEL = "wordllama-l2-supercat-256"
DIMENSIONS_LOCAL = 256


class Embedder(Protocol):
    model: str
    batch_size: int
    remote: bool  # requests count against the rate (rpm) only when remote

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), d) float32 rows of unit length."""
        ...


class EmbeddingsUnavailable(DomainError):
    def __init__(self, message: str) -> None:
        super().__init__("embeddings_unavailable", message, status=503)


def _unit(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


@functools.cache
def _wordllama():
    from safetensors import safe_open
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference

    package = resources.files("wordllama")
    weights = package / "weights" / "l2_supercat_256.safetensors"
    with safe_open(str(weights), framework="np", device="cpu") as tensors:
        table = tensors.get_tensor("embedding.weight")
    tokenizer = package / "tokenizers" / "l2_supercat_tokenizer_config.json"
    return WordLlamaInference(table, Tokenizer.from_file(str(tokenizer)))


class LocalEmbedder:
    """Deterministic, CPU-only, about 10 µs a name; loaded once per process."""

    model = LOCAL_MODEL
    batch_size = 512
    remote = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMENSIONS_LOCAL), dtype=np.float32)
        return _unit(_wordllama().embed(list(texts), norm=True))


class HttpEmbedder:
    """POST {base}/embeddings {"model", "input": [...]} -> {"data": [{"index", "embedding"}]}."""

    batch_size = 64
    remote = True

    def __init__(self, base_url: str, model: str, key: str | None, *, timeout: float = 30) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.model = model
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        try:
            response = self._client.post("/embeddings", json={"model": self.model, "input": texts})
        except httpx.HTTPError as error:
            raise EmbeddingsUnavailable(f"embeddings endpoint: {type(error).__name__}") from None
        if response.status_code != 200:
            raise EmbeddingsUnavailable(f"embeddings endpoint answered {response.status_code}")
        try:
            rows = sorted(response.json()["data"], key=lambda row: row["index"])
            matrix = np.array([row["embedding"] for row in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError):
            raise EmbeddingsUnavailable("embeddings endpoint sent a malformed answer") from None
        if matrix.ndim != 2 or len(matrix) != len(texts) or not np.isfinite(matrix).all():
            raise EmbeddingsUnavailable("embeddings endpoint sent a malformed answer")
        return _unit(matrix)


def embedder_from_settings(settings: Settings) -> Embedder:
    if settings.embeddings_url:
        key = settings.embeddings_key.get_secret_value() if settings.embeddings_key else None
        return HttpEmbedder(settings.embeddings_url, settings.embeddings_model, key)
    return LocalEmbedder()


def threshold_for(settings: Settings, model: str) -> float:
    """DUPLICATE_EMBEDDING_THRESHOLD, unless GYMCTL_DUPLICATE_THRESHOLDS names the model."""
    return settings.duplicate_thresholds.get(model, settings.duplicate_embedding_threshold)


def embedding_text(movement: Movement) -> str:
    """The name carries the meaning; aliases (merged names) add to it. Equipment and muscles are
    left out: shared context words pull every pair together (measured in docs/decisions.md)."""
    if movement.aliases:
        return f"{movement.name} ({'; '.join(movement.aliases)})"
    return movement.name


def encode(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def decode_all(blobs: Sequence[bytes]) -> np.ndarray:
    """Stored vectors as one (n, d) matrix (one buffer, no per-row arrays)."""
    if not blobs:
        return np.zeros((0, 0), dtype=np.float32)
    flat = np.frombuffer(b"".join(blobs), dtype="<f4")
    return flat.reshape(len(blobs), -1)


class Pacer:
    """At most `rpm` requests a minute: waits before a request that would come too early."""

    def __init__(
        self,
        rpm: int | None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = 60.0 / rpm if rpm else 0.0
        self._sleep, self._monotonic = sleep, monotonic
        self._last: float | None = None

    def wait(self) -> None:
        if self.interval and self._last is not None:
            delay = self._last + self.interval - self._monotonic()
            if delay > 0:
                self._sleep(delay)
        self._last = self._monotonic()


def embed_movements(
    embedder: Embedder,
    movements: Sequence[Movement],
    *,
    pacer: Pacer | None = None,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Embed in batches; the request rate applies to a remote embedder only."""
    pacer = pacer or Pacer(None)
    for start in range(0, len(movements), embedder.batch_size):
        batch = movements[start : start + embedder.batch_size]
        if embedder.remote:
            pacer.wait()
        vectors = embedder.embed([embedding_text(m) for m in batch])
        for movement, vector in zip(batch, vectors, strict=True):
            movement.embedding = encode(vector)
            movement.embedding_model = embedder.model
        if progress is not None:
            progress(len(batch))
