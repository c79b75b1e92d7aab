"""The outside services of the library, built once from the settings for each door."""

from __future__ import annotations

from dataclasses import dataclass

from gymctl.config import Settings
from gymctl.movements.clients import (
    ChatModel,
    ImageGenerator,
    VideoSearch,
    chat_model_from_settings,
    image_generator_from_settings,
    video_search_from_settings,
)
from gymctl.movements.embeddings import Embedder, embedder_from_settings
from gymctl.providers.storage import ObjectStore, storage_from_settings, storage_from_url


@dataclass
class Library:
    settings: Settings
    store: ObjectStore  # where library files are published (r2Key)
    public_store: ObjectStore  # the public images bucket
    embedder: Embedder
    search: VideoSearch | None
    llm: ChatModel | None
    images: ImageGenerator | None


def library_from_settings(settings: Settings, *, store: ObjectStore | None = None) -> Library:
    store = store or storage_from_settings(settings)
    public_store = store
    if settings.public_images_storage_url:
        public_store = storage_from_url(
            settings.public_images_storage_url,
            url_base=(settings.public_images_base_url or settings.public_url).rstrip("/"),
            secret=settings.home_secret(
                "GYMCTL_STORAGE_SIGNING_SECRET", settings.storage_signing_secret
            ),
        )
    return Library(
        settings=settings,
        store=store,
        public_store=public_store,
        embedder=embedder_from_settings(settings),
        search=video_search_from_settings(settings),
        llm=chat_model_from_settings(settings),
        images=image_generator_from_settings(settings),
    )
