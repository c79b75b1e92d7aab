"""Removing a member already removed is a repeat (s52): it answers as the first removal did (200,
the membership cancelled) and writes nothing. It ran the removal again: a second
`membership.removed` audit row, the membership's updated_at moved, and its end queued to the
gym's external system again. Also two removals at once: the second reads the first's."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

from gymctl.access import memberships
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, Membership, Role
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW, wait_for_a_lock_wait

pytestmark = pytest.mark.embedded  # the demo gym reaches removal and erasure: both engines


def _removals(session) -> int:
    session.expire_all()
    return session.scalar(
        select(func.count()).select_from(AuditLog).where(AuditLog.action == "membership.removed")
    )


@pytest.mark.parametrize(
    ("ended_by", "again_by"), [("removal", Role.admin), ("erasure", Role.owner)]
)
def test_removing_an_ended_member_again_writes_nothing(client, session, gym, ended_by, again_by):
    person = gym[Role.member].user
    path = f"/organizations/{gym.id}/members/{person.id}"
    owner = gym[Role.owner].headers
    if ended_by == "erasure":
        first = client.post(f"{path}/erasure", headers=owner)
    else:
        first = client.delete(path, headers=owner)
    assert first.status_code == 200, first.json
    removals = _removals(session)
    before = snapshot(session)

    again = client.delete(path, headers=gym[again_by].headers)

    assert (again.status_code, again.json) == (
        200,
        {"userId": str(person.id), "status": "cancelled"},
    )
    assert snapshot(session) == before
    assert _removals(session) == removals


def test_a_platform_admin_removing_a_removed_owner_again_writes_nothing(
    client, session, gym, platform_admin
):
    owner = gym[Role.owner].user
    path = f"/admin/organizations/{gym.id}/members/{owner.id}"
    first = client.delete(path, headers=platform_admin.headers)
    assert (first.status_code, first.json["status"]) == (200, "cancelled")
    before = snapshot(session)

    again = client.delete(path, headers=platform_admin.headers)

    assert (again.status_code, again.json) == (
        200,
        {"userId": str(owner.id), "status": "cancelled"},
    )
    assert snapshot(session) == before
    assert _removals(session) == 1
    # Staff still may not touch the owner's membership, ended or not.
    refused = client.delete(
        f"/organizations/{gym.id}/members/{owner.id}", headers=gym[Role.admin].headers
    )
    assert (refused.status_code, refused.json["code"]) == (403, "owner_protected")
    assert snapshot(session) == before


def test_a_removal_waiting_on_another_removal_of_the_member_writes_nothing(committed_pg):
    """Both read the membership active; the second waited on the first's row lock and then
    ended it again (a second audit row) once the first committed."""
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = factories.make_gym(session, roles=(Role.owner, Role.admin, Role.member))
        session.commit()
    person = gym[Role.member].user
    answers: list[str] = []

    def second():
        with factory() as session:
            try:
                target = memberships.remove_member(
                    session,
                    gym.id,
                    person.id,
                    actor=session.get(Membership, gym[Role.admin].membership.id),
                    actor_user_id=gym[Role.admin].user.id,
                    now=NOW,
                )
                session.commit()
                answers.append(target.status.value)
            except Exception as error:
                answers.append(getattr(error, "code", repr(error)))

    with factory() as first:
        memberships.remove_member(
            first,
            gym.id,
            person.id,
            actor=first.get(Membership, gym[Role.owner].membership.id),
            actor_user_id=gym[Role.owner].user.id,
            now=NOW,
        )
        first.flush()
        rival = threading.Thread(target=second)
        rival.start()
        wait_for_a_lock_wait(get_engine(committed_pg), rival=rival)
        first.commit()
    rival.join(timeout=30)

    assert answers == ["cancelled"]
    with factory() as session:
        assert _removals(session) == 1
