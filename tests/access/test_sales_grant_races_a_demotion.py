"""A sales grant given while staff demote the coach to member.

Spec A 2.5: "Only an active coach can receive one. A member (customer) membership can never
hold it: granting is rejected, and a leftover grant from an earlier staff role gives no
access." Decisions: a grant "ends with the staff role (or the membership); coming back as a
coach later does not revive it".

`sales.grant_sales` read the target membership without a lock and inserted the grant; a role
change committing between that read and the insert (change_role locks both rows and ends the
grant it finds: none yet) left a live grant on a member membership. Once the person was a
coach again, the leftover grant gave sales access nobody granted to the new coach role. The
grant now locks the membership and reads it afresh. PostgreSQL, two connections with real
commits."""

from __future__ import annotations

import threading

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.access import memberships, sales
from gymctl.db import get_engine
from gymctl.models import Membership, Role, SalesGrant
from tests import factories
from tests.conftest import NOW


def test_a_grant_racing_a_demotion_leaves_no_live_grant_on_the_member(committed_pg):
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = factories.make_gym(session, roles=(Role.owner, Role.admin, Role.coach))
        session.commit()
        org_id = gym.id
        owner_id, admin_id, coach_id = (
            gym[r].user.id for r in (Role.owner, Role.admin, Role.coach)
        )

    def demote() -> None:
        with factory() as rival:
            actor = memberships.membership_of(rival, org_id, owner_id)
            memberships.change_role(rival, actor, coach_id, Role.member, now=NOW)
            rival.commit()

    original = sales._live_grant
    rivals: list[threading.Thread] = []

    def live_grant_then_demoted(session, membership_id):
        found = original(session, membership_id)
        if not rivals:  # the admin's grant read the coach; the owner's demotion commits now
            thread = threading.Thread(target=demote)
            rivals.append(thread)
            thread.start()
            thread.join(timeout=3)  # a grant holding the membership's lock keeps it waiting
        return found

    sales._live_grant = live_grant_then_demoted
    try:
        with factory() as session:
            actor = memberships.membership_of(session, org_id, admin_id)
            try:
                sales.grant_sales(session, actor, coach_id, scope="team", manager=True, now=NOW)
                session.commit()
            except Exception:  # refused once it sees the demotion: as good
                session.rollback()
    finally:
        sales._live_grant = original
        for thread in rivals:
            thread.join(timeout=30)

    with factory() as session:
        target = session.scalar(
            select(Membership).where(
                Membership.organization_id == org_id, Membership.user_id == coach_id
            )
        )
        assert target.role is Role.member
        live = session.scalars(
            select(SalesGrant).where(
                SalesGrant.membership_id == target.id, SalesGrant.revoked_at.is_(None)
            )
        ).all()
        # A member membership never holds a live sales grant.
        assert live == []
        # Made a coach again, the person has no sales access until one is granted anew.
        owner = memberships.membership_of(session, org_id, owner_id)
        memberships.change_role(session, owner, coach_id, Role.coach, now=NOW)
        session.commit()
        assert sales.sales_access(session, target) is None
