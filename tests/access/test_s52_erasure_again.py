"""Erasing a member already erased is a repeat (s52): it answers as the first erasure did (200,
the same body) and writes nothing. It ran the erasure again: `end_membership` a second time (the
membership's updated_at moved, its end offered to the gym's external system again) and a second
`personal_data.erased` audit row; two erasures at once both ran. A member who came back after an
erasure and ended again is erased anew: what they gave since is scrubbed."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.access.erased import ERASURE_ACTION
from gymctl.access.erasure import erase_personal_data
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, JoinSubmission, Organization, Role
from tests import factories
from tests.access.conftest import snapshot
from tests.access.test_erasure import erase
from tests.access.test_join import FROM, make_link
from tests.conftest import NOW, wait_for_a_lock_wait


def _erasures(session) -> int:
    session.expire_all()
    return session.scalar(
        select(func.count()).select_from(AuditLog).where(AuditLog.action == ERASURE_ACTION)
    )


@pytest.mark.embedded  # the demo gym reaches erasure: both engines
@pytest.mark.parametrize("login", [True, False], ids=["login", "desk"])
def test_erasing_an_erased_member_again_answers_as_before_and_writes_nothing(
    engine, client, session, gym, clock, login
):
    if login:  # the person's row stays (their login's)
        person = gym[Role.member].user
    else:  # the desk's: the person's row is erased too
        person = factories.user(session, identity_id=None, email="dana@desk.example", name="Dana")
        factories.membership(session, user=person, organization=gym.organization, role=Role.member)
        session.commit()
    first = erase(client, gym, person.id)
    assert first.status_code == 200, first.json
    assert first.json["erased"]["userRowErased"] is not login
    before = snapshot(session)
    clock.set(NOW + timedelta(seconds=30))  # a retry later on: nothing of it may be stamped

    again = erase(client, gym, person.id)

    assert (again.status_code, again.json) == (200, first.json)
    assert snapshot(session) == before
    assert _erasures(session) == 1
    # The owner's own data is still refused first.
    owner = erase(client, gym, gym[Role.owner].user.id)
    assert (owner.status_code, owner.json["code"]) == (409, "erasure_owner")


@pytest.mark.embedded
def test_a_member_who_came_back_and_left_again_is_erased_anew(engine, client, session, gym, clock):
    """The repeat is only of an erasure since the membership last ended: a member who joined
    again (giving their details anew) and was removed is erased again, their new rows scrubbed."""
    person = gym[Role.member].user
    link = make_link(session, gym.organization)
    session.commit()
    assert erase(client, gym, person.id).status_code == 200
    clock.set(NOW + timedelta(seconds=10))
    joined = client.post(f"/join/{link.token}/join", headers={**gym[Role.member].headers, **FROM})
    assert joined.status_code in (200, 201), joined.json
    clock.set(NOW + timedelta(seconds=20))
    removed = client.delete(
        f"/organizations/{gym.id}/members/{person.id}", headers=gym[Role.owner].headers
    )
    assert removed.status_code == 200, removed.json
    session.expire_all()
    assert session.scalars(select(JoinSubmission.ip)).all() == ["203.0.113.9"]
    clock.set(NOW + timedelta(seconds=30))

    again = erase(client, gym, person.id)

    assert again.status_code == 200, again.json
    assert again.json["erased"]["joinSubmissions"] == 1
    assert _erasures(session) == 2
    assert session.scalars(select(JoinSubmission.ip)).all() == [None]


def test_an_erasure_waiting_on_another_erasure_of_the_member_writes_nothing(committed_pg):
    """Both read the membership active; the second waited on the first's row lock and then
    ended it and audited it again once the first committed."""
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = factories.make_gym(session, roles=(Role.owner, Role.member))
        session.commit()
    person = gym[Role.member].user
    owner = gym[Role.owner].user
    answers: list[object] = []

    def second():
        with factory() as session:
            try:
                done = erase_personal_data(
                    session,
                    session.get(Organization, gym.id),
                    person.id,
                    actor_user_id=owner.id,
                    now=NOW + timedelta(seconds=1),
                )
                session.commit()
                answers.append(done)
            except Exception as error:
                answers.append(getattr(error, "code", repr(error)))

    with factory() as first:
        done = erase_personal_data(
            first, first.get(Organization, gym.id), person.id, actor_user_id=owner.id, now=NOW
        )
        first.flush()
        rival = threading.Thread(target=second)
        rival.start()
        wait_for_a_lock_wait(get_engine(committed_pg), rival=rival)
        first.commit()
    rival.join(timeout=30)

    assert answers == [done]
    with factory() as session:
        assert _erasures(session) == 1
