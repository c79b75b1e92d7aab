"""One person's two rows folded into one (access.folding, spec A 5.3) keep the role the gym
gave the person: a link lowers no one."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access.ownership import link_profiles
from gymctl.models import Membership, MembershipStatus, Role
from tests import factories
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize("role", [Role.coach, Role.owner])
def test_a_link_keeps_the_staff_role_the_login_holds_in_the_gym(session, gym, role):
    """The desk registered Pat as a member (a profile, no login); Pat then signed up, accepted
    the gym's coach invitation (or was handed the gym's ownership) with that login, and proved
    the address. The link kept the profile's member membership and cancelled the login's:
    the coach was a member again, and a gym whose owner it was had no owner left."""
    organization = gym.organization
    profile = factories.user(session, identity_id=None, email="pat@example.test")
    factories.membership(session, user=profile, organization=organization)
    login = factories.user(
        session, identity_id="user_pat", email="pat@example.test", email_verified_at=NOW
    )
    if role is Role.owner:
        gym.owner_membership.role = Role.admin  # ownership was transferred to Pat
    factories.membership(session, user=login, organization=organization, role=role)

    linked = link_profiles(session, login, now=NOW)
    session.flush()
    session.expire_all()

    active = session.scalars(
        select(Membership).where(
            Membership.organization_id == organization.id,
            Membership.user_id == linked.id,
            Membership.status == MembershipStatus.active,
        )
    ).all()
    assert [m.role for m in active] == [role]
    owners = session.scalars(
        select(Membership.id).where(
            Membership.organization_id == organization.id,
            Membership.role == Role.owner,
            Membership.status == MembershipStatus.active,
        )
    ).all()
    assert len(owners) == 1
