"""The embeddings provider: the OpenAI-compatible endpoint on loopback, the request rate, a
failing provider, and the blocked similarity search against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from gymctl.errors import DomainError
from gymctl.models import Movement
from gymctl.movements.duplicates import similar_pairs
from gymctl.movements.embeddings import (
    HttpEmbedder,
    LocalEmbedder,
    Pacer,
    embedder_from_settings,
    threshold_for,
)
from gymctl.movements.merge import merge_pairs
from gymctl.movements.seed import seed_library
from tests.access.conftest import snapshot
from tests.conftest import NOW
from tests.movements.conftest import LIBRARY_KEY


def test_the_embedded_default_is_the_local_model_and_a_url_selects_the_endpoint(settings, fake):
    assert isinstance(embedder_from_settings(settings), LocalEmbedder)
    remote = embedder_from_settings(
        settings.model_copy(update={"embeddings_url": f"{fake.url}/v1"})
    )
    assert isinstance(remote, HttpEmbedder)
    assert remote.model == "text-embedding-3-small"


def test_the_local_model_is_deterministic_and_unit_length():
    a = LocalEmbedder().embed(["Back Squat", "Deadlift"])
    assert np.allclose(np.linalg.norm(a, axis=1), 1)
    assert np.array_equal(a, LocalEmbedder().embed(["Back Squat", "Deadlift"]))


def test_seeding_through_the_endpoint_batches_requests_at_the_given_rate(session, store, fake):
    """rpm 60: one request a second; a clock that stands still makes every later request wait."""
    waits: list[float] = []
    pacer = Pacer(60, sleep=waits.append, monotonic=lambda: 0.0)
    embedder = HttpEmbedder(f"{fake.url}/v1", "text-embedding-3-small", "key")
    result = seed_library(session, store, embedder, key=LIBRARY_KEY, rpm=60, now=NOW, pacer=pacer)
    # 873 rows x 3 parts (name, instructions, attributes), 21 rows (63 inputs) a request
    assert len(fake.calls("/v1/embeddings")) == 42
    assert waits == [1.0] * 41
    assert result["model"] == "text-embedding-3-small"


def test_pacer_waits_out_the_interval_of_the_rate():
    waits, now = [], [0.0]
    pacer = Pacer(120, sleep=waits.append, monotonic=lambda: now[0])
    pacer.wait()
    now[0] = 0.1
    pacer.wait()
    assert waits == [pytest.approx(0.4)]


def test_a_failing_endpoint_refuses_the_merge_503_and_changes_nothing(session, store, fake):
    embedder = HttpEmbedder(f"{fake.url}/v1", "m", None)
    seed_library(session, store, embedder, key=LIBRARY_KEY, now=NOW)
    session.commit()
    rows = session.query(Movement).order_by(Movement.slug).limit(2).all()
    before = snapshot(session)
    fake.fail_status["/v1/embeddings"] = 500
    with pytest.raises(DomainError) as refused:
        merge_pairs(session, embedder, [(rows[0].id, rows[1].id)], dry_run=False, now=NOW)
    session.rollback()
    assert (refused.value.code, refused.value.status) == ("embeddings_unavailable", 503)
    assert snapshot(session) == before


def test_the_duplicate_threshold_is_a_setting_per_model(settings):
    per_model = settings.model_copy(update={"duplicate_thresholds": {"m1": 0.8}})
    assert threshold_for(per_model, "m1") == 0.8
    assert threshold_for(per_model, "other") == 0.92


def test_blocked_search_finds_exactly_the_brute_force_pairs():
    rng = np.random.default_rng(7)
    base = rng.normal(size=(300, 16)).astype(np.float32)
    vectors = np.vstack(
        [base, base[:40] + rng.normal(scale=0.05, size=(40, 16)).astype(np.float32)]
    )
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    groups = rng.integers(0, 2, size=len(vectors))
    found = {(c.i, c.j) for c in similar_pairs(vectors, 0.9, groups, block=64)}
    scores = vectors @ vectors.T
    expected = {
        (i, j)
        for i in range(len(vectors))
        for j in range(i + 1, len(vectors))
        if scores[i, j] >= 0.9 and groups[i] == groups[j]
    }
    assert found == expected
    assert found
