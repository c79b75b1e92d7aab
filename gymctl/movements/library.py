"""The published library file: our own format, or a plain list like free-exercise-db's.

Our format is `{"format": "gymctl.movements/1", "movements": [entry, ...]}`; an entry holds
`name` (required) and any of slug, aliases, category, kind, movementPattern, equipment,
primaryMuscles, secondaryMuscles, mechanic, instructions, thumbnailUrl, videoUrl, cues,
commonFaults, scalingOptions.
A bare list of free-exercise-db records (name, force, equipment, primaryMuscles, category, ...)
is mapped onto those fields; where that source has no pattern or kind, they are derived here.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from gymctl.db import storable_text
from gymctl.errors import DomainError, invalid
from gymctl.jsondepth import MAX_DEPTH, depth
from gymctl.movements import codes

FORMAT = "gymctl.movements/1"
MAX_ENTRIES = 50_000
TEXT_LIMITS = {
    "slug": 160,
    "name": 200,
    "category": 64,
    "kind": 32,
    "movementPattern": 64,
    "equipment": 64,
    "mechanic": 32,
}


@dataclass
class LibraryEntry:
    slug: str
    name: str
    aliases: list[str] = field(default_factory=list)
    category: str | None = None
    kind: str | None = None
    movement_pattern: str | None = None
    equipment: str | None = None
    primary_muscles: list[str] = field(default_factory=list)
    secondary_muscles: list[str] = field(default_factory=list)
    mechanic: str | None = None
    instructions: list[str] = field(default_factory=list)
    # Enriched fields: kept on re-seed unless rebuild.
    thumbnail_url: str | None = None
    video_url: str | None = None
    cues: list[str] = field(default_factory=list)
    common_faults: list[str] = field(default_factory=list)
    scaling_options: list[str] = field(default_factory=list)


# What slugify writes, and the links a member's app may open (as the movement routes take them).
SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
URL = re.compile(r"https?://\S+")


def slugify(name: str) -> str:
    """The name's slug, cut to what `movements.slug` holds: a name may be 200 characters and
    folding to ASCII may widen it ("\u3371" reads "hPa")."""
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    slug = re.sub(r"[^a-z0-9]+", "-", text.replace("'", "")).strip("-")
    return slug[: TEXT_LIMITS["slug"]].rstrip("-")


# A movement's pattern is what its primary muscle does; force splits the shoulder (press vs
# rear-delt pull). free-exercise-db gives no pattern, and its force is missing on some true
# duplicates ("Smith Machine Decline Press"), so the muscle decides and force only refines.
_PATTERN_BY_MUSCLE = {
    "quadriceps": "squat",
    "glutes": "hinge",
    "hamstrings": "hinge",
    "lower back": "hinge",
    "adductors": "hip",
    "abductors": "hip",
    "chest": "horizontal_push",
    "shoulders": "vertical_push",
    "triceps": "elbow_extension",
    "biceps": "elbow_flexion",
    "forearms": "grip",
    "lats": "vertical_pull",
    "middle back": "horizontal_pull",
    "traps": "shrug",
    "abdominals": "core",
    "calves": "ankle",
    "neck": "neck",
}
_KIND_BY_CATEGORY = {
    "strength": "strength",
    "powerlifting": "strength",
    "olympic weightlifting": "strength",
    "strongman": "strength",
    "plyometrics": "plyometric",
    "stretching": "mobility",
    "cardio": "cardio",
}


def derived_pattern(category: str | None, force: str | None, muscle: str | None) -> str | None:
    if category == "stretching":
        return "mobility"
    if category == "cardio":
        return "cardio"
    if muscle == "shoulders" and force == "pull":
        return "horizontal_pull"
    return _PATTERN_BY_MUSCLE.get(muscle or "")


def parse_library(data: bytes) -> list[LibraryEntry]:
    """The entries of a library file; a malformed file is 400 library_file_invalid. The text is
    decoded as json.loads would (UTF-8, 16 or 32, told by its first bytes) before its depth is
    measured: measured on UTF-16's bytes, a character holding the byte of a quote hid 100,000
    levels of brackets, and the parser's RecursionError crashed the seed."""
    try:
        text = data.decode(json.detect_encoding(data))
    except UnicodeDecodeError:
        raise _invalid("the library file is not JSON") from None
    if depth(text.encode()) > MAX_DEPTH:  # json.loads would recurse out of the stack
        raise _invalid(f"the library file nests deeper than {MAX_DEPTH} levels")
    try:
        document = json.loads(text)
    except ValueError:
        raise _invalid("the library file is not JSON") from None
    if isinstance(document, dict) and document.get("format") == FORMAT:
        raw, mapper = document.get("movements"), _ours
    elif isinstance(document, list):
        raw, mapper = document, _free_exercise_db
    else:
        raise _invalid(f'expected {{"format": "{FORMAT}", "movements": [...]}} or a list')
    if not isinstance(raw, list) or not raw:
        raise _invalid("the library file holds no movements")
    if len(raw) > MAX_ENTRIES:
        raise _invalid(f"more than {MAX_ENTRIES} movements")
    entries, slugs = [], set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _invalid("every movement must be an object", index=index)
        entry = mapper(item, index)
        if not entry.slug:
            raise _invalid("the movement has no usable slug", index=index)
        if entry.slug in slugs:
            raise _invalid(f"slug {entry.slug} appears twice", index=index)
        slugs.add(entry.slug)
        entries.append(entry)
    return entries


def _invalid(message: str, **details: Any) -> DomainError:
    return invalid(codes.LIBRARY_FILE_INVALID, message, **details)


def _text(item: dict, key: str, index: int, *, required: bool = False) -> str | None:
    value = item.get(key)
    if value is None and not required:
        return None
    # storable_text: neither NUL nor a lone surrogate (a `\ud800` escape is JSON, not text)
    if not isinstance(value, str) or not value.strip() or not storable_text(value):
        raise _invalid(f"{key} must be a non-empty string", index=index)
    limit = TEXT_LIMITS.get(key, 1024)
    if len(value.strip()) > limit:
        raise _invalid(f"{key} is longer than {limit} characters", index=index)
    return value.strip()


def _texts(item: dict, key: str, index: int) -> list[str]:
    value = item.get(key) or []
    if not isinstance(value, list) or not all(
        isinstance(v, str) and storable_text(v) and len(v) <= 2000 for v in value
    ):
        raise _invalid(f"{key} must be a list of strings", index=index)
    return [v.strip() for v in value if v.strip()]


def _ours(item: dict, index: int) -> LibraryEntry:
    name = _text(item, "name", index, required=True)
    assert name is not None
    slug = _text(item, "slug", index)
    if slug is not None and not SLUG.fullmatch(slug):
        raise _invalid("slug is lowercase letters and digits joined by hyphens", index=index)
    for link in ("thumbnailUrl", "videoUrl"):
        if item.get(link) is not None and not URL.fullmatch(_text(item, link, index) or ""):
            raise _invalid(f"{link} must be an http(s) URL", index=index)
    return LibraryEntry(
        slug=slug or slugify(name),
        name=name,
        aliases=_texts(item, "aliases", index),
        category=_text(item, "category", index),
        kind=_text(item, "kind", index),
        movement_pattern=_text(item, "movementPattern", index),
        equipment=_text(item, "equipment", index),
        primary_muscles=_texts(item, "primaryMuscles", index),
        secondary_muscles=_texts(item, "secondaryMuscles", index),
        mechanic=_text(item, "mechanic", index),
        instructions=_texts(item, "instructions", index),
        thumbnail_url=_text(item, "thumbnailUrl", index),
        video_url=_text(item, "videoUrl", index),
        cues=_texts(item, "cues", index),
        common_faults=_texts(item, "commonFaults", index),
        scaling_options=_texts(item, "scalingOptions", index),
    )


def _free_exercise_db(item: dict, index: int) -> LibraryEntry:
    """free-exercise-db's record; its image paths are not used (their licence is unknown)."""
    name = _text(item, "name", index, required=True)
    assert name is not None
    category = _text(item, "category", index)
    muscles = _texts(item, "primaryMuscles", index)
    return LibraryEntry(
        slug=slugify(name),
        name=name,
        category=category,
        kind=_KIND_BY_CATEGORY.get(category or ""),
        movement_pattern=derived_pattern(
            category, _text(item, "force", index), muscles[0] if muscles else None
        ),
        equipment=_text(item, "equipment", index),
        primary_muscles=muscles,
        secondary_muscles=_texts(item, "secondaryMuscles", index),
        mechanic=_text(item, "mechanic", index),
        instructions=_texts(item, "instructions", index),
    )
