"""The library's fixtures: the loopback fakes, settings pointing at them, a folder store holding
the published free-exercise-db file, an app wired to both, and a seeded library."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from gymctl.config import Settings
from gymctl.movements.embeddings import LocalEmbedder
from gymctl.movements.seed import seed_library
from gymctl.providers.storage import FolderObjectStore
from gymctl.quickstart import LIBRARY_KEY, SHIPPED_LIBRARY
from tests.access.conftest import gym, outsider, platform_admin  # noqa: F401 (fixtures)
from tests.conftest import NOW
from tests.movements.fakes import FakeServices

DATA = SHIPPED_LIBRARY  # free-exercise-db, Unlicense, text only


@pytest.fixture(scope="session")
def fakes():
    services = FakeServices()
    yield services
    services.close()


@pytest.fixture
def fake(fakes):
    """The shared fakes, reset for each test."""
    fakes.requests.clear()
    fakes.fail_status.clear()
    fakes.videos.clear()
    fakes.scores.clear()
    fakes.failing_movements.clear()
    fakes.quota_exceeded = False
    fakes.cues_answer = None
    return fakes


@pytest.fixture
def store(tmp_path) -> FolderObjectStore:
    folder = FolderObjectStore(tmp_path / "objects", url_base="http://x/storage", secret=b"s")
    folder.put(LIBRARY_KEY, DATA.read_bytes(), content_type="application/json")
    return folder


def keyed(settings: Settings, fake, **extra) -> Settings:
    """The test settings with every outside service pointed at the fakes (field names)."""
    return settings.model_copy(
        update={
            "video_search_url": f"{fake.url}/yt",
            "video_search_key": SecretStr("yt-key"),
            "llm_url": f"{fake.url}/v1",
            "llm_key": SecretStr("llm-key"),
            "image_gen_url": f"{fake.url}/v1",
            "image_gen_key": SecretStr("img-key"),
            "public_images_base_url": "https://images.example.test",
            **extra,
        }
    )


@pytest.fixture
def library_settings(settings, fake) -> Settings:
    return keyed(settings, fake)


@pytest.fixture
def app(library_settings, session_factory, clock, store):
    from webhooks.app import create_app

    return create_app(library_settings, session_factory=session_factory, clock=clock, store=store)


@pytest.fixture
def seeded(session, store):
    """The public library seeded with the local model, committed into the test's savepoint."""
    result = seed_library(session, store, LocalEmbedder(), key=LIBRARY_KEY, now=NOW)
    session.commit()
    return result
