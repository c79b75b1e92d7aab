"""Every route that takes an id, called by every role of gym A with gym B's ids (issue 20).

Gym A and gym B are seeded alike (tests/api/seed.py); the calls are the ones that reach success
on a gym's own objects (tests/api/suite.py), made from A's organization path with B's ids in the
path and B's objects named in the body. Each answer is a JSON 403/404 with a code (never 2xx,
never 500) and nothing outside gym A changed. The routes come from the route table, so a new
route is probed as soon as it has a call; one without a call is listed in suite.UNCOVERED.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import Base, Role
from tests.access.conftest import NOT_STATE
from tests.api import seed
from tests.api.suite import CALLS, ROUTES, UNCOVERED, request_for, rolled_back
from tests.billing.conftest import card_server  # noqa: F401 (fixture)

# A refusal that names the foreign object's kind, spec-given, where the route checks a body's
# reference rather than a path id: (route, status, code).
FOREIGN_BODY_REFUSALS = {
    # spec A 4 rule 10: "a key outside the organization's prefix gives brand_asset_not_owned"
    (("PUT", "/branding/assets"), 400, "brand_asset_not_owned"),
}


# A route that answers a foreign reference as a no-op, by design: {"revoked": false} for a device
# token the caller does not hold (tests/releases/test_push.py: revoking someone else's token does
# nothing; "not yours" would tell whether another person's device is registered).
NO_OP_ANSWERS = {(("POST", "/push-registrations/revoke"), 200): {"revoked": False}}


def _values(value) -> set[str]:
    """Every leaf of a nested dict/list, as text."""
    if isinstance(value, dict):
        return set().union(*map(_values, value.values())) if value else set()
    if isinstance(value, list | tuple):
        return set().union(*map(_values, value)) if value else set()
    return {str(value)} if value is not None else set()


# Seeded values that are not references to the tenant's rows: the accounts a gym types in at the
# card provider and the external gym system (credentials that prove the account is the caller's,
# not ids of ours) and a date.
NOT_REFERENCES = {"terminal", "bridge_key", "next_charge"}


def _ids_of(tenant: seed.Tenant) -> set[str]:
    people = {str(person.user.id) for person in tenant.people.values()}
    ids = {k: v for k, v in tenant.ids.items() if k not in NOT_REFERENCES}
    return {str(tenant.id)} | people | _values(ids)


def names_an_object(call: seed.Call, ids: set[str]) -> bool:
    """Does the call put one of the tenant's ids (or object keys) in its path or body?"""
    in_the_body = {value for value in _values(call.json) if len(value) >= 16}  # not counts
    return bool((_values(call.params) | in_the_body) & ids)


@pytest.fixture
def gyms(session, idp, suite_app, card_server, fake_gym):  # noqa: F811
    client = suite_app.test_client()
    a = seed.make_tenant(session, idp, name="Gym A", tag="gyma")
    b = seed.make_tenant(session, idp, name="Gym B", tag="gymb")
    seed.seed(client, session, a, card_server, fake_gym)
    seed.seed(client, session, b, card_server, fake_gym)
    seed.loaded(session, a, b)
    session.close()
    return a, b


def outside(session_factory, tenant: seed.Tenant) -> dict[str, list[str]]:
    """Every row that is not the tenant's own (other gyms' rows, shared users, platform rows)."""
    with session_factory() as session:
        state = {}
        for table in Base.metadata.sorted_tables:
            if table.name in NOT_STATE:
                continue
            query = select(table)
            if "organization_id" in table.c:
                query = query.where(
                    (table.c.organization_id != tenant.id) | table.c.organization_id.is_(None)
                )
            state[table.name] = sorted(repr(tuple(row)) for row in session.execute(query))
        return state


def probed_routes(b: seed.Tenant) -> list[tuple[str, str]]:
    ids = _ids_of(b)
    return [
        key for key in ROUTES if key in CALLS and names_an_object(CALLS[key](b, Role.owner), ids)
    ]


def test_the_probed_routes_are_every_route_that_takes_an_id(gyms):
    """Each route with an id in its path is probed or listed (with its reason) as uncovered."""
    _, b = gyms
    probed = set(probed_routes(b))
    with_path_ids = {key for key in ROUTES if "<uuid:" in key[1] or "<op_id>" in key[1]}
    assert with_path_ids - set(UNCOVERED) <= probed
    named_in_the_body = {
        ("POST", "/subscriptions"),  # userId, planId
        ("POST", "/sales-grants"),  # userId
        ("PUT", "/branding/assets"),  # a stored asset's key
        ("POST", "/sessions"),  # classTypeId
        ("POST", "/push-registrations/revoke"),  # a device token
    }
    assert named_in_the_body <= probed


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
def test_gym_a_reaches_nothing_of_gym_b(
    gyms, suite_app, connection, session_factory, clock, idp, role
):
    a, b = gyms
    client = suite_app.test_client()
    wrong = []
    for key in probed_routes(b):
        with rolled_back(connection):
            before = outside(session_factory, a)
            response = request_for(client, a, key, role, clock=clock, idp=idp, target=b)
            after = outside(session_factory, a)
        body = response.get_json(silent=True)
        code = body.get("code") if isinstance(body, dict) else None
        answer = (response.status_code, code)
        refused = response.status_code in (403, 404) or (key, *answer) in FOREIGN_BODY_REFUSALS
        no_op = NO_OP_ANSWERS.get((key, response.status_code)) == body
        if not ((refused and code) or no_op) or before != after:
            changed = sorted(t for t in before if before[t] != after[t])
            wrong.append((role.value, *key, *answer, changed))
    assert wrong == []
