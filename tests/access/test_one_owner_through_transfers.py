"""One owner per organization (spec A 2.7), also through two ownership transfers at once. Each
read the caller as the owner, demoted it and made its target owner: on PostgreSQL both
committed and the gym had two owners. The second transfer must read the caller as it is now
(an admin, who cannot grant the owner role)."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from gymctl.access import memberships
from gymctl.db import get_engine, session_factory
from gymctl.models import Membership, MembershipStatus, Role
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait


def test_a_second_transfer_while_the_first_commits_is_refused(committed_pg):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = factories.make_gym(session, roles=(Role.owner, Role.admin, Role.coach))
        session.commit()
    owner_id = gym[Role.owner].membership.id
    answers = []

    def second():
        with factory() as session:
            try:
                memberships.change_role(
                    session,
                    session.get(Membership, owner_id),
                    gym[Role.coach].user.id,
                    Role.owner,
                    now=NOW,
                )
                session.commit()
                answers.append("transferred")
            except Exception as error:
                answers.append(getattr(error, "code", repr(error)))

    with factory() as first:
        actor = first.get(Membership, owner_id)
        memberships.change_role(first, actor, gym[Role.admin].user.id, Role.owner, now=NOW)
        first.flush()
        thread = threading.Thread(target=second)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg))
        first.commit()
    thread.join(timeout=30)

    assert answers == ["role_grant_forbidden"]
    with factory() as session:
        owners = select(func.count()).where(
            Membership.organization_id == gym.id,
            Membership.role == Role.owner,
            Membership.status == MembershipStatus.active,
        )
        assert session.scalar(owners) == 1
