"""Cues (3, 2, 2 validated items) and thumbnails (spec B 4.5) through the chat model and image
generator fakes on loopback."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import Movement
from gymctl.movements.clients import chat_model_from_settings, image_generator_from_settings
from gymctl.movements.cues import write_cues
from gymctl.movements.thumbnails import (
    disabled_reason,
    generate_thumbnail,
    rows_needing_thumbnails,
    thumbnail_key,
)
from tests.conftest import NOW


def movement(session, slug, **fields) -> Movement:
    row = Movement(slug=slug, name=slug.title(), **fields)
    session.add(row)
    session.flush()
    return row


def cues_run(session, settings, **kwargs):
    return write_cues(session, chat_model_from_settings(settings), now=NOW, **kwargs)


def test_cues_fill_only_rows_short_of_3_2_2_without_rebuild(session, library_settings, fake):
    complete = movement(
        session, "done", cues=["a", "b", "c"], common_faults=["d", "e"], scaling_options=["f", "g"]
    )
    short = movement(session, "short", cues=["only one"])
    result = cues_run(session, library_settings)
    assert result["filled"] == 1
    assert [r["slug"] for r in result["report"]] == ["short"]
    assert (len(short.cues), len(short.common_faults), len(short.scaling_options)) == (3, 2, 2)
    assert complete.cues == ["a", "b", "c"]
    assert cues_run(session, library_settings, rebuild=True)["filled"] == 2
    assert complete.cues[0].startswith("Brace")


def test_cues_dry_run_shows_the_text_and_writes_nothing(session, library_settings, fake):
    row = movement(session, "preview")
    result = cues_run(session, library_settings, dry_run=True)
    assert result["report"][0]["cues"]
    assert row.cues == []


@pytest.mark.parametrize(
    "answer",
    [
        {"cues": ["a", "b"], "commonFaults": ["c", "d"], "scalingOptions": ["e", "f"]},
        {"cues": ["a", "b", ""], "commonFaults": ["c", "d"], "scalingOptions": ["e", "f"]},
        {"cues": ["a", "b", "x" * 201], "commonFaults": ["c", "d"], "scalingOptions": ["e", "f"]},
        {"cues": ["a", "b", 3], "commonFaults": ["c", "d"], "scalingOptions": ["e", "f"]},
        {"cues": ["a", "b", "c"], "commonFaults": ["c", "d"]},
    ],
)
def test_an_invalid_model_answer_changes_nothing_for_that_row(
    session, library_settings, fake, answer
):
    fake.cues_answer = answer
    row = movement(session, "invalid")
    result = cues_run(session, library_settings)
    assert result["invalid"] == ["invalid"]
    assert row.cues == []


def test_cues_without_an_llm_key_are_disabled(session, settings):
    assert "disabled" in cues_run(session, settings)


def test_thumbnails_are_a_no_op_without_the_key_or_the_public_base(settings, library_settings):
    assert disabled_reason(settings, None).endswith("GYMCTL_IMAGE_GEN_KEY is unset")
    unset_base = library_settings.model_copy(update={"public_images_base_url": None})
    images = image_generator_from_settings(unset_base)
    assert disabled_reason(unset_base, images).endswith("GYMCTL_PUBLIC_IMAGES_BASE_URL is unset")


def test_a_thumbnail_job_stores_the_png_under_the_slug_and_sets_the_public_url(
    session, library_settings, store, fake
):
    row = movement(session, "goblet-squat")
    has = movement(session, "has-one", thumbnail_url="https://images.example.test/x.png")
    assert [m.slug for m in rows_needing_thumbnails(session, force=False)] == ["goblet-squat"]
    images = image_generator_from_settings(library_settings)
    result = generate_thumbnail(
        session, images, store, library_settings, movement_id=row.id, force=False, now=NOW
    )
    assert row.thumbnail_url == "https://images.example.test/movements/thumbnails/goblet-squat.png"
    assert result["thumbnailUrl"] == row.thumbnail_url
    stored = store.head(thumbnail_key("goblet-squat"))
    assert stored.content_type == "image/png"
    assert store.get(stored.key).startswith(b"\x89PNG")
    skipped = generate_thumbnail(
        session, images, store, library_settings, movement_id=has.id, force=False, now=NOW
    )
    assert skipped["skipped"] == "has a thumbnail"
    assert len(rows_needing_thumbnails(session, force=True)) == 2
    assert session.scalars(select(Movement)).all()
