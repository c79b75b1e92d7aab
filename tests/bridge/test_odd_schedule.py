"""A schedule the external system answers with an odd class or registration (an id that is
none: null, empty, an object; a day that is no date) is its failure, as an odd write answer is
(client.external_id_of): read as it came, a class with a null id was kept as the external class
"None" (and a class with none at all stopped the poll, KeyError), a day that is no date made
every later booking into the class fail on it, and leaving the odd class out instead would take
it for a class removed there (its linked session's seats cancelled). The poll stays due and
nothing of the window is written."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.bridge.client import ExternalCallError, schedule_rows
from gymctl.models.bridge import EntityLink, EntityType
from tests.bridge.conftest import run

ODD_CLASSES = [
    {"id": None},
    {"id": ""},
    {"id": {"n": 1}},
    {"date": "2026-11-22T07:00"},
    {"registrations": [{"id": None, "user_id": 5, "membership_user_id": 0}]},
    {"registrations": [{"id": 9, "membership_user_id": 0}]},
    {"registrations": {"id": 9}},
]


@pytest.mark.embedded
@pytest.mark.parametrize("odd", ODD_CLASSES, ids=repr)
def test_a_schedule_with_an_odd_class_is_the_external_systems_failure(
    session, org, connected, fake, account, bridge_settings, clock, odd
):
    kept = fake.add_class(account, "2026-11-22")
    run(session, org.id, bridge_settings, clock)  # the first poll: the class is known
    fake.add_class(account, "2026-11-23", **odd)
    connected.schedule_poll_due_at = clock.now()
    session.commit()

    run(session, org.id, bridge_settings, clock)

    session.expire_all()
    links = session.scalars(
        select(EntityLink).where(
            EntityLink.organization_id == org.id, EntityLink.entity_type == EntityType.schedule
        )
    ).all()
    assert [(link.external_id, link.data["removed"]) for link in links] == [(kept, False)]
    assert connected.schedule_poll_due_at is not None  # stays due: the next run polls again
    assert "poll:" in (connected.last_error or "")


@pytest.mark.parametrize(
    "answer", [{"data": []}, [None], ["1"], [{"date": "2026-11-22"}]], ids=repr
)
def test_the_schedule_read_refuses_what_is_no_list_of_classes(answer):
    with pytest.raises(ExternalCallError):
        schedule_rows(answer)


def test_the_schedule_read_keeps_a_well_formed_answer():
    rows = [{"id": 7, "date": "2026-11-22",
             "registrations": [{"id": "8", "user_id": 3}, {"id": 9, "user_id": None}]},
            {"id": "x1", "date": "2026-11-23"}]  # fmt: skip
    assert schedule_rows(rows) == rows
