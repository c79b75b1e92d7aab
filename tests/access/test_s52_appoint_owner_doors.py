"""s52: appointing the owner of a gym that has none (gymctl.access.owner_appointment), two at
once on PostgreSQL (one owner: the second reads the first's under the gym's row lock) and the
CLI door on both engines (`gymctl members appoint-owner ORG USER --operator WHO`)."""

from __future__ import annotations

import json
import threading

import pytest
from sqlalchemy import func, select

from gymctl.access import memberships
from gymctl.access.owner_appointment import appoint_owner
from gymctl.cli import main
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, Membership, MembershipStatus, Role
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait


def ownerless_gym(url: str):
    """A committed gym (owner, admin, coach) whose owner a platform admin removed."""
    factory = session_factory(get_engine(url))
    with factory() as session:
        gym = factories.make_gym(session, roles=(Role.owner, Role.admin, Role.coach))
        operator = factories.user(session, identity_id="user_ops")
        memberships.remove_member(
            session,
            gym.id,
            gym.owner.id,
            actor=None,
            actor_user_id=operator.id,
            platform_admin=True,
            now=NOW,
        )
        session.commit()
        people = {
            role: (person.user.id, person.user.identity_id) for role, person in gym.people.items()
        }
        return factory, gym.id, gym.organization.slug, people, operator.id


def active_owners(factory, org_id) -> list:
    with factory() as session:
        return list(
            session.scalars(
                select(Membership.user_id).where(
                    Membership.organization_id == org_id,
                    Membership.role == Role.owner,
                    Membership.status == MembershipStatus.active,
                )
            )
        )


def test_two_appointments_at_once_make_one_owner(committed_pg):
    factory, org_id, _, people, operator = ownerless_gym(committed_pg)
    admin, coach = people[Role.admin][0], people[Role.coach][0]
    answers = []

    def second():
        with factory() as session:
            try:
                appoint_owner(session, org_id, coach, actor_user_id=operator, now=NOW)
                session.commit()
                answers.append("appointed")
            except Exception as error:
                answers.append(getattr(error, "code", repr(error)))

    with factory() as first:
        appoint_owner(first, org_id, admin, actor_user_id=operator, now=NOW)
        first.flush()
        thread = threading.Thread(target=second)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg), rival=thread)
        first.commit()
    thread.join(timeout=30)

    assert answers == ["owner_exists"]
    assert active_owners(factory, org_id) == [admin]
    with factory() as session:
        appointed = select(func.count()).where(AuditLog.action == "membership.role_changed")
        assert session.scalar(appointed) == 1


def test_the_cli_appoints_as_the_operator_and_refuses_a_second(
    committed_database, monkeypatch, capsys
):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_database)
    monkeypatch.setenv("COLUMNS", "200")
    factory, org_id, slug, people, operator = ownerless_gym(committed_database)
    coach_id, coach_subject = people[Role.coach]
    admin_subject = people[Role.admin][1]

    def gymctl(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as ended:
            main(list(args))
        shown = capsys.readouterr()
        return ended.value.code, shown.out, shown.err

    status, out, _ = gymctl(
        "members", "appoint-owner", slug, coach_subject, "--operator", "user_ops", "--json"
    )
    assert status == 0, out
    assert json.loads(out) == {
        "organization": slug,
        "userId": str(coach_id),
        "role": "owner",
        "changed": True,
        "formerOwnerUserId": None,
    }
    assert active_owners(factory, org_id) == [coach_id]
    with factory() as session:
        audit = session.scalar(select(AuditLog).where(AuditLog.action == "membership.role_changed"))
        assert audit.actor_user_id == operator

    status, out, _ = gymctl(
        "members", "appoint-owner", slug, coach_subject, "--operator", "user_ops"
    )
    assert (status, out.strip()) == (0, f"{coach_subject} is now the owner of {slug} (already was)")

    status, _, err = gymctl(
        "members", "appoint-owner", slug, admin_subject, "--operator", "user_ops"
    )
    assert status == 1
    assert err.startswith("error owner_exists:")
    status, _, err = gymctl("members", "appoint-owner", slug, admin_subject, "--operator", "nobody")
    assert (status, err.split(":")[0]) == (1, "error operator_user_required")
    assert active_owners(factory, org_id) == [coach_id]
