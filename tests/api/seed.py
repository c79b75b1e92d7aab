"""Seeded gyms for the route x role suites (the permission matrix, cross-tenant probes).

A `Tenant` is an organization with one signed-in person per role and the objects the
organization routes act on, created through the API where it can (so they are in the state a
real gym has) and as rows where the API has no door. `CALLS` says, per route, how a caller of
a given role reaches that route's success answer: real ids of the tenant, a valid body.
"""

from __future__ import annotations

import io
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from PIL import Image
from sqlalchemy import select

from gymctl.models import Organization, Role
from gymctl.models.billing import PlanType
from gymctl.models.organizations import Tier
from tests import factories
from tests.access.conftest import Person, signed_in
from tests.billing import factories as bf
from tests.conftest import NOW

ORG_PREFIX = "/organizations/<uuid:org_id>"
CLASS_STARTS = NOW + timedelta(days=2)  # the seeded class every role is booked in


@dataclass
class Tenant:
    """One organization, a person per role, and the ids of what was seeded in it."""

    organization_id: uuid.UUID
    people: dict[Role, Person]
    ids: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> uuid.UUID:
        return self.organization_id

    def __getitem__(self, role: Role) -> Person:
        return self.people[role]

    def url(self, suffix: str) -> str:
        return f"/organizations/{self.organization_id}{suffix}"


def make_tenant(session, idp, *, name: str, tag: str) -> Tenant:
    organization = factories.organization(session, name=name)
    people = {}
    for role in Role:
        person = signed_in(
            idp, session, identity_id=f"user_{tag}_{role.value}", email=f"{role.value}@{tag}.test"
        )
        person.membership = factories.membership(
            session, user=person.user, organization=organization, role=role
        )
        people[role] = person
    session.commit()
    return Tenant(organization.id, people)


def png(size=(800, 400)) -> bytes:
    """A transparent PNG with an opaque block in the middle (a valid logo or wordmark)."""
    width, height = size
    image = Image.new("RGBA", size, (0, 0, 0, 0))
    image.paste((10, 80, 200, 255), (width // 4, height // 4, width * 3 // 4, height * 3 // 4))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _ok(response, *statuses: int) -> dict:
    assert response.status_code in (statuses or (200, 201)), (
        response.request.path,
        response.status_code,
        response.get_json(silent=True),
    )
    body = response.get_json(silent=True) or {}
    return body.get("data", body) if isinstance(body, dict) else body


def seed(client, session, tenant: Tenant, card_server=None, bridge=None) -> Tenant:
    """Everything the organization routes act on, made by the gym's owner through the API."""
    owner = tenant[Role.owner].headers
    ids = tenant.ids

    def post(suffix, body=None, **kwargs):
        return _ok(client.post(tenant.url(suffix), json=body, headers=owner, **kwargs))

    # People the staff act on: a member of the roster besides the role holders.
    target = post("/members", {"email": f"target@{tenant.id}.test", "name": "Tara Target"})
    ids["target_user"] = target["userId"]
    ids["invitation"] = post(
        "/invitations", {"email": f"invitee@{tenant.id}.test", "role": "member"}
    )["id"]
    ids["member_import"] = _ok(
        client.post(
            tenant.url("/members/import"),
            data=f"email,name\nroster@{tenant.id}.test,Ro Ster\n",
            headers={**owner, "Content-Type": "text/csv"},
        ),
        202,
    )["id"]
    ids["invitation_batch"] = _ok(
        client.post(
            tenant.url("/invitations/bulk"),
            json={"emails": [f"bulk@{tenant.id}.test"], "role": "member"},
            headers=owner,
        ),
        202,
    )["id"]
    ids["lead"] = post("/leads", {"name": "Lee Lead", "email": f"lead@{tenant.id}.test"})["id"]
    ids["join_link"] = post("/join-links", {"label": "Front desk"})["id"]
    ids["paused_link"] = post("/join-links", {"label": "Paused"})["id"]
    post(f"/join-links/{ids['paused_link']}/pause")
    ids["grant"] = post(
        "/sales-grants", {"userId": str(tenant[Role.coach].user.id), "scope": "team"}
    )["id"]
    asset = _ok(
        client.post(
            tenant.url("/branding/assets/logo"),
            data={"file": (io.BytesIO(png()), "logo.png")},
            headers=owner,
            content_type="multipart/form-data",
        )
    )
    ids["brand_asset"], ids["brand_asset_key"] = asset["id"], asset["key"]
    ids["cash_plan"] = post(
        "/plans",
        {
            "name": "Cash monthly",
            "type": "cash",
            "priceInCents": 9000,
            "currency": "ILS",
            "intervalMonths": 1,
        },
    )["id"]
    ids["exercise"] = post(  # its video, for the members' reports
        "/exercises",
        {"name": "Tenant squat", "videoUrl": "https://video.example.test/tenant-squat"},
    )["id"]
    ids["class_type"] = post(
        "/class-types", {"name": "WOD", "defaultCapacity": 20, "durationMinutes": 60}
    )["id"]
    starts = CLASS_STARTS.isoformat()
    ids["session"] = post("/sessions", {"classTypeId": ids["class_type"], "startsAt": starts})["id"]
    ids["open_session"] = post(
        "/sessions",
        {"classTypeId": ids["class_type"], "startsAt": (NOW + timedelta(days=4)).isoformat()},
    )["id"]
    ids["booking"] = {
        role: _ok(
            client.post(
                tenant.url(f"/sessions/{ids['session']}/book"),
                json={},
                headers=tenant[role].headers,
            )
        )["id"]
        for role in Role
    }
    _subscriptions(client, session, tenant)
    _brand_workspace(client, tenant)
    _release(client, session, tenant)
    if card_server is not None:
        _card_provider(client, session, tenant, card_server)
    if bridge is not None:
        _bridge(client, session, tenant, bridge)
    ids["push_token"] = {}
    for role in Role:
        token = f"device-{role.value}-{tenant.id}"
        _ok(
            client.post(
                tenant.url("/push-registrations"),
                json={"appId": "com.gymctl.app", "platform": "ios", "token": token},
                headers=tenant[role].headers,
            )
        )
        ids["push_token"][role] = token
    return tenant


def loaded(session, *tenants: Tenant) -> None:
    """The tenants' people read again before the caller closes `session` and keeps them: a
    domain call of the seed that asks an outside system (publish's re-check of the store)
    reads its rows afresh after it, expiring what the session held."""
    for tenant in tenants:
        for person in tenant.people.values():
            session.refresh(person.user)


@dataclass(frozen=True)
class Call:
    """One request: the route's path parameters filled, its body, the success it must reach."""

    params: dict[str, str] = field(default_factory=dict)
    json: Any = None
    data: dict | None = None  # multipart form
    success: tuple[int, ...] = (200,)
    at: datetime | None = None  # the clock during the call (NOW when None)


Builder = Callable[[Tenant, Role], Call]


def _billing_gym(session, tenant: Tenant, role: Role) -> bf.Gym:
    from gymctl.models import Organization

    person, owner = tenant[role], tenant[Role.owner]
    organization = session.get(Organization, tenant.id)
    return bf.Gym(organization, {Role.owner: owner, Role.member: person})


def _subscriptions(client, session, tenant: Tenant) -> None:
    """Per role, own subscriptions in the states the member routes act on; the target
    member's for the staff routes; a retention case from the target's notice."""
    from gymctl.models import Membership, Plan

    ids = tenant.ids
    plan = session.get(Plan, uuid.UUID(ids["cash_plan"]))
    organization = _billing_gym(session, tenant, Role.owner).organization
    group = [
        bf.make_plan(session, organization, PlanType.card, plan_group="yearly", name=name)
        for name in ("Yearly A", "Yearly B")
    ]
    ids["group_plans"] = [str(p.id) for p in group]
    for kind in ("sub_active", "sub_noticed", "sub_presale", "sub_debt"):
        ids[kind] = {}
    for role in Role:
        gym = _billing_gym(session, tenant, role)
        ids["sub_active"][role] = str(bf.make_subscription(session, gym, plan=plan).id)
        ids["sub_noticed"][role] = str(bf.make_subscription(session, gym, plan=plan).id)
        ids["sub_presale"][role] = str(
            bf.make_subscription(
                session, gym, plan=group[0], presale_opening=NOW + timedelta(days=20)
            ).id
        )
        ids["sub_debt"][role] = str(
            bf.make_subscription(session, gym, plan=plan, in_debt_since=NOW - timedelta(days=3)).id
        )
    target = session.scalars(
        select(Membership).where(
            Membership.organization_id == tenant.id,
            Membership.user_id == uuid.UUID(ids["target_user"]),
        )
    ).one()
    organization = _billing_gym(session, tenant, Role.member).organization
    gym = bf.Gym(
        organization,
        {Role.owner: tenant[Role.owner], Role.member: Person(target.user, target)},
    )
    ids["target_sub"] = str(bf.make_subscription(session, gym, plan=plan).id)
    ids["target_debt"] = str(
        bf.make_subscription(session, gym, plan=plan, in_debt_since=NOW - timedelta(days=3)).id
    )
    ids["target_presale"] = str(
        bf.make_subscription(session, gym, plan=plan, presale_opening=NOW + timedelta(days=20)).id
    )
    session.commit()
    for role in Role:
        _ok(
            client.post(
                tenant.url(f"/subscriptions/{ids['sub_noticed'][role]}/notice"),
                json={},
                headers=tenant[role].headers,
            )
        )
    case = _ok(
        client.post(
            tenant.url(f"/subscriptions/{ids['target_sub']}/notice"),
            json={"reasonCode": "moving_away"},
            headers=tenant[Role.owner].headers,
        )
    )["case"]
    ids["case"], ids["task"] = case["id"], case["taskId"]  # its cancellation_review task


_terminals = itertools.count(1000)


def _card_provider(client, session, tenant: Tenant, card_server) -> None:
    """The gym on a terminal of its own at the fake card provider; per role an active card
    subscription bought through a hosted page; a desk sale on the target member's saved card."""
    from gymctl.models import Subscription, User
    from gymctl.providers.card import Terminal
    from tests.billing.cards import APPROVE, save_test_card

    ids, owner = tenant.ids, tenant[Role.owner].headers
    terminal = Terminal(str(next(_terminals)), "test2025")
    ids["terminal"] = {"provider": "card_provider", "terminal": terminal.number}
    ids["terminal"]["apiName"] = terminal.api_name
    _ok(client.put(tenant.url("/payments/provider"), json=ids["terminal"], headers=owner))
    ids["card_plan"] = _ok(
        client.post(
            tenant.url("/plans"),
            json={
                "name": "Card monthly",
                "type": "card",
                "priceInCents": 25000,
                "currency": "ILS",
                "intervalMonths": 1,
            },
            headers=owner,
        )
    )["id"]
    ids["card_plan_unheld"] = _ok(
        client.post(
            tenant.url("/plans"),
            json={
                "name": "Card yearly",
                "type": "card",
                "priceInCents": 250000,
                "currency": "ILS",
                "intervalMonths": 12,
            },
            headers=owner,
        )
    )["id"]
    ids["card_sub"], ids["page"] = {}, {}
    for role in Role:
        bought = _ok(
            client.post(
                tenant.url(f"/plans/{ids['card_plan']}/purchase"),
                json={},
                headers=tenant[role].headers,
            )
        )
        page_id = bought["checkout"]["pageId"]
        card_server.complete_page(page_id, APPROVE)
        _ok(client.post(f"/webhooks/card-provider/{tenant.id}", json={"LowProfileId": page_id}))
        ids["card_sub"][role], ids["page"][role] = bought["subscription"]["id"], page_id
    organization = _billing_gym(session, tenant, Role.owner).organization
    card_plan = bf.make_plan(session, organization, PlanType.card)  # one live sub per plan
    ids["card_debt"] = {}
    for role in Role:  # a card debt of each role's, on the card their purchase saved
        bought = session.get(Subscription, uuid.UUID(ids["card_sub"][role]))
        ids["card_debt"][role] = str(
            bf.make_subscription(
                session,
                _billing_gym(session, tenant, role),
                PlanType.card,
                plan=card_plan,
                in_debt_since=NOW - timedelta(days=3),
                payment_method_id=bought.payment_method_id,
                next_charge_date=NOW - timedelta(hours=1),
            ).id
        )
    member_sub = session.get(Subscription, uuid.UUID(ids["card_sub"][Role.member]))
    ids["next_charge"] = member_sub.next_charge_date.isoformat()
    gym = _billing_gym(session, tenant, Role.member)
    target = session.get(User, uuid.UUID(ids["target_user"]))
    save_test_card(
        session, gym, card_server.provider(), card_server.simulator, user=target, terminal=terminal
    )
    session.commit()
    sale = _ok(
        client.post(
            tenant.url("/payments/desk-charges"),
            json={
                "idempotencyKey": str(uuid.uuid4()),
                "userId": ids["target_user"],
                "amountInCents": 3000,
                "currency": "ILS",
                "description": "towel",
            },
            headers=owner,
        )
    )
    ids["desk_sale"] = sale["transaction"]["id"]
    from gymctl.models.billing import TransactionStatus
    from gymctl.releases import switches
    from tests.billing_ops.helpers import pending_attempt

    ids["hand_entered"] = str(
        bf.make_transaction(session, gym, status=TransactionStatus.pending).id
    )
    due = session.get(Subscription, uuid.UUID(ids["card_sub"][Role.coach]))
    due.next_charge_date = due.current_period_end = NOW - timedelta(minutes=10)
    ids["attempt"] = str(pending_attempt(session, due, now=NOW - timedelta(minutes=5)).id)
    _owner_tools(session, tenant, pending_attempt)
    switches.set_switch(session, tenant.id, switches.RELEASE_TRACKER, True, now=NOW)
    session.commit()


def _owner_tools(session, tenant: Tenant, pending_attempt) -> None:
    """The attempts the owner's billing tools settle (spec B 4.2): one stored and never sent
    (the provider has no record of it) for confirm-no-debit, with the request that matches its
    evidence; one the provider confirmed it never received, for authorize-retry. Each on the
    owner's card, on a plan of its own (a plan is held once)."""
    from gymctl.billing import attempts
    from gymctl.models import PaymentTransaction, Subscription
    from gymctl.providers.card import ChargeResult, Outcome

    ids, gym = tenant.ids, _billing_gym(session, tenant, Role.owner)
    card = session.get(Subscription, uuid.UUID(ids["card_sub"][Role.owner])).payment_method_id
    for key in ("unsent_attempt", "not_charged_attempt"):
        plan = bf.make_plan(session, gym.organization, PlanType.card, name=key)
        row = bf.make_subscription(session, gym, plan=plan, payment_method_id=card)
        row.next_charge_date = row.current_period_end = NOW - timedelta(minutes=10)
        ids[key] = str(pending_attempt(session, row, now=NOW - timedelta(minutes=5)).id)
    unsent = session.get(PaymentTransaction, uuid.UUID(ids["unsent_attempt"])).billing_attempt
    ids["no_debit_request"] = {
        "requestId": str(uuid.uuid4()),  # one request: a second call by the owner replays it
        "providerCaseId": "CASE-1",
        "confirmedAt": (NOW - timedelta(minutes=1)).isoformat(),
        "externalAttemptId": unsent["externalAttemptId"],
        "terminal": unsent["terminal"],
        "amountInCents": unsent["amountInCents"],
        "currency": unsent["currency"],
        "noDebitOccurred": True,
        "cannotSettleLater": True,
    }
    never_received = uuid.UUID(ids["not_charged_attempt"])
    external = session.get(PaymentTransaction, never_received).billing_attempt
    applied = attempts.apply_outcome(
        session,
        never_received,
        ChargeResult(Outcome.not_found, external["externalAttemptId"]),
        now=NOW - timedelta(minutes=4),
    )
    assert applied.outcome == "not_charged", applied


BRAND = {"palette": {"primaryColor": "#1C40A0", "buttonColor": "#FFE600"}, "name": "Iron Temple"}


def _brand_workspace(client, tenant: Tenant) -> None:
    """Brand, website and app drafts saved; the brand and the app published once, the brand's
    draft changed again since (so it can be published, unpublished and restored)."""
    from tests.branding.conftest import CONTENT

    owner = tenant[Role.owner].headers

    def put(suffix, body):
        _ok(client.put(tenant.url(f"/brand-workspace{suffix}"), json=body, headers=owner))

    put("/brand", BRAND)
    put("/website", {"content": CONTENT})
    put("/app", {"displayName": "Iron"})
    _ok(client.post(tenant.url("/brand-workspace/brand/publish"), headers=owner))
    _ok(client.post(tenant.url("/brand-workspace/app/publish"), headers=owner))
    put("/brand", {**BRAND, "palette": {"primaryColor": "#0B6E4F"}})


def _release(client, session, tenant: Tenant) -> None:
    """A dedicated app mapped, configured and enabled, its release request's intake saved and
    approved, and a candidate cut of the published app (icon and logo really stored)."""
    from gymctl.branding import publishing
    from gymctl.releases import approvals, branded_apps, candidates, owner, requests
    from tests.releases.conftest import APP_CONFIG, COMMIT, SUBMISSION, draft_app_images

    services = client.application.extensions["gymctl"]
    organization = session.get(Organization, tenant.id)
    draft_app_images(session, services.store, tenant.id)
    publishing.publish_app(session, services.store, tenant.id, actor_user_id=None, now=NOW)
    organization.tier = Tier.elite  # a dedicated app is the top tier's
    branded_apps.create_app(session, services.settings, organization, now=NOW)
    branded_apps.configure(session, tenant.id, APP_CONFIG, now=NOW)
    branded_apps.set_enabled(session, tenant.id, True, now=NOW)
    requests.open_request(session, tenant.id, now=NOW)
    saved = owner.save_submission(
        session, tenant.id, SUBMISSION, revision=0, actor_user_id=None, now=NOW
    )
    owner.approve(
        session,
        tenant.id,
        purpose=approvals.INTAKE,
        revision=saved["revision"],
        snapshot_sha256=None,
        actor_user_id=None,
        now=NOW,
    )
    candidates.cut_candidate(
        session, services.store, services.settings, tenant.id, source_commit=COMMIT, now=NOW
    )
    tenant.ids["release_revision"] = saved["revision"]
    session.commit()


def _bridge(client, session, tenant: Tenant, bridge) -> None:
    """Connected to the external gym system's fake with a key of its own; two parked ops, a
    booking parked on its unmatched class (the class the poll saw unclaimed is its candidate)
    and an open issue of the external system's."""
    from gymctl.bridge import classes, entity_map
    from gymctl.bridge.inbound import raise_issue
    from gymctl.models.bridge import EntityType, Origin

    key = f"key-{tenant.id}"
    bridge.add_account(key, box_id=str(tenant.id.int % 10**9))  # its own account: one gym each
    _ok(
        client.put(
            tenant.url("/bridge/connection"),
            json={"apiKey": key},
            headers=tenant[Role.owner].headers,
        )
    )
    tenant.ids["bridge_key"], tenant.ids["parked_ops"] = key, []
    for _ in range(2):
        op = _parked_booking(session, tenant, str(uuid.uuid4()), "identity_conflict")
        tenant.ids["parked_ops"].append(str(op.id))
    external_class = "ext-class-2"
    entity_map.link(
        session,
        tenant.id,
        EntityType.schedule,
        platform_id=None,  # seen by the schedule poll, no session claims it
        external_id=external_class,
        origin=Origin.poll,
        now=NOW,
    )
    unmatched = _parked_booking(session, tenant, tenant.ids["session"], classes.UNMATCHED)
    unmatched.last_error = f"no external class matches the session; candidates: {external_class}"
    tenant.ids["unmatched_op"], tenant.ids["external_class"] = str(unmatched.id), external_class
    removed = raise_issue(
        session,
        tenant.id,
        "class_removed",
        "ext-class-1",
        {"externalClassId": "ext-class-1"},
        now=NOW,
    )  # a change the external system made, for the owner to dismiss
    tenant.ids["external_issue"] = str(removed.id)
    session.commit()


def _parked_booking(session, tenant: Tenant, session_id: str, issue_code: str):
    """A booking.create of a member the platform never mirrored, parked on `issue_code`."""
    from gymctl.bridge.queue import enqueue
    from gymctl.models.bridge import OpStatus

    op = enqueue(
        session,
        organization_id=tenant.id,
        op_type="booking.create",
        payload={
            "memberId": str(uuid.uuid4()),
            "bookingId": str(uuid.uuid4()),
            "sessionId": session_id,
        },
        now=NOW,
    )
    op.status, op.issue_code = OpStatus.parked, issue_code
    return op
