"""The route table of the organization API and, per route, a call that reaches its success
answer on a seeded tenant (tests/api/seed.py). Shared by the permission matrix and the
cross-tenant suite, so a new route is in both as soon as it is in the app: it needs a recipe in
CALLS or an entry with its reason in UNCOVERED (a test checks that the two lists are current).
"""

from __future__ import annotations

import io
import uuid
from datetime import timedelta

from pydantic import SecretStr

from gymctl.models import Role
from tests.api.seed import BRAND, CLASS_STARTS, ORG_PREFIX, Call, Tenant, png
from tests.branding.conftest import CONTENT
from tests.conftest import NOW


def _route_table() -> list[tuple[str, str]]:
    from gymctl.config import Settings
    from webhooks.app import create_app

    app = create_app(Settings(GYMCTL_ENV="test", GYMCTL_IDENTITY_ADMIN="local"))
    routes = []
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith(ORG_PREFIX):
            for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
                routes.append((method, rule.rule.removeprefix(ORG_PREFIX)))
    return sorted(routes, key=lambda r: (r[1], r[0]))


ROUTES = _route_table()


def build_app(settings, session_factory, clock, mailbox, card_server, tmp_path, bridge=None):
    from gymctl.crypto import generate_key_setting
    from gymctl.providers.mail import MailboxMailer
    from tests.billing.factories import TEST_KEY
    from webhooks.app import create_app

    settings = settings.model_copy(
        update={
            "billing_encryption_key": SecretStr(TEST_KEY),
            "national_id_encryption_key": SecretStr(generate_key_setting()),
            "public_images_base_url": "https://images.example.test",
            **(
                {}
                if bridge is None
                else {
                    "bridge_api_url": bridge.url,
                    "bridge_credentials_key": SecretStr(generate_key_setting("b1")),
                    "bridge_rate": 1000.0,
                }
            ),
        }
    )
    return create_app(
        settings,
        session_factory=session_factory,
        clock=clock,
        mailer=MailboxMailer(mailbox, settings.mail_from, clock=clock),
        card_provider=card_server.provider(),
    )


def _own(key: str):
    """A call on the caller's own object of kind `key` (seeded per role)."""
    return lambda t, role: t.ids[key][role]


# Per route: (t, role) -> Call. Objects named by t.ids were seeded by seed.seed().
CALLS = {
    ("GET", "/members"): lambda t, r: Call(),
    ("POST", "/members"): lambda t, r: Call(
        json={"email": f"walkin-{r.value}@{t.id}.test", "name": "Walk In"}, success=(201,)
    ),
    ("POST", "/members/import"): lambda t, r: Call(
        data={
            "file": (io.BytesIO(f"email,name\nimp-{r.value}@x.test,Im Port\n".encode()), "m.csv")
        },
        success=(202,),
    ),
    ("GET", "/members/import/<uuid:import_id>"): lambda t, r: Call(
        {"import_id": t.ids["member_import"]}
    ),
    ("PATCH", "/members/<uuid:user_id>"): lambda t, r: Call(
        {"user_id": t.ids["target_user"]}, json={"role": "coach"}
    ),
    ("DELETE", "/members/<uuid:user_id>"): lambda t, r: Call({"user_id": t.ids["target_user"]}),
    ("PUT", "/members/<uuid:user_id>/national-id"): lambda t, r: Call(
        {"user_id": t.ids["target_user"]}, json={"nationalId": "ES-12345678-Z"}
    ),
    ("POST", "/members/<uuid:user_id>/erasure"): lambda t, r: Call(
        {"user_id": t.ids["target_user"]}
    ),
    ("GET", "/members/<uuid:user_id>/compliance.pdf"): lambda t, r: Call(
        {"user_id": t.ids["target_user"]}
    ),
    ("GET", "/invitations"): lambda t, r: Call(),
    ("POST", "/invitations"): lambda t, r: Call(
        json={"email": f"inv-{r.value}@{t.id}.test", "role": "member"}, success=(201,)
    ),
    ("POST", "/invitations/bulk"): lambda t, r: Call(
        json={"emails": [f"bulk-{r.value}@{t.id}.test"], "role": "member"}, success=(202,)
    ),
    ("GET", "/invitations/bulk/<uuid:batch_id>"): lambda t, r: Call(
        {"batch_id": t.ids["invitation_batch"]}
    ),
    ("POST", "/invitations/<uuid:invitation_id>/revoke"): lambda t, r: Call(
        {"invitation_id": t.ids["invitation"]}
    ),
    ("POST", "/invitations/<uuid:invitation_id>/resend"): lambda t, r: Call(
        {"invitation_id": t.ids["invitation"]}
    ),
    ("POST", "/leads"): lambda t, r: Call(
        json={"name": "New Lead", "email": f"lead-{r.value}@{t.id}.test"}, success=(201,)
    ),
    ("POST", "/leads/<uuid:lead_id>/convert"): lambda t, r: Call({"lead_id": t.ids["lead"]}),
    ("GET", "/join-links"): lambda t, r: Call(),
    ("PUT", "/join-enabled"): lambda t, r: Call(json={"joinEnabled": False}),
    ("POST", "/join-links"): lambda t, r: Call(json={"label": "Poster"}, success=(201,)),
    ("POST", "/join-links/<uuid:link_id>/revoke"): lambda t, r: Call(
        {"link_id": t.ids["join_link"]}
    ),
    ("POST", "/join-links/<uuid:link_id>/pause"): lambda t, r: Call(
        {"link_id": t.ids["join_link"]}
    ),
    ("POST", "/join-links/<uuid:link_id>/resume"): lambda t, r: Call(
        {"link_id": t.ids["paused_link"]}
    ),
    ("POST", "/sales-grants"): lambda t, r: Call(
        json={"userId": str(t[Role.coach].user.id), "scope": "own"}, success=(201,)
    ),
    ("DELETE", "/sales-grants/<uuid:grant_id>"): lambda t, r: Call({"grant_id": t.ids["grant"]}),
    ("GET", "/me/sales-access"): lambda t, r: Call(),
    ("POST", "/branding/assets/<name>"): lambda t, r: Call(
        {"name": "logo"}, data={"file": (io.BytesIO(png()), "logo.png")}, success=(201,)
    ),
    ("POST", "/brand-assets/<uuid:asset_id>/native/<slot_name>"): lambda t, r: Call(
        {"asset_id": t.ids["brand_asset"], "slot_name": "wordmark"}, success=(201,)
    ),
    ("GET", "/branding/assets"): lambda t, r: Call(),
    ("PUT", "/branding/assets"): lambda t, r: Call(
        json={"assets": {"logo": t.ids["brand_asset_key"]}}
    ),
    ("GET", "/plans"): lambda t, r: Call(),
    ("POST", "/plans"): lambda t, r: Call(
        json={
            "name": f"Plan by {r.value}",
            "type": "cash",
            "priceInCents": 5000,
            "currency": "ILS",
            "intervalMonths": 1,
        },
        success=(201,),
    ),
    ("GET", "/subscriptions/me"): lambda t, r: Call(),
    ("GET", "/me/subscriptions"): lambda t, r: Call(),
    ("POST", "/subscriptions"): lambda t, r: Call(
        json={"userId": t.ids["target_user"], "planId": t.ids["cash_plan"]}, success=(201,)
    ),
    ("POST", "/exercises"): lambda t, r: Call(
        json={"name": f"Zercher hold {r.value}"}, success=(201,)
    ),
    ("PATCH", "/exercises/<uuid:movement_id>"): lambda t, r: Call(
        {"movement_id": t.ids["exercise"]}, json={"cues": ["brace"]}
    ),
    ("DELETE", "/exercises/<uuid:movement_id>"): lambda t, r: Call(
        {"movement_id": t.ids["exercise"]}
    ),
    ("POST", "/exercises/<uuid:movement_id>/video/report"): lambda t, r: Call(
        {"movement_id": t.ids["exercise"]}, json={"negative": True, "reason": "not a squat"}
    ),
    ("PUT", "/exercises/<uuid:movement_id>/thumbnail"): lambda t, r: Call(
        {"movement_id": t.ids["exercise"]},
        data={"file": (io.BytesIO(png((640, 360))), "thumb.png")},
    ),
    ("GET", "/class-types"): lambda t, r: Call(),
    ("POST", "/class-types"): lambda t, r: Call(
        json={"name": f"Mobility {r.value}", "defaultCapacity": 12, "durationMinutes": 45},
        success=(201,),
    ),
    ("GET", "/sessions"): lambda t, r: Call(),
    ("POST", "/sessions"): lambda t, r: Call(
        json={
            "classTypeId": t.ids["class_type"],
            "startsAt": (NOW + timedelta(days=3, hours=2)).isoformat(),
        },
        success=(201,),
    ),
    ("POST", "/sessions/<uuid:session_id>/book"): lambda t, r: Call(
        {"session_id": t.ids["open_session"]}, json={}, success=(201,)
    ),
    ("GET", "/sessions/<uuid:session_id>/bookings"): lambda t, r: Call(
        {"session_id": t.ids["session"]}
    ),
    ("POST", "/sessions/<uuid:session_id>/cancel"): lambda t, r: Call(
        {"session_id": t.ids["session"]}
    ),
    ("POST", "/bookings/<uuid:booking_id>/cancel"): lambda t, r: Call(
        {"booking_id": t.ids["booking"][r]}
    ),
    ("DELETE", "/bookings/<uuid:booking_id>"): lambda t, r: Call(
        {"booking_id": t.ids["booking"][Role.member]}
    ),
    ("POST", "/bookings/<uuid:booking_id>/check-in"): lambda t, r: Call(
        {"booking_id": t.ids["booking"][Role.member]},
        json={},
        at=CLASS_STARTS - timedelta(minutes=30),  # check-in opens an hour before
    ),
    ("POST", "/bookings/<uuid:booking_id>/no-show"): lambda t, r: Call(
        {"booking_id": t.ids["booking"][Role.member]},
        at=CLASS_STARTS + timedelta(minutes=70),  # after the class
    ),
    ("GET", "/brand-workspace"): lambda t, r: Call(),
    ("PUT", "/brand-workspace/app"): lambda t, r: Call(json={"displayName": "Iron App"}),
    ("POST", "/brand-workspace/preview-ticket"): lambda t, r: Call(success=(201,)),
    ("GET", "/retention/cases"): lambda t, r: Call(),
    ("GET", "/tasks"): lambda t, r: Call(),
    ("POST", "/tasks/<uuid:task_id>/done"): lambda t, r: Call({"task_id": t.ids["task"]}),
    ("GET", "/retention/cases/<uuid:case_id>"): lambda t, r: Call({"case_id": t.ids["case"]}),
    ("POST", "/retention/cases/<uuid:case_id>/acknowledge"): lambda t, r: Call(
        {"case_id": t.ids["case"]}
    ),
    ("POST", "/retention/cases/<uuid:case_id>/contacts"): lambda t, r: Call(
        {"case_id": t.ids["case"]}, json={"channel": "phone"}, success=(201,)
    ),
    ("POST", "/retention/cases/<uuid:case_id>/outcome"): lambda t, r: Call(
        {"case_id": t.ids["case"]}, json={"outcome": "saved_offer"}
    ),
    ("POST", "/subscriptions/<uuid:subscription_id>/notice"): lambda t, r: Call(
        {"subscription_id": t.ids["sub_active"][r]}, json={}
    ),
    ("DELETE", "/subscriptions/<uuid:subscription_id>/notice"): lambda t, r: Call(
        {"subscription_id": t.ids["sub_noticed"][r]}
    ),
    ("POST", "/subscriptions/<uuid:subscription_id>/withdraw-presale"): lambda t, r: Call(
        {"subscription_id": t.ids["sub_presale"][r]}
    ),
    ("GET", "/subscriptions/<uuid:subscription_id>/plan-change-targets"): lambda t, r: Call(
        {"subscription_id": t.ids["sub_presale"][r]}
    ),
    ("POST", "/subscriptions/<uuid:subscription_id>/change-plan"): lambda t, r: Call(
        {"subscription_id": t.ids["sub_presale"][r]}, json={"planId": t.ids["group_plans"][1]}
    ),
    ("PUT", "/subscriptions/<uuid:subscription_id>/opening-day"): lambda t, r: Call(
        {"subscription_id": t.ids["target_presale"]},
        json={"openingDay": (NOW + timedelta(days=25)).isoformat()},
    ),
    ("POST", "/subscriptions/<uuid:subscription_id>/clear-debt"): lambda t, r: Call(
        {"subscription_id": t.ids["target_debt"]}, json={"method": "cash"}
    ),
    ("PUT", "/payments/provider"): lambda t, r: Call(json=t.ids["terminal"]),
    ("POST", "/plans/<uuid:plan_id>/purchase"): lambda t, r: Call(
        {"plan_id": t.ids["card_plan_unheld"]}, json={}, success=(201,)
    ),
    ("POST", "/payments/verify-return"): lambda t, r: Call(json={"pageId": t.ids["page"][r]}),
    ("POST", "/subscriptions/<uuid:subscription_id>/card-replacement"): lambda t, r: Call(
        {"subscription_id": t.ids["card_sub"][r]}, json={}, success=(201,)
    ),
    ("POST", "/subscriptions/<uuid:subscription_id>/charge-date"): lambda t, r: Call(
        {"subscription_id": t.ids["card_sub"][Role.member]},
        json={
            "expectedNextChargeDate": t.ids["next_charge"],
            "nextChargeDate": (NOW + timedelta(days=40)).isoformat(),
        },
    ),
    ("POST", "/payments/desk-charges"): lambda t, r: Call(
        json={
            "idempotencyKey": str(uuid.uuid4()),
            "userId": t.ids["target_user"],
            "amountInCents": 1500,
            "currency": "ILS",
            "description": "protein bar",
        },
        success=(201,),
    ),
    ("GET", "/payments/desk-charges/<uuid:transaction_id>"): lambda t, r: Call(
        {"transaction_id": t.ids["desk_sale"]}
    ),
    ("POST", "/payments/desk-charges/<uuid:transaction_id>/reconcile"): lambda t, r: Call(
        {"transaction_id": t.ids["desk_sale"]}
    ),
    ("POST", "/payments/transactions/<uuid:transaction_id>/refund"): lambda t, r: Call(
        {"transaction_id": t.ids["desk_sale"]},
        json={"amountInCents": 1000, "reason": "changed mind"},
        success=(201,),
    ),
    ("POST", "/payments/transactions/<uuid:transaction_id>/credit-notes"): lambda t, r: Call(
        {"transaction_id": t.ids["desk_sale"]},
        json={
            "idempotencyKey": str(uuid.uuid4()),
            "amountInCents": 500,
            "cashReturned": True,
        },
        success=(201,),
    ),
    ("PUT", "/brand-workspace/brand"): lambda t, r: Call(json=BRAND),
    ("PUT", "/brand-workspace/website"): lambda t, r: Call(json={"content": CONTENT}),
    ("POST", "/brand-workspace/publish"): lambda t, r: Call(
        json={"channels": ["brand", "website"]}
    ),
    ("POST", "/brand-workspace/<channel>/publish"): lambda t, r: Call({"channel": "website"}),
    ("POST", "/brand-workspace/<channel>/unpublish"): lambda t, r: Call({"channel": "brand"}),
    ("POST", "/brand-workspace/<channel>/restore"): lambda t, r: Call(
        {"channel": "brand"}, json={"revision": 1}
    ),
    ("POST", "/brand-workspace/app/attestations"): lambda t, r: Call(json={"kind": "screenshot"}),
    ("GET", "/payments/billing/transactions/<uuid:transaction_id>"): lambda t, r: Call(
        {"transaction_id": t.ids["attempt"]}
    ),
    ("POST", "/payments/billing/transactions/<uuid:transaction_id>/reconcile"): lambda t, r: Call(
        {"transaction_id": t.ids["attempt"]}
    ),
    ("POST", "/payments/billing/transactions/<uuid:transaction_id>/confirm-no-debit"): (
        lambda t, r: Call(
            {"transaction_id": t.ids["unsent_attempt"]}, json=t.ids["no_debit_request"]
        )
    ),
    ("POST", "/payments/billing/transactions/<uuid:transaction_id>/authorize-retry"): (
        lambda t, r: Call({"transaction_id": t.ids["not_charged_attempt"]})
    ),
    ("POST", "/payments/transactions/<uuid:transaction_id>/dismiss"): lambda t, r: Call(
        {"transaction_id": t.ids["hand_entered"]}
    ),
    ("GET", "/releases"): lambda t, r: Call(),
    ("PUT", "/bridge/connection"): lambda t, r: Call(json={"apiKey": t.ids["bridge_key"]}),
    ("DELETE", "/bridge/connection"): lambda t, r: Call(),
    ("POST", "/bridge/issues/<op_id>/retry"): lambda t, r: Call({"op_id": t.ids["parked_ops"][0]}),
    ("POST", "/bridge/issues/<op_id>/dismiss"): lambda t, r: Call(
        {"op_id": t.ids["parked_ops"][1]}
    ),
    ("POST", "/subscriptions/<uuid:subscription_id>/pay-debt"): lambda t, r: Call(
        {"subscription_id": t.ids["card_debt"][r]}
    ),
    ("GET", "/billing/settings"): lambda t, r: Call(),
    ("PATCH", "/billing/settings"): lambda t, r: Call(json={"billingGraceDays": 5}),
    ("GET", "/billing/charge-schedule"): lambda t, r: Call(),
    ("GET", "/bridge"): lambda t, r: Call(),
    ("GET", "/bridge/issues"): lambda t, r: Call(),
    ("GET", "/bridge/cutovers"): lambda t, r: Call(),
    ("PUT", "/bridge/cutovers"): lambda t, r: Call(
        json={
            "classTypeId": t.ids["class_type"],
            "weekday": 0,
            "startTime": "18:00",
            "cutoverOn": (NOW + timedelta(days=7)).date().isoformat(),
        }
    ),
    ("POST", "/bridge/issues/<op_id>/link"): lambda t, r: Call(
        {"op_id": t.ids["unmatched_op"]}, json={"externalId": t.ids["external_class"]}
    ),
    ("POST", "/bridge/classes/<uuid:session_id>/link"): lambda t, r: Call(
        {"session_id": t.ids["session"]}, json={"externalClassId": t.ids["external_class"]}
    ),
    ("POST", "/bridge/external-issues/<uuid:issue_id>/dismiss"): lambda t, r: Call(
        {"issue_id": t.ids["external_issue"]}
    ),
    ("PUT", "/releases/submission"): lambda t, r: Call(
        json={
            "submission": {"appName": "Iron Temple", "description": "Book classes."},
            "revision": t.ids["release_revision"],
        }
    ),
    ("POST", "/releases/approvals"): lambda t, r: Call(
        json={"purpose": "submission_intake", "revision": t.ids["release_revision"]}, success=(201,)
    ),
    ("PUT", "/releases/checks/<target>/<check>"): lambda t, r: Call(
        {"target": "ios", "check": "store_listing_confirmed"}, json={"status": "passing"}
    ),
    ("POST", "/push-registrations"): lambda t, r: Call(
        json={"appId": "com.gymctl.app", "platform": "ios", "token": f"tok-{r.value}"},
        success=(201,),
    ),
    ("POST", "/push-registrations/revoke"): lambda t, r: Call(
        json={"appId": "com.gymctl.app", "token": t.ids["push_token"][r]}
    ),
    ("POST", "/onboarding/complete"): lambda t, r: Call(),
    ("DELETE", ""): lambda t, r: Call(),
}

# Routes with no recipe yet, each with what it would need (checked current by the suites):
# none now; a new route without a recipe lands here with its reason.
UNCOVERED: dict[tuple[str, str], str] = {
    (
        "POST",
        "/payments/billing/transactions/<uuid:transaction_id>/settle-contradiction",
    ): "its success needs a charge the card provider took at another amount than stored, and "
    "the provider confirming it again: tests/billing_ops/test_contradictions_door.py reaches it "
    "and refuses another gym's id there",
}


def path_of(tenant: Tenant, rule: str, call: Call) -> str:
    path = rule
    for name, value in call.params.items():
        path = path.replace(f"<uuid:{name}>", str(value)).replace(f"<{name}>", str(value))
    assert "<" not in path, (rule, call.params)
    return tenant.url(path)


def request_for(
    client, tenant: Tenant, key, role: Role, *, clock, idp, target: Tenant | None = None
):
    """Call route `key` as `role` of `tenant`; with `target`, the ids and bodies are target's
    (the call still goes to the caller's own organization path)."""
    method, rule = key
    call = CALLS[key](target or tenant, role)
    path = path_of(tenant, rule, call)
    headers = tenant[role].headers
    if call.at is not None:  # a session token of that moment
        token = idp.token(tenant[role].user.identity_id, now=call.at)
        headers = {"Authorization": f"Bearer {token}"}
    clock.set(call.at or NOW)
    try:
        if call.data is not None:
            return client.open(
                path,
                method=method,
                data=call.data,
                headers=headers,
                content_type="multipart/form-data",
            )
        return client.open(path, method=method, json=call.json, headers=headers)
    finally:
        clock.set(NOW)


class rolled_back:
    """Whatever the request writes is undone after it: each case starts from the same seed."""

    def __init__(self, connection) -> None:
        self.connection = connection

    def __enter__(self):
        self.savepoint = self.connection.begin_nested()
        return self

    def __exit__(self, *exc) -> None:
        self.savepoint.rollback()
