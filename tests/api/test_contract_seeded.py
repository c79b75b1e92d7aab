"""schemathesis' stateful phase against a seeded server: the document's `links` walk from GET
/users/me to a real organization (the demo gym, members of every role, plans, subscriptions,
transactions, a class session with a booking, an invitation, a join link), so operations are
exercised past their 404. Every answer must be documented (status, content type, body schema,
headers), never a 500.

Derandomized (Hypothesis' fixed seed, bounded scenarios and steps) so that CI is fast and a
failure replays; each scenario runs in a savepoint rolled back at its end, so a scenario that
deletes the organization does not leave the next ones nothing to walk. The stateless run of
every operation is tests/api/test_openapi.py.
"""

from __future__ import annotations

import collections
import re
from datetime import timedelta

import hypothesis
import pytest
import schemathesis
from pydantic import SecretStr
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from gymctl.billing import forecast_runs
from gymctl.bookings import book, schedule
from gymctl.config import Settings
from gymctl.crypto import generate_key_setting
from gymctl.models import Invitation, Membership, PaymentTransaction, Role
from gymctl.models.billing import PlanType
from gymctl.quickstart import seed_demo_gym
from tests import factories
from tests.access.test_join import make_link
from tests.api.test_openapi import (
    ACCEPTS_VALID_BODIES_WITH_400,
    OWNER,
    OWNER_TOKEN,
    POSITIVE_STATUSES,
    _signed,
)
from tests.billing.factories import TEST_KEY, Gym, make_plan, make_subscription, make_transaction
from tests.conftest import NOW
from tests.factories import Person
from webhooks.app import create_app
from webhooks.blueprints.openapi import document

POSITIVE = 2  # examples per operation
NEGATIVE = 1
# Operations that answered something other than 404 in the run; below this the links or the
# seed broke (143 of 161 today; the rest take ids nothing here names: a lead, a sales grant, a
# movement, a retention case, an external issue, a published site; or are the /testing hooks,
# off in this deployment).
AT_LEAST_PAST_404 = 140

# Past their 404 these operations read what a schema cannot say, and refuse schema-valid
# requests with a documented status: the forecast's horizon is relative to now (422), an
# import's CSV is read as CSV (422), a palette's and a website's fields are checked against each
# other and the brand's vocabulary (400), an asset map's keys are slot names (OpenAPI 3.0 has no
# propertyNames) (400), a legal document's publishedAt is relative to now and its url an https
# address with a host (422). Found by a randomized run, and not expressible either: a gym's time
# zone is a name the host's tz database holds (its list moves with tzdata), a join link's planId
# one of this gym's plans, a pack's or drop-in's plan needs validityDays (a rule across fields:
# described, 3.0 has no if/then), a retention contact's time is not in the future (422 each).
REFUSES_VALID_BODIES = (
    ("/admin/legal-documents", "422"),
    ("/admin/organizations/{org_id}/billing-forecast", "422"),
    ("/admin/organizations/{org_id}/billing-forecasts", "422"),
    ("/organizations/{org_id}/sessions", "400"),  # `to` after `from`, 62 days at most
    ("/organizations/{org_id}/exercises", "400"),  # a name with a letter or digit
    # the confirmation time must be written in UTC (date-time allows any offset)
    (
        "/organizations/{org_id}/payments/billing/transactions/{transaction_id}/confirm-no-debit",
        "422",
    ),
    ("/organizations/{org_id}/members/import", "422"),
    ("/organizations/{org_id}/billing/settings", "422"),  # timezone_invalid
    ("/organizations/{org_id}/join-links", "422"),  # join_link_plan_invalid
    ("/organizations/{org_id}/plans", "422"),  # plan_validity_required
    ("/organizations/{org_id}/retention/cases/{case_id}/contacts", "422"),  # contact_in_future
    ("/organizations/{org_id}/brand-workspace/brand", "400"),
    ("/organizations/{org_id}/brand-workspace/website", "400"),
    ("/organizations/{org_id}/branding/assets", "400"),
)

schema = schemathesis.openapi.from_wsgi(
    "/openapi.json",
    create_app(Settings(GYMCTL_ENV="test"), session_factory=sessionmaker()),
    # PostgreSQL cannot store NUL, so every text field refuses it with a documented 400
    # (invalid_body); OpenAPI 3.0 has no way to say so short of a pattern on every string.
    config=schemathesis.Config.from_dict(
        {
            "generation": {"allow-extra-parameters": False, "allow-x00": False},
            "operations": [
                {
                    "include-path": path,
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": [*POSITIVE_STATUSES, "400"]
                        }
                    },
                }
                for path in ACCEPTS_VALID_BODIES_WITH_400
            ]
            + [
                {
                    "include-path": path,
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": [*POSITIVE_STATUSES, status]
                        }
                    },
                }
                for path, status in REFUSES_VALID_BODIES
            ],
        }
    ),
)


@schema.auth(refresh_interval=None).apply_to(
    lambda ctx: bool(ctx.operation.definition.raw.get("security"))
)
class OwnerSession:
    """The demo owner, who is also a platform admin here (so /admin routes get past 403)."""

    def get(self, case, context) -> str:
        return OWNER_TOKEN

    def set(self, case, data: str, context) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.fixture
def settings(settings):
    """A deployment with every key set and the bridge enabled, so that national ids, the bridge
    and billing answer past their 503 `*_not_configured` / `bridge_disabled`."""
    return settings.model_copy(
        update={
            "national_id_encryption_key": SecretStr(generate_key_setting("k1")),
            "bridge_credentials_key": SecretStr(generate_key_setting("k1")),
            "billing_encryption_key": SecretStr(TEST_KEY),
            "bridge_api_url": "http://127.0.0.1:9/api/public",  # nothing listens on loopback:9
        }
    )


def seed(session) -> tuple[Gym, PaymentTransaction]:
    """The demo gym, plus an admin, plans, subscriptions, transactions, a class session with a
    booking, a pending invitation, a join link and a queued billing forecast."""
    demo = seed_demo_gym(session, now=NOW)
    organization = demo.organization
    people = {role: [] for role in Role}
    for user, role in demo.people:
        people[role].append(user)
    admin = factories.user(session, email="admin@demo-gym.example", email_verified_at=NOW)
    factories.membership(session, user=admin, organization=organization, role=Role.admin)
    memberships = {
        m.user_id: m
        for m in session.scalars(
            select(Membership).where(Membership.organization_id == organization.id)
        )
    }
    owner, member = people[Role.owner][0], people[Role.member][0]
    gym = Gym(
        organization,
        {
            Role.owner: Person(owner, memberships[owner.id]),
            Role.member: Person(member, memberships[member.id]),
        },
    )
    card = make_plan(session, organization, PlanType.card)
    make_plan(session, organization, PlanType.pack)
    make_plan(session, organization, PlanType.cash)
    subscription = make_subscription(session, gym, plan=card)
    make_subscription(session, gym, plan=card, membership=gym.owner_membership)
    paid = make_transaction(session, gym, subscription_id=subscription.id)
    make_transaction(session, gym, provider="card_provider", amount_in_cents=4500)
    strength = schedule.create_class_type(
        session,
        organization.id,
        name="Strength 101",
        default_capacity=8,
        duration_minutes=60,
        now=NOW,
    )
    tomorrow = schedule.schedule_session(
        session, strength, starts_at=NOW + timedelta(days=1), now=NOW
    )
    book.book(
        session,
        organization.id,
        tomorrow.id,
        gym.membership,
        actor_user_id=member.id,
        now=NOW,
    )
    session.add(
        Invitation(
            organization_id=organization.id,
            email="invitee@example.test",
            role=Role.member,
            invited_by_user_id=owner.id,
            created_at=NOW,
            expires_at=NOW + timedelta(days=7),
        )
    )
    make_link(session, organization)
    forecast_runs.request_forecast(
        session,
        organization.id,
        forecast_runs.ForecastRequest(until=NOW + timedelta(days=30)),
        now=NOW,
        requested_by=None,
    )
    session.commit()
    return gym, paid


def _pointer(document, pointer: str):
    """A JSON pointer into an answer; None when it names nothing (an empty list)."""
    node = document
    for part in pointer.lstrip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def follow_links(client, document) -> dict[str, str]:
    """Walk the document's links from GET /users/me: call each GET operation whose answer links
    to others once every parameter of its own path is known, and keep what its links name.
    Returns the path parameters found (organization, member, plan, session ...)."""
    found: dict[str, str] = {}
    called: set[str] = set()
    progress = True
    while progress:
        progress = False
        for path, operations in document["paths"].items():
            operation = operations.get("get")
            if operation is None or path in called:
                continue
            links = [
                link
                for answer in operation["responses"].values()
                for link in answer.get("links", {}).values()
            ]
            wanted = re.findall(r"{([^{}]+)}", path)
            if not links or not set(wanted) <= set(found):
                continue
            called.add(path)
            progress = True
            response = client.get(
                path.format(**found), headers={"Authorization": f"Bearer {OWNER_TOKEN}"}
            )
            assert response.status_code == 200, (path, response.status_code)
            for link in links:
                for name, expression in link["parameters"].items():
                    if expression.startswith("$response.body#") and name not in found:
                        value = _pointer(response.json, expression.removeprefix("$response.body#"))
                        if isinstance(value, str):
                            found[name] = value
    return found


def test_the_seeded_server_answers_every_operation_as_documented(
    app, client, connection, session, idp
):
    assert idp.token(OWNER, now=NOW) == OWNER_TOKEN, "the idp fixture's key changed"
    idp.add_account(OWNER, "owner@demo-gym.example", private_metadata={"platformRole": "admin"})
    _gym, paid = seed(session)
    parameters = follow_links(client, document())
    # No GET names a payment (a desk charge's POST answer does): the seeded one stands in.
    parameters.setdefault("transaction_id", str(paid.id))
    statuses: collections.defaultdict[str, set[int]] = collections.defaultdict(set)
    failures: set[str] = set()

    def exercise(case) -> None:
        # Each call in a savepoint rolled back after it: deleting the organization or a member
        # leaves the next operations the same seeded gym.
        savepoint = connection.begin_nested()
        try:
            kwargs = _signed(case) if case.path == "/webhooks/identity" else {}
            response = case.call(app=app, **kwargs)
            statuses[case.operation.label].add(response.status_code)
            try:
                case.validate_response(response, transport_kwargs=kwargs)
            except (AssertionError, FailureGroup) as error:
                for failure in getattr(error, "exceptions", [error]):
                    failures.add(
                        f"{case.operation.label} {case.meta.generation.mode.value}"
                        f" {response.status_code}"
                        f" {response.text[:120]}: {str(failure).splitlines()[0]}"
                    )
        finally:
            savepoint.rollback()

    for result in schema.get_all_operations():
        operation = result.ok()
        known = {
            name: parameters[name]
            for name in re.findall(r"{([^{}]+)}", operation.path)
            if name in parameters
        }
        for mode, examples in (
            (GenerationMode.POSITIVE, POSITIVE),
            (GenerationMode.NEGATIVE, NEGATIVE),
        ):
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=known)
            try:
                hypothesis.settings(
                    derandomize=True,
                    database=None,
                    max_examples=examples,
                    deadline=None,
                    phases=[hypothesis.Phase.generate],
                    suppress_health_check=list(hypothesis.HealthCheck),
                )(hypothesis.given(strategy)(exercise))()
            except hypothesis.errors.Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # nothing of it can be made invalid

    past_404 = sorted(label for label, seen in statuses.items() if seen - {404})
    only_404 = sorted(set(statuses) - set(past_404))
    print(f"{len(past_404)} of {len(statuses)} operations answered past 404;", only_404)  # noqa: T201
    assert not failures, "\n".join(sorted(failures))
    assert not [label for label, seen in statuses.items() if any(s >= 500 for s in seen)]
    assert len(past_404) >= AT_LEAST_PAST_404, sorted(set(statuses) - set(past_404))


@pytest.mark.parametrize("address", ["a\x1e@example.test", "ann@exam\u2028ple.test", "a\x85b@x.y"])
def test_an_address_with_a_line_break_or_control_character_is_refused_not_a_500(
    client, session, idp, address
):
    """Found by the run above: the address reached the invitation email's To header, which
    refuses what str.splitlines() reads as a line break (500)."""
    gym, _paid = seed(session)
    before = session.scalar(select(func.count()).select_from(Invitation))
    response = client.post(
        f"/organizations/{gym.organization.id}/invitations",
        json={"email": address, "role": "member"},
        headers={"Authorization": f"Bearer {OWNER_TOKEN}"},
    )
    assert (response.status_code, response.json["code"]) == (422, "email_invalid")
    session.expire_all()
    assert session.scalar(select(func.count()).select_from(Invitation)) == before
