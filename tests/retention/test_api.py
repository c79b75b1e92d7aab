"""The HTTP doors (spec B 4.3, 4.4, 5, 7): notices, presale withdrawal, plan change, retention
cases, and the operator test hooks (non-production, x-test-seed-secret)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import SecretStr
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from gymctl.config import Settings
from gymctl.models import AuditLog, CancellationNotice, Checkout, Role, Subscription
from gymctl.models.billing import CheckoutStatus, PlanType, SubscriptionStatus
from gymctl.providers.mail import MailboxMailer, MailError, read_mailbox
from gymctl.retention.presales import presale_cases_pass
from gymctl.tasks import file_task
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.billing.factories import TEST_KEY
from tests.conftest import NOW
from webhooks.app import create_app

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

SEED = "seed-secret-for-tests"
HOOK = {"x-test-seed-secret": SEED}


@pytest.fixture
def app(settings, session_factory, clock, mailbox, card_server):
    settings = settings.model_copy(
        update={"billing_encryption_key": SecretStr(TEST_KEY), "test_seed_secret": SecretStr(SEED)}
    )
    return create_app(
        settings,
        session_factory=session_factory,
        clock=clock,
        mailer=MailboxMailer(mailbox, settings.mail_from, clock=clock),
        card_provider=card_server.provider(),
    )


gym = access.gym  # the access tests' gym (one person per role, real tokens) over this folder's


@pytest.fixture
def subscription(session, gym):
    """The member's running plan, committed for the app's own connection."""
    row = bf.make_subscription(session, gym)
    session.commit()
    return row


def _sub_url(gym, subscription, suffix=""):
    return f"/organizations/{gym.id}/subscriptions/{subscription.id}{suffix}"


def test_a_member_gives_and_withdraws_notice_and_sees_the_actions(client, gym, subscription):
    member = gym[Role.member].headers
    listed = client.get(f"/organizations/{gym.id}/me/subscriptions", headers=member)
    assert listed.json["data"][0]["memberActions"] == ["give_notice"]
    given = client.post(_sub_url(gym, subscription, "/notice"), json={}, headers=member)
    assert given.status_code == 200, given.json
    data = given.json["data"]
    assert data["subscription"]["cancelAtPeriodEnd"] is True
    assert data["subscription"]["memberActions"] == ["withdraw_notice"]
    assert data["case"]["slaDueAt"] == (NOW + timedelta(hours=48)).isoformat()
    withdrawn = client.delete(_sub_url(gym, subscription, "/notice"), headers=member)
    assert withdrawn.status_code == 200
    assert withdrawn.json["data"]["retentionOutcome"] == "saved_member_withdrew"


def test_staff_give_notice_for_a_member_and_need_a_reason(client, session, gym, subscription):
    owner = gym[Role.owner].headers
    refused = client.post(_sub_url(gym, subscription, "/notice"), json={}, headers=owner)
    assert (refused.status_code, refused.json["code"]) == (422, "notice_reason_required")
    given = client.post(
        _sub_url(gym, subscription, "/notice"),
        json={"reasonCode": "price", "reasonText": "too expensive"},
        headers=owner,
    )
    assert given.status_code == 200
    notice = session.scalar(select(CancellationNotice))
    assert (notice.initiator, notice.given_by_user_id) == ("staff", gym[Role.owner].user.id)


@pytest.mark.parametrize("effective", ["1900000000", " 1900000000 ", "1900000000.5", "2027"])
def test_an_instant_given_as_a_number_in_a_string_is_refused_not_read_as_unix_time(
    client, session, gym, subscription, effective
):
    """The document says an ISO 8601 date-time; pydantic read a string of digits as seconds
    since 1970 even in strict mode, so staff's notice was given for a date they never wrote
    (found by a randomized contract run: schema-violating, answered 200)."""
    before = snapshot(session)
    refused = client.post(
        _sub_url(gym, subscription, "/notice"),
        json={"reasonCode": "price", "effectiveAt": effective},
        headers=gym[Role.owner].headers,
    )
    assert (refused.status_code, refused.json["code"]) == (400, "invalid_body"), refused.json
    assert [f["field"] for f in refused.json["fields"]] == ["effectiveAt"]
    assert snapshot(session) == before


def test_another_members_subscription_is_404_to_a_member_and_a_coach(
    client,
    session,
    gym,
):
    subscription = bf.make_subscription(session, gym, membership=gym[Role.admin].membership)
    session.commit()
    for role in (Role.member, Role.coach):
        answer = client.post(
            _sub_url(gym, subscription, "/notice"), json={}, headers=gym[role].headers
        )
        assert (answer.status_code, answer.json["code"]) == (404, "subscription_not_found")


def test_externally_billed_withdrawal_is_refused_with_the_localized_message(
    client, session, gym, subscription
):
    member = gym[Role.member].headers
    client.post(_sub_url(gym, subscription, "/notice"), json={}, headers=member)
    client.put(
        f"/organizations/{gym.id}/payments/provider",
        json={"provider": "external"},
        headers=gym[Role.owner].headers,
    )
    before = snapshot(session)
    refused = client.delete(
        _sub_url(gym, subscription, "/notice"), headers={**member, "X-Locale": "es"}
    )
    assert (refused.status_code, refused.json["code"]) == (409, "externally_billed")
    assert refused.json["message"].startswith("Este gimnasio")
    assert snapshot(session) == before


def test_a_member_withdraws_a_presale_and_the_owner_gets_the_email(
    client,
    session,
    gym,
    mailbox,
):
    subscription = bf.make_subscription(session, gym, presale_opening=NOW + timedelta(days=10))
    session.commit()
    answer = client.post(
        _sub_url(gym, subscription, "/withdraw-presale"), headers=gym[Role.member].headers
    )
    assert answer.status_code == 200
    assert answer.json["data"]["case"]["kind"] == "presale_withdrawal"
    assert answer.json["data"]["subscription"]["status"] == "cancelled"
    [email] = read_mailbox(mailbox)
    assert email["To"] == gym[Role.owner].user.email


def test_a_presale_withdrawal_is_committed_before_its_email(
    client, session, session_factory, gym, engine, mailbox, clock, monkeypatch
):
    """The owner's email waited on the mail server (10 s timeout) with the subscription's and
    the plan's rows locked, every buyer of the plan queued behind it. The withdrawal is
    committed first; the email follows, and one the server refused is the presale cases
    pass's to retry."""
    subscription = bf.make_subscription(session, gym, presale_opening=NOW + timedelta(days=10))
    session.commit()
    seen: list[str] = []

    def statement(conn, cursor, text, *_):
        if text.lstrip().upper().startswith(("UPDATE SUBSCRIPTIONS", "UPDATE PLANS")):
            seen.append("write")

    def committed(_session):
        seen.append("commit")

    def send(self, email):
        seen.append("mail")
        raise MailError("the mail server is down")

    monkeypatch.setattr(MailboxMailer, "send", send)
    event.listen(engine, "before_cursor_execute", statement)
    event.listen(Session, "after_commit", committed)
    try:
        answer = client.post(
            _sub_url(gym, subscription, "/withdraw-presale"), headers=gym[Role.member].headers
        )
    finally:
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(Session, "after_commit", committed)
    assert answer.status_code == 200
    before_mail = seen[: seen.index("mail")]
    last_write = max(i for i, step in enumerate(before_mail) if step == "write")
    assert "commit" in before_mail[last_write:]
    assert answer.json["data"]["case"]["kind"] == "presale_withdrawal"
    session.expire_all()
    assert session.get(Subscription, subscription.id).status == SubscriptionStatus.cancelled
    monkeypatch.undo()  # the mail server is back: the presale cases pass sends it
    mailer = MailboxMailer(mailbox, "gym <no-reply@gym.example>", clock=clock)
    assert presale_cases_pass(session_factory, mailer, now=NOW) == {"opened": 0, "notified": 1}
    [email] = read_mailbox(mailbox)
    assert email["To"] == gym[Role.owner].user.email


def test_plan_change_of_a_grouped_presale(client, session, gym):
    founders = bf.make_plan(session, gym.organization, name="Founders", plan_group="launch")
    yearly = bf.make_plan(
        session,
        gym.organization,
        name="Founders yearly",
        plan_group="launch",
        price_in_cents=99000,
        interval_months=12,
    )
    other = bf.make_plan(session, gym.organization, name="Regular", plan_group="regular")
    subscription = bf.make_subscription(
        session, gym, plan=founders, presale_opening=NOW + timedelta(days=10)
    )
    session.commit()
    member = gym[Role.member].headers
    [row] = client.get(f"/organizations/{gym.id}/me/subscriptions", headers=member).json["data"]
    assert row["memberActions"] == ["withdraw_presale", "change_plan"]
    targets = client.get(_sub_url(gym, subscription, "/plan-change-targets"), headers=member)
    assert [plan["id"] for plan in targets.json["data"]] == [str(yearly.id)]

    before = snapshot(session)
    refused = client.post(
        _sub_url(gym, subscription, "/change-plan"),
        json={"planId": str(other.id)},
        headers={**member, "X-Locale": "he"},
    )
    assert (refused.status_code, refused.json["code"]) == (409, "presale_swap_requires_same_group")
    assert refused.json["message"] == "אפשר לעבור רק למנוי אחר מאותה קבוצת מנויים."
    assert snapshot(session) == before

    bf.make_checkout(session, subscription)
    session.commit()
    before = snapshot(session)
    busy = client.post(
        _sub_url(gym, subscription, "/change-plan"), json={"planId": str(yearly.id)}, headers=member
    )
    assert (busy.status_code, busy.json["code"]) == (409, "plan_change_charge_in_flight")
    assert busy.json["message"].startswith("A payment for this plan")
    assert snapshot(session) == before

    session.execute(Checkout.__table__.update().values(status=CheckoutStatus.abandoned.value))
    session.commit()
    changed = client.post(
        _sub_url(gym, subscription, "/change-plan"), json={"planId": str(yearly.id)}, headers=member
    )
    assert changed.status_code == 200, changed.json
    assert (changed.json["data"]["planId"], changed.json["data"]["priceInCents"]) == (
        str(yearly.id),
        99000,
    )
    assert session.scalar(
        select(AuditLog.data).where(AuditLog.action == "subscription.plan_changed")
    ) == {"fromPlanId": str(founders.id), "toPlanId": str(yearly.id), "presale": True}


def test_change_plan_is_offered_only_for_a_grouped_scheduled_presale(
    client,
    session,
    gym,
):
    lonely = bf.make_plan(session, gym.organization, name="Solo")
    bf.make_subscription(session, gym, plan=lonely, presale_opening=NOW + timedelta(days=3))
    grouped = bf.make_plan(session, gym.organization, name="A", plan_group="g")
    bf.make_plan(session, gym.organization, name="B", plan_group="g")
    running = bf.make_subscription(session, gym, plan=grouped)
    session.commit()
    rows = client.get(
        f"/organizations/{gym.id}/me/subscriptions", headers=gym[Role.member].headers
    ).json["data"]
    assert all("change_plan" not in row["memberActions"] for row in rows)
    refused = client.post(
        _sub_url(gym, running, "/change-plan"),
        json={"planId": str(grouped.id)},
        headers=gym[Role.member].headers,
    )
    assert (refused.status_code, refused.json["code"]) == (409, "plan_change_unavailable")


def test_staff_work_a_case_contact_and_outcome(client, gym, subscription):
    case = client.post(
        _sub_url(gym, subscription, "/notice"), json={}, headers=gym[Role.member].headers
    ).json["data"]["case"]
    admin = gym[Role.admin].headers
    base = f"/organizations/{gym.id}/retention/cases"
    assert [c["id"] for c in client.get(base, headers=admin).json["data"]] == [case["id"]]
    logged = client.post(
        f"{base}/{case['id']}/contacts", json={"channel": "phone", "note": "called"}, headers=admin
    )
    assert logged.status_code == 201
    assert logged.json["data"]["contacts"][0]["channel"] == "phone"
    saved = client.post(
        f"{base}/{case['id']}/outcome", json={"outcome": "saved_offer"}, headers=admin
    )
    assert saved.json["data"]["outcome"] == "saved_offer"
    coach = client.get(base, headers=gym[Role.coach].headers)
    assert (coach.status_code, coach.json["code"]) == (403, "permission_denied")


# --- operator test hooks -------------------------------------------------------------------


def test_each_hook_runs_its_sweep_and_a_second_run_finds_nothing(
    client,
    session,
    gym,
    mailbox,
):
    subscription = bf.make_subscription(session, gym, PlanType.cash, current_period_end=NOW)
    client.post(_sub_url(gym, subscription, "/notice"), json={}, headers=gym[Role.member].headers)
    file_task(
        session,
        organization_id=gym.organization.id,
        kind="manual_refund",
        subject_type="subscription",
        subject_id="old",
        title="Refund",
        priority="high",
        due_at=NOW - timedelta(days=1),
        now=NOW - timedelta(days=4),
    )
    session.commit()
    expected = {
        "/testing/trigger-retention-escalation": (
            {"checked": 1, "escalated": 1},
            {"checked": 1, "escalated": 0},
        ),
        "/testing/trigger-retention-digest": (
            {"orgsChecked": 1, "sent": 1},
            {"orgsChecked": 1, "sent": 0},
        ),
    }
    for path, (first, second) in expected.items():
        assert client.post(path, headers=HOOK).json == first
        assert client.post(path, headers=HOOK).json == second
    swept = client.post("/testing/trigger-cancellation-sweep", headers=HOOK)
    assert swept.json == {"cancelled": [str(subscription.id)]}
    assert client.post("/testing/trigger-cancellation-sweep", headers=HOOK).json == {
        "cancelled": []
    }
    bumped = client.post("/testing/trigger-refund-task-sweep", headers=HOOK).json["bumped"]
    assert len(bumped) == 1
    assert client.post("/testing/trigger-refund-task-sweep", headers=HOOK).json == {"bumped": []}
    session.expire_all()
    assert session.get(Subscription, subscription.id).status == SubscriptionStatus.cancelled


def test_a_hook_without_the_right_secret_is_refused(client):
    answer = client.post("/testing/trigger-retention-digest", headers={"x-test-seed-secret": "no"})
    assert (answer.status_code, answer.json["code"]) == (403, "test_seed_secret_invalid")
    assert client.post("/testing/trigger-retention-digest").status_code == 403


def test_hooks_are_off_without_a_configured_secret(settings, session_factory, clock):
    app = create_app(settings, session_factory=session_factory, clock=clock)
    answer = app.test_client().post("/testing/trigger-cancellation-sweep", headers=HOOK)
    assert answer.status_code == 404


def test_in_production_the_hook_routes_do_not_exist_whatever_the_header(
    settings, session_factory, clock
):
    production = Settings(
        GYMCTL_ENV="production",
        GYMCTL_DATABASE_URL="postgresql+psycopg://unused@127.0.0.1/none",
        IDENTITY_JWT_KEY=settings.identity_jwt_key.get_secret_value(),
        IDENTITY_WEBHOOK_SECRET="whsec_c2VjcmV0",
        IDENTITY_PUBLISHABLE_KEY="pk_live_Y2xlcmsuZ3ltLmV4YW1wbGUk",  # clerk.gym.example$
        INVITE_SECRET="i" * 40,
        GYMCTL_BILLING_ENCRYPTION_KEY=TEST_KEY,
        TEST_SEED_SECRET=SEED,
        GYMCTL_SMTP_URL="smtp://127.0.0.1:2525",
        GYMCTL_CARD_PROVIDER_URL="http://127.0.0.1:9/api",
        GYMCTL_STORAGE_SIGNING_SECRET="s" * 40,
    )
    app = create_app(production, session_factory=session_factory, clock=clock)
    assert not any(rule.rule.startswith("/testing") for rule in app.url_map.iter_rules())
    answer = app.test_client().post("/testing/trigger-retention-escalation", headers=HOOK)
    assert answer.status_code == 404
