"""One person's two rows folded (access.folding, spec A 5.3): the membership that goes on keeps
its own sales grant, and the dropped one's ends with the membership the fold ended (spec A 2.5:
a grant is held by an active coach only; "a leftover grant from an earlier staff role gives no
access"; decisions: it ends with the role or the membership, and is never revived)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access.folding import fold_person
from gymctl.models import MembershipStatus, Role, SalesGrant
from tests import factories
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def _coach_with_grant(session, org, email, scope):
    user = factories.user(session, email=email)
    membership = factories.membership(session, user=user, organization=org, role=Role.coach)
    session.add(SalesGrant(organization_id=org.id, membership_id=membership.id, scope=scope,
                           manager=False, created_at=NOW))  # fmt: skip
    session.flush()
    return user, membership


def test_a_fold_ends_the_dropped_memberships_sales_grant_when_the_kept_one_holds_its_own(
    session,
):
    org = factories.organization(session, name="Iron Temple")
    kept_user, kept = _coach_with_grant(session, org, "kept@example.test", "team")
    dropped_user, dropped = _coach_with_grant(session, org, "dropped@example.test", "own")
    session.commit()

    fold_person(session, dropped_user, kept_user, now=NOW)
    session.commit()

    session.expire_all()
    assert session.get(type(dropped), dropped.id).status is MembershipStatus.cancelled
    live = session.execute(
        select(SalesGrant.membership_id, SalesGrant.scope).where(SalesGrant.revoked_at.is_(None))
    ).all()
    assert sorted(live) == [(kept.id, "team")], "a live grant left on the membership the fold ended"
