"""Bulk invites (spec A 7): the request queues the addresses and calls no one; the daemons invite
each address with the single invite's rules, in a transaction of its own that also records its
outcome; the outcomes are read back. After the first rate_limited answer every remaining
address is rate_limited and the provider is not called again."""

from __future__ import annotations

import uuid
from datetime import timedelta

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

MINUTE = timedelta(minutes=1)


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


def queued_by_owner(session, gym, emails):
    """A batch queued by the gym's owner straight through the domain (another gym's, or one
    made outside a request)."""
    batch = bulk_invitations.queue_batch(
        session,
        organization=gym.organization,
        actor=gym[Role.owner].membership,
        emails=emails,
        role=Role.member,
        now=NOW,
    )
    session.commit()
    return batch.id


def work(app, session_factory, now=NOW, **options):
    outreach = app.extensions["gymctl"].outreach
    return bulk_invitations.work_batches(session_factory, outreach, now=now, **options)


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


def test_a_mail_server_down_is_tried_again_later_and_its_failure_kept_nothing(
    settings, session_factory, clock, client, gym, session
):
    """An outside part's failure is not the address's: the batch waits 1, 5 and 15 minutes
    between tries, and the fourth failure is the address's outcome. No try keeps anything."""
    from gymctl.providers.mail import SmtpMailer
    from webhooks.app import create_app

    batch_id = queue(client, gym, ["one@example.test"]).json["id"]
    broken = create_app(
        settings,
        session_factory=session_factory,
        clock=clock,
        mailer=SmtpMailer("smtp://127.0.0.1:1", settings.mail_from),
    )

    tries = [NOW, NOW + MINUTE, NOW + 6 * MINUTE, NOW + 21 * MINUTE]
    for at, retry in zip(tries, [*tries[1:], None], strict=True):
        work(broken, session_factory, now=at)
        assert work(broken, session_factory, now=at)["batches"] == 0  # waits for its retry
        session.expire_all()
        assert session.scalar(select(InvitationBatch)).retry_at == retry

    outcomes = [r["outcome"] for r in read(client, gym, batch_id).json["results"]]
    assert outcomes == ["mail_failed"]
    assert invitations(session) == 0


def test_an_identity_provider_outage_delays_the_batch_and_it_goes_on_when_it_is_back(
    app, client, gym, session, session_factory, idp
):
    batch_id = queue(client, gym, ["later@example.test"]).json["id"]
    idp.admin_status = 503
    assert work(app, session_factory) == {"batches": 1, "addresses": 0, "deferred": 1}
    assert read(client, gym, batch_id).json["done"] == 0
    idp.admin_status = None

    assert work(app, session_factory, now=NOW + MINUTE)["invited"] == 1
    assert invitations(session) == 1


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
    outcome: the address is tried again a minute later and ends invited exactly once."""
    batch_id = queue(client, gym, ["crash@example.test", "after@example.test"]).json["id"]
    crashed = []

    def crash_once(committing):
        outermost = not committing.in_nested_transaction()
        if outermost and not crashed and committing.new | committing.dirty:
            crashed.append(True)
            raise ConnectionError("the database went away")

    event.listen(session_factory, "before_commit", crash_once)
    try:
        assert work(app, session_factory)["deferred"] == 1
    finally:
        event.remove(session_factory, "before_commit", crash_once)
    assert (invitations(session), read(client, gym, batch_id).json["done"]) == (0, 0)

    work(app, session_factory, now=NOW + MINUTE)

    results = read(client, gym, batch_id).json["results"]
    assert [(r["email"], r["outcome"]) for r in results] == [
        ("crash@example.test", "invited"),
        ("after@example.test", "invited"),
    ]
    assert invitations(session, Invitation.email == "crash@example.test") == 1
    # The lost attempt sent no email (mail goes out after the invitation's commit, as for one
    # invite): no link names an invitation that was never stored.
    assert [m["To"] for m in read_mailbox(mailbox)].count("crash@example.test") == 1


def test_an_address_whose_transaction_always_fails_ends_failed_and_the_batch_goes_on(
    app, client, gym, session, session_factory
):
    """A poison address (its transaction fails every time) is given up after four tries, so
    it holds back neither its batch nor any other gym's."""
    batch_id = queue(client, gym, ["poison@example.test", "fine@example.test"]).json["id"]

    def poisoned(committing):
        for row in committing.dirty:
            last = row.results[-1] if isinstance(row, InvitationBatch) and row.results else {}
            if last.get("email") == "poison@example.test" and last["outcome"] == "invited":
                raise ConnectionError("a commit this address alone fails")

    event.listen(session_factory, "before_commit", poisoned)
    try:
        for at in (NOW, NOW + MINUTE, NOW + 6 * MINUTE):
            assert work(app, session_factory, now=at)["deferred"] == 1
        assert work(app, session_factory, now=NOW + 21 * MINUTE)["failed"] == 1
    finally:
        event.remove(session_factory, "before_commit", poisoned)
    results = read(client, gym, batch_id).json["results"]
    assert [(r["email"], r["outcome"]) for r in results] == [
        ("poison@example.test", "failed"),
        ("fine@example.test", "invited"),
    ]


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
    foreign = queued_by_owner(session, other, ["secret@example.test"])

    for batch_id in (foreign, uuid.uuid4()):
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


def test_gyms_take_turns_so_a_large_batch_holds_no_other_back(
    app, client, gym, session, session_factory, idp
):
    from tests import factories

    other = factories.make_gym(session, name="Small Gym", roles=[Role.owner], idp=None)
    session.commit()
    large = queue(client, gym, [f"l{i}@example.test" for i in range(6)]).json["id"]
    small = queued_by_owner(session, other, ["s0@example.test", "s1@example.test"])
    ticks = iter(range(100))

    work(app, session_factory, budget_seconds=4.5, monotonic=lambda: next(ticks))  # four turns

    assert read(client, gym, large).json["done"] == 2
    session.expire_all()
    assert len(session.get(InvitationBatch, small).results) == 2  # not behind the six


def test_a_gym_deleted_or_made_inactive_while_queued_invites_no_one(
    app, client, gym, session, session_factory, idp, mailbox
):
    from gymctl.models import Organization, OrganizationStatus

    batch_id = queue(client, gym, ["a@example.test", "b@example.test"]).json["id"]
    organization = session.get(Organization, gym.id)
    organization.status = OrganizationStatus.inactive
    session.commit()
    calls = idp.admin_requests

    work(app, session_factory)

    session.expire_all()
    batch = session.get(InvitationBatch, uuid.UUID(batch_id))
    assert [r["outcome"] for r in batch.results] == ["organization_not_found"] * 2
    assert (invitations(session), read_mailbox(mailbox), idp.admin_requests) == (0, [], calls)


@pytest.mark.parametrize("change", ["demoted", "account_deleted"])
def test_an_asker_demoted_or_whose_account_was_deleted_invites_no_one_more(
    app, client, gym, session, session_factory, idp, change
):
    batch_id = queue(client, gym, ["x@example.test"], by=Role.admin).json["id"]
    admin = gym[Role.admin]
    if change == "demoted":
        session.get(Membership, admin.membership.id).role = Role.member
    else:
        session.get(type(admin.user), admin.user.id).deleted_at = NOW
    session.commit()
    calls = idp.admin_requests

    work(app, session_factory)

    session.expire_all()
    batch = session.get(InvitationBatch, uuid.UUID(batch_id))
    assert [r["outcome"] for r in batch.results] == ["permission_denied"]
    assert (invitations(session), idp.admin_requests) == (0, calls)


def test_our_own_window_of_provider_invitations_spent_makes_the_rest_rate_limited(
    app, client, gym, session, session_factory, idp
):
    """The 100 provider invitations an hour (spec A 8) are counted by us too: once they are
    spent, the next address that needs one is rate_limited, and so is every one after it."""
    from gymctl import ratelimit
    from gymctl.providers.identity_admin import (
        INVITATION_KEY,
        INVITATION_WINDOW,
        INVITATIONS_PER_WINDOW,
    )

    for _ in range(INVITATIONS_PER_WINDOW):
        ratelimit.take(
            session,
            INVITATION_KEY,
            limit=INVITATIONS_PER_WINDOW,
            window=INVITATION_WINDOW,
            now=NOW - MINUTE,
        )
    session.commit()
    idp.add_account("user_known", "known@example.test", verified=True)
    batch_id = queue(client, gym, ["known@example.test", "new@example.test", "more@x.test"]).json[
        "id"
    ]
    calls = idp.admin_requests

    work(app, session_factory)

    outcomes = [r["outcome"] for r in read(client, gym, batch_id).json["results"]]
    # An account needs no provider invitation; the first address without one is refused.
    assert outcomes == ["invited", "rate_limited", "rate_limited"]
    assert idp.admin_requests == calls + 2  # the two lookups; no invitation, nothing after
    assert idp.invitations == []


def test_an_erasure_during_the_address_it_names_waits_for_it_and_scrubs_it(
    committed_pg, idp, settings, tmp_path
):
    """PostgreSQL, two transactions at once: the worker holds the batch while it invites a
    former member (a login; inviting writes their membership), and the owner erases that
    person meanwhile. Erasure takes the gym's batches first, so it waits for the address's
    commit and then scrubs the invitation too, where scrubbing before the batch lock missed
    the uncommitted invitation (and locking the membership first deadlocked)."""
    import threading
    import time

    from sqlalchemy.orm import sessionmaker

    from gymctl.access.invitations import Outreach
    from gymctl.clock import FixedClock
    from gymctl.db import get_engine
    from gymctl.providers.identity_admin import HttpIdentityAdmin
    from gymctl.providers.mail import MailboxMailer
    from tests import factories

    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    idp.add_account("user_former", "former@example.test", verified=True)
    with factory() as session:
        gym = factories.make_gym(session, name="Race Gym", roles=[Role.owner], idp=idp)
        former = factories.user(session, identity_id="user_former", email="former@example.test")
        factories.membership(
            session,
            user=former,
            organization=gym.organization,
            status=MembershipStatus.cancelled,
        )
        queued_by_owner(session, gym, ["former@example.test"])
        gym_id, owner_id, former_id = gym.id, gym[Role.owner].user.id, former.id
    clock = FixedClock(NOW)
    outreach = Outreach(
        settings,
        MailboxMailer(tmp_path / "mail", settings.mail_from, clock=clock),
        HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock),
    )
    idp.admin_delay = 1.0  # the worker holds the batch through its account lookup
    lookups = idp.admin_requests
    worker = threading.Thread(
        target=bulk_invitations.work_batches, args=(factory, outreach), kwargs={"now": NOW}
    )
    worker.start()
    deadline = time.monotonic() + 10
    while idp.admin_requests == lookups and time.monotonic() < deadline:
        time.sleep(0.01)
    assert idp.admin_requests > lookups  # the worker is inside the address

    with factory() as session:
        from gymctl.models import Organization

        erased = erase_personal_data(
            session,
            session.get(Organization, gym_id),
            former_id,
            actor_user_id=owner_id,
            now=NOW,
        )
        session.commit()
    worker.join(timeout=30)

    assert not worker.is_alive()
    assert erased["bulkInvites"] == 1
    assert erased["invitations"] == 1  # the worker's invitation, committed before the scrub
    with factory() as session:
        [invitation] = session.scalars(select(Invitation)).all()
        [batch] = session.scalars(select(InvitationBatch)).all()
        membership = session.scalar(select(Membership).where(Membership.user_id == former_id))
    assert invitation.email.endswith("@erased.invalid")
    assert [r["outcome"] for r in batch.results] == ["invited"]
    assert batch.results[0]["email"].endswith("@erased.invalid")
    # Erasure read the membership again after the address's commit: the invitation had made
    # it pending_invitation, and the erasure ends it.
    assert membership.status is MembershipStatus.cancelled
