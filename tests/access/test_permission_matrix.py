"""The permission matrix (spec A 2.7, 2.8): the pure table, and the API held to it per route."""

from __future__ import annotations

import re
import uuid

import pytest

from gymctl.access.permissions import PERMISSION_MATRIX, Access, Module, can
from gymctl.models import Role
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


ROUTES = _org_routes()


def test_every_organization_route_declares_its_access_rule():
    assert ROUTES, "no organization routes found"
    undeclared = [(m, r) for m, r, access in ROUTES if access is None]
    assert undeclared == []


def _path(rule: str, org_id) -> str:
    path = rule.replace("<uuid:org_id>", str(org_id))
    return re.sub(r"<(?:[^:<>]+:)?[^<>]+>", lambda _m: str(uuid.uuid4()), path)


def _allowed(access, role: Role) -> bool:
    kind = access[0]
    if kind == "matrix":
        return can(role, access[1], access[2])
    if kind == "owner":
        return role is Role.owner
    return True  # "own": every member reaches their own records


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
@pytest.mark.parametrize(
    ("method", "rule", "access"),
    ROUTES,
    ids=[f"{m} {r.removeprefix(ORG_PREFIX) or '/'}" for m, r, _ in ROUTES],
)
def test_the_api_allows_or_refuses_exactly_as_the_matrix_says(
    client, gym, method, rule, access, role
):
    response = client.open(_path(rule, gym.id), method=method, json={}, headers=gym[role].headers)
    body = response.get_json(silent=True) or {}
    refused = response.status_code == 403 and body.get("code") in (
        "permission_denied",
        "owner_required",
    )
    assert refused is not _allowed(access, role), (response.status_code, body)
    if refused:
        assert body["message"]


@pytest.mark.parametrize(
    ("method", "rule", "access"),
    ROUTES,
    ids=[f"{m} {r.removeprefix(ORG_PREFIX) or '/'}" for m, r, _ in ROUTES],
)
def test_a_non_member_learns_nothing_404(client, gym, outsider, method, rule, access):
    response = client.open(_path(rule, gym.id), method=method, json={}, headers=outsider.headers)
    assert (response.status_code, response.json["code"]) == (404, "organization_not_found")
