"""A movement's slug comes from its name (spec B 2.7 slug, 4.5 /seed; a gym's own movements):
a name the API and the library file accept (up to 200 characters) must give a slug the
`movements.slug` column holds (160). A coach naming a movement at length got a 500 on
PostgreSQL; a library file with such a name failed its seed job with a database error."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gymctl.models import Movement, Role
from gymctl.movements.embeddings import LocalEmbedder
from gymctl.movements.seed import seed_library
from tests.conftest import NOW

SLUG_COLUMN = Movement.__table__.c.slug.type.length
LONG_NAME = "Single Arm " + "Very Long Landmine Rotational Press " * 5  # 191 characters


@pytest.mark.embedded
def test_a_coach_names_a_movement_at_the_longest_accepted_length(client, session, gym, engine):
    assert len(LONG_NAME.strip()) <= 200
    created = client.post(
        f"/organizations/{gym.id}/exercises",
        json={"name": LONG_NAME},
        headers=gym[Role.coach].headers,
    )
    assert created.status_code == 201, created.get_data(as_text=True)
    assert len(created.json["slug"]) <= SLUG_COLUMN
    assert created.json["name"] == LONG_NAME.strip()
    # A slug that widens when folded to ASCII ("\u3371" reads "hPa") stays in the column too.
    widened = client.post(
        f"/organizations/{gym.id}/exercises",
        json={"name": "Pressure", "slug": "\u3371" * 160},
        headers=gym[Role.coach].headers,
    )
    assert widened.status_code == 201, widened.get_data(as_text=True)
    assert len(widened.json["slug"]) <= SLUG_COLUMN


@pytest.mark.embedded
def test_a_library_file_with_a_long_name_seeds(session, store, engine):
    document = {"format": "gymctl.movements/1", "movements": [{"name": LONG_NAME}]}
    store.put("library/long.json", json.dumps(document).encode(), content_type="application/json")
    result = seed_library(session, store, LocalEmbedder(), key="library/long.json", now=NOW)
    session.commit()
    assert result["created"] == 1
    [slug] = session.scalars(select(Movement.slug).where(Movement.name == LONG_NAME.strip()))
    assert len(slug) <= SLUG_COLUMN
    # Seeding again finds the same row by its slug.
    again = seed_library(session, store, LocalEmbedder(), key="library/long.json", now=NOW)
    assert (again["created"], again["unchanged"]) == (0, 1)


@pytest.mark.embedded
def test_a_coach_names_a_movement_in_a_script_with_no_ascii_form(client, session, gym, engine):
    """Hebrew (one of the apps' locales), Arabic or Cyrillic fold to no ASCII: the coach's
    movement was refused 400 movement_slug_invalid, "no letters or digits", even with a slug
    in the same script. Its slug now comes from its id; a name with no letter at all is still
    refused."""
    headers = gym[Role.coach].headers
    path = f"/organizations/{gym.id}/exercises"
    bodies = [{"name": "סקוואט אחורי"}, {"name": "Жим лёжа"}, {"name": "X", "slug": "סקוואט"}]
    made = [client.post(path, json=body, headers=headers) for body in bodies]
    assert [m.status_code for m in made] == [201, 201, 201], made[0].get_data(as_text=True)
    assert made[0].json["name"] == "סקוואט אחורי"
    slugs = [m.json["slug"] for m in made]
    assert slugs == [f"movement-{m.json['id'].replace('-', '')[:8]}" for m in made]
    refused = client.post(path, json={"name": "!!!"}, headers=headers)
    assert (refused.status_code, refused.json["code"]) == (400, "movement_slug_invalid")
