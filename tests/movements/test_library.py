"""The published library file: our format, free-exercise-db's list, and refusals."""

from __future__ import annotations

import json

import pytest

from gymctl.errors import DomainError
from gymctl.movements.library import FORMAT, parse_library
from tests.movements.conftest import DATA


def test_free_exercise_db_maps_onto_our_fields_with_a_derived_pattern_and_kind():
    entries = {e.slug: e for e in parse_library(DATA.read_bytes())}
    assert len(entries) == 873
    smith = entries["smith-machine-decline-press"]
    # No force in the source for this one: the primary muscle decides the pattern.
    assert (smith.movement_pattern, smith.kind, smith.equipment) == (
        "horizontal_push",
        "strength",
        "machine",
    )
    assert entries["decline-smith-press"].movement_pattern == "horizontal_push"
    assert entries["back-flyes-with-bands"].movement_pattern == "horizontal_pull"
    assert smith.instructions
    assert smith.thumbnail_url is None
    # What the embedding reads besides: secondary muscles and mechanics (issue 22).
    assert (smith.secondary_muscles, smith.mechanic) == (["shoulders", "triceps"], "compound")


def test_our_format_carries_aliases_and_enriched_fields():
    data = {
        "format": FORMAT,
        "movements": [
            {
                "name": "Pull-Up",
                "aliases": ["Pullups"],
                "movementPattern": "vertical_pull",
                "videoUrl": "https://videos.example.test/pullup",
                "cues": ["Chest up"],
            }
        ],
    }
    (entry,) = parse_library(json.dumps(data).encode())
    assert (entry.slug, entry.aliases, entry.video_url) == (
        "pull-up",
        ["Pullups"],
        "https://videos.example.test/pullup",
    )


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"{}",
        b"[]",
        json.dumps([{"name": ""}]).encode(),
        json.dumps([{"name": "A"}, {"name": "a"}]).encode(),  # the same slug twice
        json.dumps({"format": FORMAT, "movements": [{"name": "A", "aliases": "x"}]}).encode(),
        json.dumps([{"name": "A\u0000"}]).encode(),
        json.dumps([{"name": "A", "equipment": "x" * 65}]).encode(),  # the column holds 64
        json.dumps([{"name": "A", "mechanic": "x" * 33}]).encode(),
        # Found by probing the seed command: each was a crash or was stored as given.
        b"[" * 100_000 + b"]" * 100_000,  # json.loads recursed out of the stack
        b'{"format": "%s", "movements": [{"name": "bad \\ud800 name"}]}' % FORMAT.encode(),
        json.dumps(
            {"format": FORMAT, "movements": [{"name": "A", "aliases": ["\ud800"]}]}
        ).encode(),
        json.dumps({"format": FORMAT, "movements": [{"name": "A", "slug": "../../etc"}]}).encode(),
        json.dumps({"format": FORMAT, "movements": [{"name": "A", "slug": "a\nb"}]}).encode(),
        json.dumps(
            {"format": FORMAT, "movements": [{"name": "A", "thumbnailUrl": "javascript:alert(1)"}]}
        ).encode(),
        json.dumps(
            {"format": FORMAT, "movements": [{"name": "A", "videoUrl": "file:///etc/passwd"}]}
        ).encode(),
    ],
)
def test_a_malformed_library_file_is_400_library_file_invalid(content):
    with pytest.raises(DomainError) as refused:
        parse_library(content)
    assert (refused.value.code, refused.value.status) == ("library_file_invalid", 400)
