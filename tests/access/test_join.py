"""Join links (spec A 2.9, 4, 5.3): eligibility, the minisite's link, the join form, failed
checkouts and joining signed in. Every refusal leaves the database as it was, except the audited
join.blocked, which keeps its own record."""

from __future__ import annotations

import uuid
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from gymctl.access import tickets
from gymctl.access.join import PAYMENT_FOLLOW_UP_DUE, minisite_join_link
from gymctl.models import (
    AuditLog,
    JoinLink,
    JoinSubmission,
    Membership,
    MembershipStatus,
    Organization,
    OrganizationStatus,
    Role,
    Task,
)
from gymctl.providers.identity_admin import HttpIdentityAdmin
from tests import factories
from tests.access.conftest import signed_in, snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

UA = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) Version/17.1 Mobile/1 Safari/6"
# The client sent the first hop (anyone can); the trusted load balancer appended the last.
FROM = {"X-Forwarded-For": "198.51.100.66, 203.0.113.9", "User-Agent": UA}

# Session sightings are tracking written beside a request, not a change the request makes.


def changed(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, int]:
    """Tables that differ, with the change in their row count."""
    return {
        name: len(after[name]) - len(before[name]) for name in before if before[name] != after[name]
    }


def make_link(
    session: Session,
    organization: Organization,
    *,
    plan_id: uuid.UUID | None = None,
    active: bool = True,
    revoked: bool = False,
    created_at=NOW,
) -> JoinLink:
    link = JoinLink(
        organization_id=organization.id,
        token=uuid.uuid4().hex,
        plan_id=plan_id,
        active=active,
        revoked_at=NOW if revoked else None,
        created_at=created_at,
    )
    session.add(link)
    session.flush()
    return link


@pytest.fixture
def link(session, gym) -> JoinLink:
    row = make_link(session, gym.organization)
    session.commit()
    return row


def submissions(session: Session, link: JoinLink) -> list[JoinSubmission]:
    session.expire_all()
    return list(
        session.scalars(
            select(JoinSubmission)
            .where(JoinSubmission.join_link_id == link.id)
            .order_by(JoinSubmission.created_at, JoinSubmission.id)
        )
    )


# --- eligibility -----------------------------------------------------------------------------


def test_an_eligible_link_answers_its_organization(client, gym, link):
    response = client.get(f"/join/{link.token}")

    assert response.status_code == 200
    assert response.json == {
        "organization": {
            "id": str(gym.id),
            "name": "Iron Temple",
            "slug": gym.organization.slug,
        },
        "planId": None,
    }


def _unknown_token(session, organization):
    make_link(session, organization)
    return "no-such-token"


def _revoked_link(session, organization):
    return make_link(session, organization, revoked=True).token  # still flagged active


def _inactive_link(session, organization):
    return make_link(session, organization, active=False).token


def _joining_switched_off(session, organization):
    organization.join_enabled = False
    return make_link(session, organization).token


def _deleted_organization(session, organization):
    organization.deleted_at = NOW - timedelta(days=1)
    return make_link(session, organization).token


def _inactive_organization(session, organization):
    organization.status = OrganizationStatus.inactive
    return make_link(session, organization).token


INELIGIBLE = [
    _unknown_token,
    _revoked_link,
    _inactive_link,
    _joining_switched_off,
    _deleted_organization,
    _inactive_organization,
]
CALLS = {
    "show": ("get", "", None),
    "request_invite": ("post", "/request-invite", {"email": "new.person@example.test"}),
    "checkout_failed": ("post", "/checkout-failed", {"email": "new.person@example.test"}),
    "join_signed_in": ("post", "/join", None),
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("make_ineligible", INELIGIBLE, ids=lambda f: f.__name__.strip("_"))
def test_an_ineligible_link_answers_404_join_link_not_found_and_writes_nothing(
    client, session, gym, outsider, make_ineligible, call
):
    token = make_ineligible(session, gym.organization)
    session.commit()
    before = snapshot(session)
    method, suffix, body = CALLS[call]

    response = getattr(client, method)(
        f"/join/{token}{suffix}", json=body, headers={**outsider.headers, **FROM}
    )

    assert (response.status_code, response.json["code"]) == (404, "join_link_not_found")
    assert snapshot(session) == before


def test_a_link_with_a_stored_plan_answers_with_its_plan(client, session, gym):
    from gymctl.models.billing import PlanType
    from tests.billing.factories import make_plan

    plan_id = make_plan(session, gym.organization, PlanType.card).id
    link = make_link(session, gym.organization, plan_id=plan_id)
    session.commit()

    response = client.get(f"/join/{link.token}")

    assert response.status_code == 200
    assert response.json["planId"] == str(plan_id)


# --- the minisite's link ---------------------------------------------------------------------


def test_the_minisite_advertises_only_an_active_unrevoked_link_without_a_plan(session, gym):
    organization = gym.organization
    make_link(session, organization, plan_id=uuid.uuid4(), created_at=NOW - timedelta(days=4))
    make_link(session, organization, revoked=True, created_at=NOW - timedelta(days=3))
    make_link(session, organization, active=False, created_at=NOW - timedelta(days=2))
    plain = make_link(session, organization, created_at=NOW - timedelta(days=1))

    assert minisite_join_link(session, organization) == plain


def test_the_minisite_has_no_link_when_every_live_link_stores_a_plan(session, gym):
    make_link(session, gym.organization, plan_id=uuid.uuid4())
    make_link(session, gym.organization, plan_id=uuid.uuid4())

    assert minisite_join_link(session, gym.organization) is None


def test_the_minisite_has_no_link_when_joining_is_switched_off(session, gym):
    make_link(session, gym.organization)
    gym.organization.join_enabled = False
    session.flush()

    assert minisite_join_link(session, gym.organization) is None


def test_the_minisite_never_advertises_another_gyms_link(session, gym):
    other = factories.organization(session)
    make_link(session, other)

    assert minisite_join_link(session, gym.organization) is None


# --- the join form ---------------------------------------------------------------------------


def test_the_join_form_counts_and_commits_before_the_providers_lookup(
    client, engine, link, idp, monkeypatch
):
    """The form's counters are one row per window, per link and per gym: counted in the
    request's transaction and held through the identity provider's lookup (5 s timeout), they
    queued every visitor of the gym behind it. The count is committed first."""
    seen: list[str] = []
    lookup = HttpIdentityAdmin.find_account

    def looked_up(self, email, keys):
        seen.append("lookup")
        return lookup(self, email, keys)

    def statement(conn, cursor, text, *_):
        if text.lstrip().upper().startswith("INSERT INTO RATE_WINDOWS"):
            seen.append("count")

    def committed(_session):
        seen.append("commit")

    monkeypatch.setattr(HttpIdentityAdmin, "find_account", looked_up)
    event.listen(engine, "before_cursor_execute", statement)
    event.listen(Session, "after_commit", committed)
    try:
        response = client.post(
            f"/join/{link.token}/request-invite", json={"email": "queued@example.test"}
        )
    finally:
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(Session, "after_commit", committed)
    assert response.status_code == 201
    before = seen[: seen.index("lookup")]
    assert before.count("count") == 2  # the link's and the gym's
    assert "commit" in before[max(i for i, step in enumerate(before) if step == "count") :]


def test_a_new_address_gets_a_sign_up_ticket_and_a_ticket_issued_submission(
    client, session, settings, gym, link, idp
):
    before = snapshot(session)

    response = client.post(
        f"/join/{link.token}/request-invite",
        json={"email": "new.person@Example.TEST"},
        headers=FROM,
    )

    assert response.status_code == 201
    url = urlsplit(response.json["signUpUrl"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == "https://app.example.test/sign-up"
    query = parse_qs(url.query)
    assert query["status"] == ["join"]
    ticket = tickets.verify(settings, tickets.JOIN, query["__identity_ticket"][0], now=NOW)
    assert ticket.subject == str(link.id)
    assert ticket.claims["email"] == "new.person@example.test"
    assert ticket.claims["org"] == str(gym.id)
    assert response.json["expiresAt"] == (NOW + timedelta(days=2)).isoformat()
    [submission] = submissions(session, link)
    assert (submission.outcome, submission.email) == ("ticket_issued", "new.person@example.test")
    assert (submission.ip, submission.user_agent) == ("203.0.113.9", UA)
    assert changed(before, snapshot(session)) == {"join_submissions": 1}
    assert idp.invitations == []


def test_a_gym_created_profile_without_a_login_is_not_an_account(client, session, gym, link):
    factories.user(session, identity_id=None, email="desk.person@example.test")
    session.commit()

    response = client.post(
        f"/join/{link.token}/request-invite", json={"email": "desk.person@example.test"}
    )

    assert response.status_code == 201
    assert "__identity_ticket=" in response.json["signUpUrl"]


def _linked_row(session, idp):
    signed_in(idp, session, identity_id="user_linked", email="linked.person@example.test")
    return "Linked.Person@EXAMPLE.test"


def _provider_only_account(session, idp):
    idp.add_account("user_elsewhere", "provider.only@example.test", verified=False)
    return "provider.only@example.test"


@pytest.mark.parametrize("make_account", [_linked_row, _provider_only_account])
def test_an_address_with_an_account_is_blocked_and_only_the_audit_trail_is_kept(
    client, session, gym, link, idp, make_account
):
    email = make_account(session, idp)
    session.commit()
    before = snapshot(session)

    response = client.post(
        f"/join/{link.token}/request-invite", json={"email": email}, headers=FROM
    )

    assert response.status_code == 409
    assert response.json["code"] == "account_exists"
    assert response.json["reason"] == "account_exists"
    assert "signUpUrl" not in response.json
    # Committed despite the refusal: the audit record, its outbox event and the submission.
    assert changed(before, snapshot(session)) == {
        "audit_log": 1,
        "outbox_events": 1,
        "join_submissions": 1,
    }
    [audit] = session.scalars(select(AuditLog).where(AuditLog.action == "join.blocked"))
    assert audit.data["reason"] == "account_exists"
    assert (audit.organization_id, audit.target_id) == (gym.id, str(link.id))
    [submission] = submissions(session, link)
    assert submission.outcome == "blocked_account_exists"
    assert (submission.ip, submission.user_agent) == ("203.0.113.9", UA)
    assert idp.invitations == []


def test_no_ticket_is_issued_when_the_provider_cannot_say_whether_an_account_exists(
    client, session, gym, link, idp
):
    idp.down = True
    before = snapshot(session)

    response = client.post(
        f"/join/{link.token}/request-invite", json={"email": "new.person@example.test"}
    )

    assert response.status_code == 502
    assert response.json["code"] == "identity_provider_error"
    assert "signUpUrl" not in response.json
    assert snapshot(session) == before


@pytest.mark.parametrize(
    "email",
    [
        "not an address",
        "\u202ea@b.co",  # RIGHT-TO-LEFT OVERRIDE: displays as another address
        "ann\u200d@example.test",  # ZERO WIDTH JOINER
        "ann@exam\u200bple.test",  # ZERO WIDTH SPACE
        "\ufeffann@example.test",  # a BOM
        "ann@example.test\u2066",  # LEFT-TO-RIGHT ISOLATE
        "ann@example.test,eve@evil.test",  # two recipients in the To header
        "ann@example.test;eve@evil.test",
        "ann@@example.test",
        '"ann"@example.test',  # a quoted local part: no form produces one
        "ann..lee@example.test",
        "ann@example..test",
        # 205 characters as typed, 405 once the domain is lower-cased ('\u0130' is 'i' and a
        # combining dot): it overflowed the 320-character column on PostgreSQL (a 500).
        "a@" + "\u0130" * 200 + ".xx",
    ],
    ids=[
        "no-at",
        "rlo",
        "zwj",
        "zwsp",
        "bom",
        "lri",
        "comma",
        "semicolon",
        "two-ats",
        "quoted",
        "double-dot-local",
        "double-dot-domain",
        "longer-once-lower-cased",
    ],
)
def test_an_invalid_address_is_refused_422_and_writes_nothing(client, session, gym, link, email):
    before = snapshot(session)

    response = client.post(f"/join/{link.token}/request-invite", json={"email": email})

    assert (response.status_code, response.json["code"]) == (422, "email_invalid")
    assert snapshot(session) == before


# --- failed checkouts ------------------------------------------------------------------------


def _follow_ups(session: Session, gym) -> list[Task]:
    session.expire_all()
    return list(
        session.scalars(
            select(Task).where(Task.organization_id == gym.id, Task.kind == "payment_follow_up")
        )
    )


def test_a_failed_checkout_records_a_submission_and_files_an_urgent_follow_up_due_in_4_hours(
    client, session, gym, link
):
    response = client.post(
        f"/join/{link.token}/checkout-failed",
        json={"email": "payer@example.test", "reason": "card_declined"},
        headers=FROM,
    )

    assert response.status_code == 202
    [task] = _follow_ups(session, gym)
    assert response.json == {"recorded": True, "taskId": str(task.id)}
    assert (task.priority, task.status) == ("urgent", "open")
    assert task.due_at == NOW + timedelta(hours=4) == NOW + PAYMENT_FOLLOW_UP_DUE
    assert task.data == {"joinLinkId": str(link.id), "email": "payer@example.test"}
    [submission] = submissions(session, link)
    assert (submission.outcome, submission.email) == ("checkout_failed", "payer@example.test")
    assert submission.data == {"reason": "card_declined"}
    assert (submission.ip, submission.user_agent) == ("203.0.113.9", UA)


def test_a_repeated_failure_for_the_same_link_and_address_refreshes_the_one_task(
    client, session, clock, gym, link
):
    first = client.post(f"/join/{link.token}/checkout-failed", json={"email": "payer@example.test"})
    [task] = _follow_ups(session, gym)
    task.status = "done"  # staff closed it; a new failure must reopen it
    session.commit()
    later = NOW + timedelta(hours=1)
    clock.set(later)

    second = client.post(
        f"/join/{link.token}/checkout-failed",
        json={"email": "Payer@EXAMPLE.test", "reason": "again"},
    )

    assert (first.status_code, second.status_code) == (202, 202)
    assert first.json["taskId"] == second.json["taskId"]
    [task] = _follow_ups(session, gym)
    assert (task.status, task.priority, task.detail) == ("open", "urgent", "again")
    assert task.due_at == later + PAYMENT_FOLLOW_UP_DUE
    assert [s.outcome for s in submissions(session, link)] == ["checkout_failed"] * 2


def test_failures_for_different_addresses_file_separate_tasks(client, session, gym, link):
    for email in ("one@example.test", "two@example.test"):
        assert (
            client.post(f"/join/{link.token}/checkout-failed", json={"email": email}).status_code
            == 202
        )

    assert len(_follow_ups(session, gym)) == 2


# --- joining signed in -----------------------------------------------------------------------


def _membership(session: Session, gym, user) -> Membership | None:
    session.expire_all()
    return session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id, Membership.user_id == user.id
        )
    )


def test_joining_signed_in_makes_an_active_member_and_a_second_call_changes_nothing(
    client, session, gym, link, outsider
):
    first = client.post(f"/join/{link.token}/join", headers={**outsider.headers, **FROM})

    assert first.status_code == 201
    assert first.json == {
        "organizationId": str(gym.id),
        "role": "member",
        "status": "active",
        "joined": True,
    }
    membership = _membership(session, gym, outsider.user)
    assert (membership.role, membership.status) == (Role.member, MembershipStatus.active)
    [submission] = submissions(session, link)
    assert (submission.outcome, submission.user_id) == ("joined", outsider.user.id)
    assert (
        session.scalar(
            select(func.count()).select_from(AuditLog).where(AuditLog.action == "membership.joined")
        )
        == 1
    )
    before = snapshot(session)

    again = client.post(f"/join/{link.token}/join", headers=outsider.headers)

    assert again.status_code == 200
    assert again.json["joined"] is False
    assert snapshot(session) == before


def test_a_held_invitation_answers_403_invitation_held_and_changes_nothing(
    client, session, idp, gym, link
):
    person = signed_in(
        idp, session, identity_id="user_held", email="held@example.test", verified=False
    )
    factories.membership(
        session,
        user=person.user,
        organization=gym.organization,
        role=Role.coach,
        status=MembershipStatus.pending_invitation,
        invitation_held=True,
    )
    session.commit()
    before = snapshot(session)

    response = client.post(f"/join/{link.token}/join", headers=person.headers)

    assert (response.status_code, response.json["code"]) == (403, "INVITATION_HELD")
    assert snapshot(session) == before


def test_joining_without_a_token_is_401_and_changes_nothing(client, session, gym, link):
    before = snapshot(session)

    response = client.post(f"/join/{link.token}/join")

    assert response.status_code == 401
    assert response.json["code"] == "authorization_missing"
    assert snapshot(session) == before


def test_a_removed_staff_member_rejoining_through_a_link_comes_back_as_a_member(
    client, session, gym, link
):
    admin = gym[Role.admin]
    admin.membership.status = MembershipStatus.cancelled
    session.commit()

    response = client.post(f"/join/{link.token}/join", headers=admin.headers)

    assert response.status_code == 201
    assert (response.json["role"], response.json["status"]) == ("member", "active")
    membership = _membership(session, gym, admin.user)
    assert (membership.role, membership.status) == (Role.member, MembershipStatus.active)


def test_a_suspended_member_cannot_lift_the_suspension_through_a_join_link(
    client, session, gym, link
):
    member = gym[Role.member]
    member.membership.status = MembershipStatus.suspended
    session.commit()
    before = snapshot(session)

    response = client.post(f"/join/{link.token}/join", headers=member.headers)

    assert (response.status_code, response.json["code"]) == (403, "membership_suspended")
    assert snapshot(session) == before
