"""The permission matrix (spec A 2.7, 2.8): the pure table, and the API held to it per route."""

from __future__ import annotations

import re
import uuid

import pytest

from gymctl.access.permissions import PERMISSION_MATRIX, Access, Module, can
from gymctl.models import Role
from tests.access.conftest import snapshot
from tests.api import seed
from tests.api.suite import CALLS, ROUTES, UNCOVERED, request_for, rolled_back
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from webhooks.app import create_app

ORG_PREFIX = "/organizations/<uuid:org_id>"


def test_admin_is_owner_equivalent_except_payment_config_and_platform_billing():
    differs = {m for m in Module if can(Role.owner, m, "manage") != can(Role.admin, m, "manage")}
    assert differs == {Module.payment_config, Module.platform_billing}
    assert can(Role.admin, Module.finance, "manage")


def test_coach_has_programming_and_coaching_surfaces_but_no_finance_crm_or_analytics():
    for module in (
        Module.programming,
        Module.messages,
        Module.forms,
        Module.checkins,
        Module.metrics,
    ):
        assert can(Role.coach, module, "manage"), module
    assert can(Role.coach, Module.members, "view")
    assert not can(Role.coach, Module.members, "manage")
    for module in (
        Module.member_billing,
        Module.finance,
        Module.crm,
        Module.analytics,
        Module.sales,
        Module.payment_config,
        Module.platform_billing,
    ):
        assert not can(Role.coach, module, "view"), module


def test_member_reaches_no_module_only_their_own_records():
    assert not any(can(Role.member, module, "view") for module in Module)


def test_manage_implies_view_and_every_cell_is_set():
    for role, row in PERMISSION_MATRIX.items():
        assert set(row) == set(Module), role
        for module, access in row.items():
            assert can(role, module, "view") == (access >= Access.view)
            assert can(role, module, "manage") == (access is Access.manage)


def _org_routes():
    app = create_app(_settings(), session_factory=None)
    routes = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(ORG_PREFIX):
            continue
        view = app.view_functions[rule.endpoint]
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            routes.append((method, rule.rule, getattr(view, "gymctl_access", None)))
    return routes


def _settings():
    from gymctl.config import Settings

    return Settings(GYMCTL_ENV="test", GYMCTL_IDENTITY_ADMIN="local")


ORG_ROUTES = _org_routes()


def test_every_organization_route_declares_its_access_rule():
    assert ORG_ROUTES, "no organization routes found"
    undeclared = [(m, r) for m, r, access in ORG_ROUTES if access is None]
    assert undeclared == []


def _path(rule: str, org_id) -> str:
    path = rule.replace("<uuid:org_id>", str(org_id))
    return re.sub(r"<(?:[^:<>]+:)?[^<>]+>", lambda _m: str(uuid.uuid4()), path)


# --- the API held to the spec, route by route ------------------------------------------------
#
# The expected answer comes from the spec (A 2.7, 2.8; B 5 and docs/decisions.md where the spec
# leaves a cell open), written out here and never read from the routes' own declarations: a
# route that declares the wrong module fails below. A case counts as allowed only when it
# reaches its success answer on a seeded gym (tests/api/seed.py: real ids, valid bodies); a
# refused case is 403 with its code, and nothing changed.

STAFF = frozenset({Role.owner, Role.admin, Role.coach})
OWNER_ADMIN = frozenset({Role.owner, Role.admin})
EVERYONE = frozenset(Role)

# capability -> (the roles that reach it, the sentence that says so)
SPEC = {
    "owner_only": (
        frozenset({Role.owner}),
        "A 2.7 admin: reserved to the owner: editing the payment-provider integration "
        "(payment-config), the organization's own platform billing (platform-billing), deleting "
        "the organization, completing onboarding; A 2.8: owner-only organization deletion and "
        "personal-data erasure; B 5: Confirm-no-debit and authorize-retry, release form: "
        "organization owner only; decisions: bridge, releases and billing settings are owner-only",
    ),
    "roster_view": (
        STAFF,
        "A 2.7 coach: may view the member roster but not the billing tab; "
        "member: cannot see other members' data",
    ),
    "members_manage": (
        OWNER_ADMIN,
        "A 2.7 admin: owner-equivalent for daily work; coach: may view the member roster "
        "(viewing only); member: member surfaces only",
    ),
    "invitations": (
        STAFF,
        "A 2.8 role grant matrix: owner, admin and coach may grant (coach: member only); "
        "A 2.4: Listing invitations exposes invitee personal data and is staff-only",
    ),
    "crm": (OWNER_ADMIN, "A 2.7 coach: no finance, no CRM/leads, no analytics"),
    "join_links": (
        OWNER_ADMIN,
        "A 2.7: coach reaches coaching surfaces, programming, messages, forms, check-ins, "
        "metrics only; admin is owner-equivalent for daily work",
    ),
    "sales": (OWNER_ADMIN, "A 2.5: Only owner and admin (implicit team managers) create grants"),
    "branding": (
        OWNER_ADMIN,
        "A 1: Organization owners edit branding; A 2.7: the coach's surfaces do not include it; "
        "decisions: Coaches do not upload member-app images",
    ),
    "finance": (
        OWNER_ADMIN,
        "A 2.7 admin: including finance (plans, payments, subscriptions); coach: no finance",
    ),
    "member_billing": (OWNER_ADMIN, "A 2.7 coach: ... but not the billing tab"),
    "programming": (
        STAFF,
        "A 2.7 coach: the full programming domain (workouts, programs, class types, sessions, "
        "bookings, full CRUD incl. delete)",
    ),
    "checkins": (STAFF, "A 2.7 coach: messages, forms and check-ins, metrics"),
    "own": (
        EVERYONE,
        "A 2.8: Rules kept outside the matrix: ... a member's access to their own records; "
        "B 4.5: POST .../exercises/{id}/video/report (any organization member)",
    ),
}

# route -> capability, read from what the route does (not from its declaration)
CAPABILITY = {
    ("DELETE", ""): "owner_only",
    ("POST", "/onboarding/complete"): "owner_only",
    ("GET", "/members"): "roster_view",
    ("POST", "/members"): "members_manage",
    ("POST", "/members/import"): "members_manage",
    ("GET", "/members/import/<uuid:import_id>"): "members_manage",
    ("PATCH", "/members/<uuid:user_id>"): "members_manage",
    ("DELETE", "/members/<uuid:user_id>"): "members_manage",
    ("PUT", "/members/<uuid:user_id>/national-id"): "members_manage",
    ("POST", "/members/<uuid:user_id>/erasure"): "owner_only",
    ("GET", "/members/<uuid:user_id>/compliance.pdf"): "members_manage",
    ("GET", "/invitations"): "invitations",
    ("POST", "/invitations"): "invitations",
    ("POST", "/invitations/bulk"): "invitations",
    ("GET", "/invitations/bulk/<uuid:batch_id>"): "invitations",
    ("POST", "/invitations/<uuid:invitation_id>/revoke"): "invitations",
    ("POST", "/invitations/<uuid:invitation_id>/resend"): "invitations",
    ("POST", "/leads"): "crm",
    ("POST", "/leads/<uuid:lead_id>/convert"): "crm",
    ("GET", "/join-links"): "join_links",
    ("PUT", "/join-enabled"): "join_links",
    ("POST", "/join-links"): "join_links",
    ("POST", "/join-links/<uuid:link_id>/revoke"): "join_links",
    ("POST", "/join-links/<uuid:link_id>/pause"): "join_links",
    ("POST", "/join-links/<uuid:link_id>/resume"): "join_links",
    ("POST", "/sales-grants"): "sales",
    ("DELETE", "/sales-grants/<uuid:grant_id>"): "sales",
    ("GET", "/me/sales-access"): "own",
    ("POST", "/branding/assets/<name>"): "branding",
    ("POST", "/brand-assets/<uuid:asset_id>/native/<slot_name>"): "branding",
    ("GET", "/branding/assets"): "branding",
    ("PUT", "/branding/assets"): "branding",
    ("GET", "/brand-workspace"): "branding",
    ("PUT", "/brand-workspace/brand"): "branding",
    ("PUT", "/brand-workspace/website"): "branding",
    ("PUT", "/brand-workspace/app"): "branding",
    ("POST", "/brand-workspace/publish"): "branding",
    ("POST", "/brand-workspace/<channel>/publish"): "branding",
    ("POST", "/brand-workspace/<channel>/unpublish"): "branding",
    ("POST", "/brand-workspace/<channel>/restore"): "branding",
    ("POST", "/brand-workspace/app/attestations"): "branding",
    ("POST", "/brand-workspace/preview-ticket"): "branding",
    ("GET", "/plans"): "own",
    ("POST", "/plans"): "finance",
    ("POST", "/plans/<uuid:plan_id>/purchase"): "own",
    ("POST", "/subscriptions/<uuid:subscription_id>/card-replacement"): "own",
    ("POST", "/payments/verify-return"): "own",
    ("GET", "/subscriptions/me"): "own",
    ("POST", "/subscriptions"): "finance",
    ("PUT", "/payments/provider"): "owner_only",
    ("POST", "/exercises/<uuid:movement_id>/video/report"): "own",
    ("PUT", "/exercises/<uuid:movement_id>/thumbnail"): "programming",
    ("POST", "/exercises"): "programming",
    ("PATCH", "/exercises/<uuid:movement_id>"): "programming",
    ("DELETE", "/exercises/<uuid:movement_id>"): "programming",
    ("GET", "/bridge"): "owner_only",
    ("PUT", "/bridge/connection"): "owner_only",
    ("DELETE", "/bridge/connection"): "owner_only",
    ("GET", "/bridge/issues"): "owner_only",
    ("POST", "/bridge/external-issues/<uuid:issue_id>/dismiss"): "owner_only",
    ("POST", "/bridge/issues/<op_id>/retry"): "owner_only",
    ("GET", "/bridge/cutovers"): "owner_only",
    ("PUT", "/bridge/cutovers"): "owner_only",
    ("POST", "/bridge/issues/<op_id>/link"): "owner_only",
    ("POST", "/bridge/classes/<uuid:session_id>/link"): "owner_only",
    ("POST", "/bridge/issues/<op_id>/dismiss"): "owner_only",
    ("POST", "/class-types"): "programming",
    ("GET", "/class-types"): "own",
    ("POST", "/sessions"): "programming",
    ("GET", "/sessions"): "own",
    ("POST", "/sessions/<uuid:session_id>/book"): "own",
    ("GET", "/sessions/<uuid:session_id>/bookings"): "programming",
    ("POST", "/sessions/<uuid:session_id>/cancel"): "programming",
    ("POST", "/bookings/<uuid:booking_id>/cancel"): "own",
    ("DELETE", "/bookings/<uuid:booking_id>"): "programming",
    ("POST", "/bookings/<uuid:booking_id>/check-in"): "checkins",
    ("POST", "/bookings/<uuid:booking_id>/no-show"): "checkins",
    ("POST", "/push-registrations"): "own",
    ("POST", "/push-registrations/revoke"): "own",
    ("GET", "/releases"): "owner_only",
    ("PUT", "/releases/submission"): "owner_only",
    ("POST", "/releases/approvals"): "owner_only",
    ("PUT", "/releases/checks/<target>/<check>"): "owner_only",
    ("GET", "/me/subscriptions"): "own",
    ("POST", "/subscriptions/<uuid:subscription_id>/notice"): "own",
    ("DELETE", "/subscriptions/<uuid:subscription_id>/notice"): "own",
    ("POST", "/subscriptions/<uuid:subscription_id>/withdraw-presale"): "own",
    ("GET", "/subscriptions/<uuid:subscription_id>/plan-change-targets"): "own",
    ("POST", "/subscriptions/<uuid:subscription_id>/change-plan"): "own",
    ("GET", "/retention/cases"): "member_billing",
    ("GET", "/tasks"): "member_billing",
    ("POST", "/tasks/<uuid:task_id>/done"): "member_billing",
    ("GET", "/retention/cases/<uuid:case_id>"): "member_billing",
    ("POST", "/retention/cases/<uuid:case_id>/acknowledge"): "member_billing",
    ("POST", "/retention/cases/<uuid:case_id>/contacts"): "member_billing",
    ("POST", "/retention/cases/<uuid:case_id>/outcome"): "member_billing",
    ("GET", "/payments/billing/transactions/<uuid:transaction_id>"): "finance",
    ("POST", "/payments/billing/transactions/<uuid:transaction_id>/reconcile"): "finance",
    ("POST", "/payments/billing/transactions/<uuid:transaction_id>/settle-contradiction"): (
        "finance"
    ),
    ("POST", "/payments/billing/transactions/<uuid:transaction_id>/confirm-no-debit"): "owner_only",
    ("POST", "/payments/billing/transactions/<uuid:transaction_id>/authorize-retry"): "owner_only",
    ("POST", "/payments/transactions/<uuid:transaction_id>/dismiss"): "finance",
    ("POST", "/payments/desk-charges"): "finance",
    ("GET", "/payments/desk-charges/<uuid:transaction_id>"): "finance",
    ("POST", "/payments/desk-charges/<uuid:transaction_id>/reconcile"): "finance",
    ("POST", "/payments/transactions/<uuid:transaction_id>/refund"): "finance",
    ("POST", "/payments/transactions/<uuid:transaction_id>/credit-notes"): "finance",
    ("PUT", "/subscriptions/<uuid:subscription_id>/opening-day"): "finance",
    ("POST", "/subscriptions/<uuid:subscription_id>/clear-debt"): "finance",
    ("POST", "/subscriptions/<uuid:subscription_id>/pay-debt"): "own",
    ("GET", "/billing/settings"): "finance",
    ("PATCH", "/billing/settings"): "owner_only",
    ("GET", "/billing/charge-schedule"): "finance",
    ("POST", "/subscriptions/<uuid:subscription_id>/charge-date"): "finance",
}

REFUSAL_CODES = ("permission_denied", "owner_required")


def test_every_organization_route_has_an_expected_answer_and_a_call_or_a_reason():
    """A new route fails here until it is placed in the table above and given a call that
    reaches its success (tests/api/suite.py CALLS) or a reason it has none (UNCOVERED)."""
    assert set(CAPABILITY) == set(ROUTES)
    assert set(CAPABILITY.values()) == set(SPEC)
    assert set(CALLS).isdisjoint(UNCOVERED)
    assert set(CALLS) | set(UNCOVERED) == set(ROUTES)


@pytest.fixture
def world(session, idp, suite_app, clock, card_server, fake_gym):  # noqa: F811
    tenant = seed.make_tenant(session, idp, name="Iron Temple", tag="iron")
    seed.seed(suite_app.test_client(), session, tenant, card_server, fake_gym)
    seed.loaded(session, tenant)
    session.close()
    return tenant


def _refusal(response) -> bool:
    body = response.get_json(silent=True) or {}
    return response.status_code == 403 and body.get("code") in REFUSAL_CODES


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
def test_the_api_allows_or_refuses_each_route_exactly_as_the_spec_says(
    suite_app, world, connection, session_factory, clock, idp, role
):
    client = suite_app.test_client()
    wrong, reached, refused, unreached = [], 0, 0, []
    for key in ROUTES:
        allowed = role in SPEC[CAPABILITY[key]][0]
        if key in UNCOVERED:  # no seeded call: the refusal side still holds
            with rolled_back(connection):
                method, rule = key
                before = None if allowed else _state(session_factory)
                response = client.open(
                    world.url(_any_ids(rule)), method=method, json={}, headers=world[role].headers
                )
                after = None if allowed else _state(session_factory)
            if _refusal(response) is allowed or before != after:
                wrong.append((key, "allowed" if allowed else "refused", response.status_code))
            elif allowed:
                unreached.append(key)
            else:
                refused += 1
            continue
        with rolled_back(connection):
            before = None if allowed else _state(session_factory)
            response = request_for(client, world, key, role, clock=clock, idp=idp)
            after = None if allowed else _state(session_factory)
        success = CALLS[key](world, role).success
        if allowed and response.status_code not in success:
            wrong.append((key, "allowed", response.status_code, response.get_json(silent=True)))
        elif not allowed and not (_refusal(response) and before == after):
            wrong.append((key, "refused", response.status_code, response.get_json(silent=True)))
        elif allowed:
            reached += 1
        else:
            refused += 1
        assert response.get_json(silent=True) is not None or response.mimetype != "text/html"
    assert wrong == []
    assert reached + refused + len(unreached) == len(ROUTES)


def _state(session_factory) -> dict:
    with session_factory() as session:
        return snapshot(session)


def _any_ids(rule: str) -> str:
    return re.sub(r"<(?:[^:<>]+:)?[^<>]+>", lambda _m: str(uuid.uuid4()), rule)


@pytest.mark.parametrize(
    ("method", "rule", "access"),
    ORG_ROUTES,
    ids=[f"{m} {r.removeprefix(ORG_PREFIX) or '/'}" for m, r, _ in ORG_ROUTES],
)
def test_a_non_member_learns_nothing_404(client, gym, outsider, method, rule, access):
    response = client.open(_path(rule, gym.id), method=method, json={}, headers=outsider.headers)
    assert (response.status_code, response.json["code"]) == (404, "organization_not_found")
