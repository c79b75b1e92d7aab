"""Spec A 6.1: user.deleted soft-deletes the database user; a deleted login accepts nothing
(gymctl/access/identity_events.py). user.created and user.updated take the login's advisory lock
(`_locked`) so two deliveries of one login are applied one after the other; user.deleted does
not take it. A user.created delivered at the same moment as the login's user.deleted (two
workers, PostgreSQL) waits on the row user.deleted is writing, then goes on with the row it read
before: the deleted login signs up, its address is written back and the gym's pending staff
invitation is accepted, an active coach membership for a deleted login."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.access.identity_events import apply_identity_event
from gymctl.db import get_engine, session_factory
from gymctl.models import Invitation, InvitationStatus, Membership, MembershipStatus, Role, User
from tests.api.test_identity_webhook import provider_user
from tests.conftest import NOW, wait_for_a_lock_wait

ADDRESS = "coach.race@example.test"
LOGIN = "user_race_gone"


@pytest.mark.parametrize("row_first", [True, False], ids=["row-existed", "no-row-yet"])
def test_user_deleted_and_user_created_at_once_leave_no_live_membership(
    committed_pg, settings, row_first
):
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as setup:
        from tests import factories

        gym = factories.organization(setup, name="Race Gym")
        setup.add(
            Invitation(
                organization_id=gym.id,
                email=ADDRESS,
                role=Role.coach,
                expires_at=NOW + timedelta(days=14),
                created_at=NOW,
            )
        )
        if row_first:  # GET /users/me made the row before any webhook
            factories.user(setup, identity_id=LOGIN, email=ADDRESS)
        setup.commit()

    deleting = factory()
    outcome = apply_identity_event(
        deleting,
        "msg_delete",
        {"type": "user.deleted", "data": {"id": LOGIN, "deleted": True}},
        now=NOW,
        settings=settings,
    )
    deleting.flush()
    assert outcome == "deleted"

    results: dict[str, object] = {}

    def create() -> None:
        with factory() as creating:
            try:
                results["outcome"] = apply_identity_event(
                    creating,
                    "msg_create",
                    {"type": "user.created", "data": provider_user(LOGIN, ADDRESS)},
                    now=NOW + timedelta(seconds=1),
                    settings=settings,
                )
                creating.commit()
            except Exception as error:  # a refusal is an acceptable end
                creating.rollback()
                results["error"] = error

    rival = threading.Thread(target=create)
    rival.start()
    wait_for_a_lock_wait(engine, rival=rival)
    deleting.commit()
    deleting.close()
    rival.join(timeout=30)
    assert not rival.is_alive()

    with factory() as check:
        user = check.scalar(select(User).where(User.identity_id == LOGIN))
        assert user.deleted_at is not None
        live = check.scalars(
            select(Membership).where(
                Membership.user_id == user.id, Membership.status == MembershipStatus.active
            )
        ).all()
        invitation = check.scalar(select(Invitation))
        assert (len(live), invitation.status, user.signed_up_at) == (
            0,
            InvitationStatus.pending,
            None,
        ), results


def test_user_deleted_and_user_updated_at_once_leave_the_deleted_row_as_it_was(
    committed_pg, settings
):
    """The same race with user.updated: the deleted login's row gets the new address back (and
    is mirrored to the gyms' external systems), which the sequential order refuses
    (tests/api/test_identity_deleted_login_stays_deleted.py)."""
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as setup:
        from tests import factories

        factories.user(setup, identity_id=LOGIN, email=ADDRESS)
        setup.commit()

    deleting = factory()
    apply_identity_event(
        deleting,
        "msg_delete",
        {"type": "user.deleted", "data": {"id": LOGIN, "deleted": True}},
        now=NOW,
        settings=settings,
    )
    deleting.flush()

    def update() -> None:
        with factory() as updating:
            apply_identity_event(
                updating,
                "msg_update",
                {"type": "user.updated", "data": provider_user(LOGIN, "new@example.test")},
                now=NOW + timedelta(seconds=1),
                settings=settings,
            )
            updating.commit()

    rival = threading.Thread(target=update)
    rival.start()
    wait_for_a_lock_wait(engine, rival=rival)
    deleting.commit()
    deleting.close()
    rival.join(timeout=30)

    with factory() as check:
        user = check.scalar(select(User).where(User.identity_id == LOGIN))
        assert (user.email, user.deleted_at is not None) == (ADDRESS, True)
