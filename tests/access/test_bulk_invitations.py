"""Bulk invites (spec A 7): the request queues the addresses and calls no one; the daemons invite
each address with the single invite's rules, in a transaction of its own that also records its
outcome; the outcomes are read back. After the first rate_limited answer every remaining
address is rate_limited and the provider is not called again."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import event, func, select

from daemons.jobs import JOBS
from gymctl.access import bulk_invitations
from gymctl.access.erasure import erase_personal_data
from gymctl.models import (
    Invitation,
    InvitationBatch,
    InvitationStatus,
    Membership,
    MembershipStatus,
    Role,
)
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def queue(client, gym, emails, role="member", by=Role.owner):
    return client.post(
        f"/organizations/{gym.id}/invitations/bulk",
        json={"emails": emails, "role": role},
        headers=gym[by].headers,
    )


def read(client, gym, batch_id, by=Role.owner):
    return client.get(
        f"/organizations/{gym.id}/invitations/bulk/{batch_id}", headers=gym[by].headers
    )


def work(app, session_factory, **options):
    outreach = app.extensions["gymctl"].outreach
    return bulk_invitations.work_batches(session_factory, outreach, now=NOW, **options)


def invitations(session, *where):
    session.expire_all()
    return session.scalar(select(func.count()).select_from(Invitation).where(*where))


def test_the_request_queues_the_addresses_and_calls_no_one(client, gym, session, mailbox, idp):
    calls = idp.admin_requests
    response = queue(client, gym, ["a@example.test", "b@example.test"])

    assert response.status_code == 202
    batch = response.json
    assert response.headers["Location"] == f"/organizations/{gym.id}/invitations/bulk/{batch['id']}"
    assert (batch["status"], batch["role"], batch["total"], batch["done"], batch["results"]) == (
        "queued",
        "member",
        2,
        0,
        [],
    )
    assert invitations(session) == 0
    assert read_mailbox(mailbox) == []
    assert idp.admin_requests == calls  # no lookup, no provider invitation


def test_the_daemon_invites_each_address_as_a_single_invite_would_and_records_its_outcome(
    app, client, gym, session, session_factory, mailbox, idp
):
    idp.add_account("user_known", "known@example.test", verified=True)
    emails = ["New@Example.test", "known@example.test", "not-an-address", "new@example.test"]
    batch_id = queue(client, gym, emails, role="coach").json["id"]

    assert work(app, session_factory) == {
        "batches": 1,
        "addresses": 4,
        "invited": 2,
        "email_invalid": 1,
        "invitation_pending": 1,
    }

    batch = read(client, gym, batch_id).json
    assert (batch["status"], batch["done"]) == ("finished", 4)
    assert [(r["email"], r["outcome"]) for r in batch["results"]] == [
        ("New@Example.test", "invited"),
        ("known@example.test", "invited"),
        ("not-an-address", "email_invalid"),
        ("new@example.test", "invitation_pending"),  # the same address as the first
    ]
    ids = {uuid.UUID(r["id"]) for r in batch["results"] if r["outcome"] == "invited"}
    session.expire_all()
    stored = session.scalars(select(Invitation)).all()
    assert {i.id for i in stored} == ids
    assert {(i.role, i.status) for i in stored} == {(Role.coach, InvitationStatus.pending)}
    # The one with an account has its pending membership at once, as a single invite gives it.
    known = session.scalar(
        select(Membership).where(Membership.status == MembershipStatus.pending_invitation)
    )
    assert known.role is Role.coach
    assert sorted(m["To"] for m in read_mailbox(mailbox)) == [
        "New@example.test",
        "known@example.test",
    ]
    assert work(app, session_factory) == {"batches": 0, "addresses": 0}  # nothing left


def test_after_the_first_429_every_remaining_address_is_rate_limited_without_calling(
    app, client, gym, session, session_factory, idp
):
    """spec A 7: rate_limited is a per-target failure after the first 429 from the provider."""
    idp.answer_429_after = idp_calls = idp.admin_requests + 4  # a lookup and an invite each
    emails = [f"bulk{i}@example.test" for i in range(5)]
    batch_id = queue(client, gym, emails).json["id"]

    work(app, session_factory)

    outcomes = [r["outcome"] for r in read(client, gym, batch_id).json["results"]]
    assert outcomes == ["invited", "invited", "rate_limited", "rate_limited", "rate_limited"]
    assert invitations(session) == 2
    assert idp.admin_requests == idp_calls + 1  # the one call that got the 429


def test_a_mail_failure_fails_its_address_and_keeps_nothing_of_it(
    settings, session_factory, clock, client, gym, session
):
    from gymctl.providers.mail import SmtpMailer
    from webhooks.app import create_app

    batch_id = queue(client, gym, ["one@example.test", "two@example.test"]).json["id"]
    broken = create_app(
        settings,
        session_factory=session_factory,
        clock=clock,
        mailer=SmtpMailer("smtp://127.0.0.1:1", settings.mail_from),
    )

    work(broken, session_factory)

    outcomes = [r["outcome"] for r in read(client, gym, batch_id).json["results"]]
    assert outcomes == ["mail_failed", "mail_failed"]
    assert invitations(session) == 0


def test_a_pass_stops_at_its_budget_and_the_next_one_goes_on_where_it_stopped(
    app, client, gym, session, session_factory
):
    batch_id = queue(client, gym, [f"p{i}@example.test" for i in range(5)]).json["id"]
    ticks = iter(range(100))  # each question of the clock is a second later

    first = work(app, session_factory, budget_seconds=2.5, monotonic=lambda: next(ticks))

    assert first["addresses"] == 2
    assert read(client, gym, batch_id).json["done"] == 2
    assert work(app, session_factory)["addresses"] == 3
    batch = read(client, gym, batch_id).json
    assert [r["email"] for r in batch["results"]] == [f"p{i}@example.test" for i in range(5)]
    assert invitations(session) == 5


def test_an_address_whose_transaction_is_lost_is_invited_again_once(
    app, client, gym, session, session_factory, mailbox
):
    """A crash between the invitation and its commit loses both the invitation and its
    outcome: the next pass invites the address again, and it ends invited exactly once."""
    batch_id = queue(client, gym, ["crash@example.test", "after@example.test"]).json["id"]
    crashed = []

    def crash_once(committing):
        outermost = not committing.in_nested_transaction()
        if outermost and not crashed and committing.new | committing.dirty:
            crashed.append(True)
            raise ConnectionError("the database went away")

    event.listen(session_factory, "before_commit", crash_once)
    try:
        with pytest.raises(ConnectionError):
            work(app, session_factory)
    finally:
        event.remove(session_factory, "before_commit", crash_once)
    assert (invitations(session), read(client, gym, batch_id).json["done"]) == (0, 0)

    work(app, session_factory)

    results = read(client, gym, batch_id).json["results"]
    assert [(r["email"], r["outcome"]) for r in results] == [
        ("crash@example.test", "invited"),
        ("after@example.test", "invited"),
    ]
    assert invitations(session, Invitation.email == "crash@example.test") == 1
    # The lost attempt's email went out (mail is sent before the commit, as for one invite):
    # its link names an invitation that was never stored; the second email's link is good.
    assert [m["To"] for m in read_mailbox(mailbox)].count("crash@example.test") == 2


def test_staff_removed_after_asking_invite_no_one_more(
    app, client, gym, session, session_factory, idp
):
    calls = idp.admin_requests
    batch_id = queue(client, gym, ["x@example.test", "y@example.test"], by=Role.admin).json["id"]
    admin = session.get(Membership, gym[Role.admin].membership.id)
    admin.status = MembershipStatus.cancelled
    session.commit()

    work(app, session_factory)

    outcomes = [r["outcome"] for r in read(client, gym, batch_id).json["results"]]
    assert outcomes == ["permission_denied", "permission_denied"]
    assert invitations(session) == 0
    assert idp.admin_requests == calls


def test_an_address_the_gym_erased_while_queued_is_not_invited(
    app, client, gym, session, session_factory, mailbox
):
    from tests.factories import membership, user

    done_batch = queue(client, gym, ["gone@example.test"]).json["id"]
    work(app, session_factory)
    waiting = queue(client, gym, ["  Gone@Example.test", "stays@example.test"]).json["id"]
    person = user(session, email="gone@example.test")
    membership(session, user=person, organization=gym.organization, role=Role.member)
    session.flush()
    erased = erase_personal_data(
        session, gym.organization, person.id, actor_user_id=gym[Role.owner].user.id, now=NOW
    )
    session.commit()
    assert erased["bulkInvites"] == 2

    work(app, session_factory)

    results = read(client, gym, waiting).json["results"]
    assert [r["outcome"] for r in results] == ["erased", "invited"]
    assert results[0]["email"].endswith("@erased.invalid")
    assert "gone@example.test" not in str(read(client, gym, done_batch).json).lower()
    # The first batch's email went out before the erasure; none went out after it.
    assert sorted(m["To"] for m in read_mailbox(mailbox)) == [
        "gone@example.test",
        "stays@example.test",
    ]


def test_a_role_the_asker_cannot_grant_is_refused_whole_and_nothing_is_queued(client, gym, session):
    before = snapshot(session)
    response = queue(client, gym, ["a@example.test"], role="admin", by=Role.coach)
    assert (response.status_code, response.json["code"]) == (403, "role_grant_forbidden")
    assert snapshot(session) == before


def test_a_fourth_unfinished_bulk_invite_of_a_gym_waits_for_one_to_finish(
    app, client, gym, session, session_factory
):
    for n in range(bulk_invitations.UNFINISHED_PER_ORGANIZATION):
        assert queue(client, gym, [f"q{n}@example.test"]).status_code == 202
    before = snapshot(session)

    refused = queue(client, gym, ["late@example.test"])

    assert (refused.status_code, refused.json["code"]) == (429, "invitation_batch_queue_full")
    assert snapshot(session) == before
    work(app, session_factory)
    assert queue(client, gym, ["late@example.test"]).status_code == 202


def test_another_gyms_bulk_invite_reads_as_missing(client, gym, session, idp):
    from tests import factories

    other = factories.make_gym(session, name="Elsewhere")
    session.commit()
    mine = queue(client, gym, ["a@example.test"]).json["id"]
    foreign = bulk_invitations.queue_batch(
        session,
        organization=other.organization,
        actor=other[Role.owner].membership,
        emails=["secret@example.test"],
        role=Role.member,
        now=NOW,
    )
    session.commit()

    for batch_id in (foreign.id, uuid.uuid4()):
        response = read(client, gym, batch_id)
        assert (response.status_code, response.json["code"]) == (404, "invitation_batch_not_found")
    assert read(client, gym, mine).status_code == 200
    members = read(client, gym, mine, by=Role.member)
    assert (members.status_code, members.json["code"]) == (403, "permission_denied")


@pytest.mark.parametrize(
    "body",
    [
        {"emails": "a@example.test"},
        {"emails": []},
        {"emails": [f"a{i}@example.test" for i in range(501)]},
        {"emails": [["a@example.test"]]},
        {"emails": [{"$gt": ""}]},
        {"emails": ["a@example.test"], "role": "root"},
        {"emails": ["a@example.test"], "extra": 1},
        {"emails": ["a\u0000@example.test"]},
    ],
)
def test_a_hostile_body_is_refused_and_nothing_is_queued(client, gym, session, body):
    before = snapshot(session)
    response = client.post(
        f"/organizations/{gym.id}/invitations/bulk", json=body, headers=gym[Role.owner].headers
    )
    assert response.status_code == 400
    assert response.json["code"] == "invalid_body"
    assert snapshot(session) == before


def test_the_daemon_job_invites_with_the_deployments_identity_provider_and_mailer(
    client, gym, session, session_factory, settings, idp
):
    """`invitation_batches` in the daemons' table commits an address at a time and builds its
    outside parts from the settings, as every daemon does."""
    batch_id = queue(client, gym, ["job@example.test"]).json["id"]
    job = next(j for j in JOBS if j.name == "invitation_batches")

    assert job.own_transactions
    assert job.run(session_factory, NOW, settings)["invited"] == 1
    assert read(client, gym, batch_id).json["status"] == "finished"
    assert [i["email_address"] for i in idp.invitations] == ["job@example.test"]
    session.expire_all()
    assert session.scalar(select(InvitationBatch)).finished_at == NOW
