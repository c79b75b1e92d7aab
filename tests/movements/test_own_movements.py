"""A gym's own movements (issue 22): owner, admin and coach create, edit and delete them; the
thumbnail only through the upload route (spec B 4.5). Refusals carry a code and change
nothing."""

from __future__ import annotations

import io

import pytest
from sqlalchemy import select

from gymctl.models import AuditLog, Movement, Role, WorkoutMovement
from tests import factories
from tests.access.conftest import snapshot
from tests.movements.fakes import png_bytes
from tests.movements.test_curation import workout_using


def base(gym) -> str:
    return f"/organizations/{gym.id}/exercises"


def create(client, gym, body, by=Role.coach):
    return client.post(base(gym), json=body, headers=gym[by].headers)


@pytest.mark.parametrize("role", [Role.owner, Role.admin, Role.coach])
def test_coaches_and_up_create_edit_and_delete_their_gyms_movements(client, session, gym, role):
    created = create(
        client,
        gym,
        {
            "name": "House Burpee",
            "aliases": ["Burpees", "house-burpee"],
            "equipment": "body only",
            "instructions": ["Drop, kick back, jump."],
            "videoUrl": "https://v.example.test/b",
        },
        by=role,
    )
    assert created.status_code == 201, created.json
    row = created.json
    assert (row["slug"], row["organizationId"], row["videoStatus"]) == (
        "house-burpee",
        str(gym.id),
        "manual",
    )
    assert row["aliases"] == ["Burpees"]  # one spelling a term, never the name itself
    path = f"{base(gym)}/{row['id']}"
    edited = client.patch(
        path, json={"cues": ["Chest to floor"], "videoUrl": None}, headers=gym[role].headers
    )
    assert edited.status_code == 200, edited.json
    assert (edited.json["cues"], edited.json["videoUrl"], edited.json["videoStatus"]) == (
        ["Chest to floor"],
        None,
        "none",
    )
    assert edited.json["name"] == "House Burpee"  # absent fields stay
    deleted = client.delete(path, headers=gym[role].headers)
    assert deleted.status_code == 200
    assert deleted.json["deletedAt"] is not None
    actions = session.scalars(
        select(AuditLog.action).where(AuditLog.target_id == row["id"]).order_by(AuditLog.id)
    ).all()
    assert set(actions) == {"movements.created", "movements.edited", "movements.deleted"}
    again = create(client, gym, {"name": "House Burpee"}, by=role)
    assert again.status_code == 201  # the deleted row freed its slug


def test_a_created_movement_takes_a_thumbnail_through_the_upload_route_only(client, gym, store):
    """The thumbnail rules of spec B 4.5: a file (png, jpeg, webp, at most 5 MB), never a URL."""
    named = create(client, gym, {"name": "Sled Sprint", "thumbnailUrl": "https://x.test/t.png"})
    assert (named.status_code, named.json["code"]) == (400, "invalid_body")
    row = create(client, gym, {"name": "Sled Sprint"}).json
    uploaded = client.put(
        f"{base(gym)}/{row['id']}/thumbnail",
        data={"file": (io.BytesIO(png_bytes()), "t.png")},
        headers=gym[Role.coach].headers,
        content_type="multipart/form-data",
    )
    assert uploaded.status_code == 200, uploaded.json
    assert uploaded.json["thumbnailUrl"].startswith(
        f"https://images.example.test/movements/thumbnails/{gym.id}/sled-sprint-"
    )


def test_a_deleted_movement_still_resolves_in_the_workouts_that_used_it(client, session, gym):
    row = create(client, gym, {"name": "Ring Row"}).json
    movement = session.get(Movement, row["id"])
    workout = workout_using(session, movement)
    session.commit()
    client.delete(f"{base(gym)}/{row['id']}", headers=gym[Role.coach].headers)
    line = session.scalar(select(WorkoutMovement).where(WorkoutMovement.workout_id == workout.id))
    assert str(line.movement_id) == row["id"]


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("member", 403, "permission_denied"),
        ("canonical", 403, "movement_not_owned"),
        ("other_gym", 404, "movement_not_found"),
        ("slug_taken", 409, "movement_slug_taken"),
        ("wrong_types", 400, "invalid_body"),
        ("huge", 400, "invalid_body"),
        ("null_name", 400, "movement_name_required"),
        ("no_letters", 400, "movement_slug_invalid"),
    ],
)
def test_own_movement_refusals_change_nothing(client, session, gym, case, status, code):
    mine = create(client, gym, {"name": "House Special"}).json
    canonical = Movement(slug="canonical", name="Canonical")
    theirs = Movement(
        slug="theirs", name="Theirs", organization_id=factories.organization(session).id
    )
    session.add_all([canonical, theirs])
    session.commit()
    headers = gym[Role.coach].headers
    before = snapshot(session)
    if case == "member":
        response = create(client, gym, {"name": "Nope"}, by=Role.member)
    elif case == "canonical":
        response = client.patch(f"{base(gym)}/{canonical.id}", json={"name": "X"}, headers=headers)
    elif case == "other_gym":
        response = client.delete(f"{base(gym)}/{theirs.id}", headers=headers)
    elif case == "slug_taken":
        response = create(client, gym, {"name": "house special"})
    elif case == "wrong_types":
        response = create(client, gym, {"name": ["x"], "aliases": "y", "instructions": [{"a": 1}]})
    elif case == "huge":
        response = create(client, gym, {"name": "Big", "instructions": ["x" * 5000] * 60})
    elif case == "null_name":
        response = client.patch(f"{base(gym)}/{mine['id']}", json={"name": None}, headers=headers)
    else:
        response = create(client, gym, {"name": "!!!"})
    assert (response.status_code, response.json["code"]) == (status, code)
    assert snapshot(session) == before
