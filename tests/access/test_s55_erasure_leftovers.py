# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
"""s55 (a hunter's test): personal data a gym's erasure leaves behind in its own rows.

Spec A 2.8 keeps "personal-data erasure" as an owner-only rule; decisions (Issue 23, s42) say
what is erased from the gym: "this gym's join-form and failed-checkout rows of the person
(address, IP, browser, data)", "the join-checkout follow-up tasks filed for the address", "the
person's name and address in the bridge's queue".
"""

from __future__ import annotations

from sqlalchemy import select

from gymctl.models import JoinSubmission, Role, Task
from gymctl.models.bridge import EntityLink, EntityType, Origin, RosterEntry
from tests import factories
from tests.access.conftest import gym, outsider, platform_admin  # noqa: F401 (fixtures)
from tests.access.test_join import make_link
from tests.conftest import NOW

REASON = "Card of Dana Levi (phone 050-1234567) declined"


def erase(client, gym, user_id):
    return client.post(
        f"/organizations/{gym.id}/members/{user_id}/erasure", headers=gym[Role.owner].headers
    )


def test_erasure_clears_the_reason_a_failed_checkout_copied_into_its_follow_up_task(
    client, session, gym
):
    """The failed checkout's reason is erased from the join submission (its `data`), but the
    same text stayed on the urgent follow-up task the checkout filed (`detail`)."""
    person = factories.user(
        session, identity_id=None, email="dana@desk.example", name="Dana Levi",
        signup_origin="desk",
    )  # fmt: skip
    factories.membership(session, user=person, organization=gym.organization, role=Role.member)
    link = make_link(session, gym.organization)
    session.commit()
    failed = client.post(
        f"/join/{link.token}/checkout-failed",
        json={"email": "dana@desk.example", "reason": REASON},
    )
    assert failed.status_code == 202, failed.json

    assert erase(client, gym, person.id).status_code == 200
    session.expire_all()
    [submission] = session.scalars(select(JoinSubmission)).all()
    assert submission.data == {}  # the submission's copy of the reason is erased
    [task] = session.scalars(
        select(Task).where(Task.organization_id == gym.id, Task.subject_type == "join_checkout")
    ).all()
    assert "dana" not in task.title.lower()
    assert "Dana" not in (task.detail or ""), task.detail


def test_erasure_leaves_no_name_or_address_in_the_bridges_stored_roster(client, session, gym):
    """The roster import stored the external user standing for the member (names, address);
    erasure withdraws the bridge's queued copies of the person but kept this copy, which the
    owner's issues inbox shows by name."""
    member = gym[Role.member]
    member.user.name = "Mia Member"
    session.add(
        EntityLink(
            organization_id=gym.id, entity_type=EntityType.member,
            platform_id=str(member.membership.id), external_id="1001", origin=Origin.import_,
            data={}, created_at=NOW, updated_at=NOW,
        )
    )  # fmt: skip
    session.add(
        RosterEntry(
            organization_id=gym.id, external_id="1001", first_name="Mia", last_name="Member",
            email=member.user.email, active=True, fetched_at=NOW,
        )
    )  # fmt: skip
    session.commit()

    assert erase(client, gym, member.user.id).status_code == 200
    session.expire_all()
    entry = session.scalar(select(RosterEntry).where(RosterEntry.organization_id == gym.id))
    assert (entry.first_name, entry.last_name, entry.email) == (None, None, None)


def test_erasure_revokes_and_forgets_the_members_device_tokens_in_the_gym(
    client, session, gym, settings
):
    """The member's phone registered for the gym's pushes (a device token, personal data tied to
    this gym's registration). Erased from the gym, the registration kept the token, live."""
    from gymctl.models.releases import PushRegistration

    member = gym[Role.member]
    registered = client.post(
        f"/organizations/{gym.id}/push-registrations",
        json={"appId": settings.multi_org_app_id, "platform": "ios", "token": "device-token-mia"},
        headers=member.headers,
    )
    assert registered.status_code == 201, registered.json

    assert erase(client, gym, member.user.id).status_code == 200
    session.expire_all()
    [row] = session.scalars(
        select(PushRegistration).where(PushRegistration.organization_id == gym.id)
    ).all()
    assert row.revoked_at is not None
    assert row.token != "device-token-mia"
