"""Embeddings behind one interface: an OpenAI-compatible HTTP endpoint when configured, and for
the embedded default WordLlama's 256-dimension model, whose weights ship inside its wheel (loaded
from the package's files, never fetched). Vectors are stored unit-length as float32 bytes with
the model's name: only vectors of one model are ever compared.

A movement's stored vector is three model embeddings side by side: its canonical name (with
aliases), its instructions, and its attributes (category, equipment, muscles, mechanics), each
unit-length and scaled by the square root of its weight. The cosine of two such vectors is the
weighted mean of the three cosines, so the weights calibrate what 0.92 means (docs/decisions.md:
measured on labelled pairs of free-exercise-db) and each part can be read back per pair."""

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
from gymctl.movements.aliases import canonical_name
from gymctl.movements.units import Checkpoint, keep
from gymctl.providers import http_client

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
        return _unit(np.nan_to_num(_wordllama().embed(list(texts), norm=False)))


class HttpEmbedder:
    """POST {base}/embeddings {"model", "input": [...]} -> {"data": [{"index", "embedding"}]}."""

    batch_size = 64
    remote = True

    def __init__(self, base_url: str, model: str, key: str | None, *, timeout: float = 30) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.model = model
        self._client = http_client.new_client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout
        )

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


# The parts of a movement's vector and their weights (they sum to 1).
PARTS = ("name", "instructions", "attributes")
WEIGHTS = {"name": 0.20, "instructions": 0.15, "attributes": 0.65}
RECIPE = "movement-2"  # stored with the model's name: a new recipe re-embeds on the next seed


def stored_model(model: str) -> str:
    """The embedding_model value of rows embedded by `model` with this recipe."""
    return f"{model}/{RECIPE}"


def embedding_parts(movement: Movement) -> tuple[str, str, str]:
    """Name (canonical, aliases added), instructions (the name when there are none) and
    attributes, as the model reads them."""
    equipment = movement.equipment
    names = [canonical_name(n, equipment) for n in (movement.name, *(movement.aliases or []))]
    name = "; ".join(dict.fromkeys(n for n in names if n)) or movement.name
    instructions = " ".join(movement.instructions or []) or name
    attributes = "; ".join(
        (
            movement.category or "uncategorized",
            f"equipment: {equipment or 'none'}",
            f"primary muscles: {', '.join(movement.primary_muscles or []) or 'none'}",
            f"secondary muscles: {', '.join(movement.secondary_muscles or []) or 'none'}",
            f"mechanics: {movement.mechanic or 'none'}",
        )
    )
    return name, instructions, attributes


def embedding_text(movement: Movement) -> str:
    """Everything the vector reads, for telling whether a row must be embedded again."""
    return "\n".join(embedding_parts(movement))


def combine(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Unit rows of each part -> one unit row per movement (weighted side by side)."""
    return np.hstack(
        [np.sqrt(WEIGHTS[name]) * _unit(part) for name, part in zip(PARTS, parts, strict=True)]
    ).astype(np.float32)


def part_similarities(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """The cosine of each part of two stored vectors (the total is their weighted mean)."""
    width = len(a) // len(PARTS)
    return {
        name: round(
            float(a[k * width : (k + 1) * width] @ b[k * width : (k + 1) * width]) / WEIGHTS[name],
            4,
        )
        for k, name in enumerate(PARTS)
    }


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
    checkpoint: Checkpoint = keep,
    current: Callable[[Sequence[Movement]], Sequence[Movement | None]] | None = None,
) -> None:
    """Embed in batches (one request holds a batch's three parts); the request rate applies to
    a remote embedder only. `checkpoint` runs before each request (units.Checkpoint: the work
    commits there); `current` reads the batch's rows again after it, and a row whose text
    changed meanwhile keeps what it has (its writer embedded it, or a later seed will)."""
    pacer = pacer or Pacer(None)
    step = max(1, embedder.batch_size // len(PARTS))
    for start in range(0, len(movements), step):
        batch = movements[start : start + step]
        texts = [embedding_parts(m) for m in batch]
        checkpoint()
        if embedder.remote:
            pacer.wait()
        flat = embedder.embed([text for part in zip(*texts, strict=True) for text in part])
        vectors = combine(np.split(flat, len(PARTS)))
        rows = current(batch) if current is not None else batch
        for movement, parts, vector in zip(rows, texts, vectors, strict=True):
            if movement is None or embedding_parts(movement) != parts:
                continue
            movement.embedding = encode(vector)
            movement.embedding_model = stored_model(embedder.model)
        if progress is not None:
            progress(len(batch))
