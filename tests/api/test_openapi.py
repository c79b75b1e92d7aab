"""The served OpenAPI document against the app's real behaviour (schemathesis, in process).

Every operation of /openapi.json is called with generated requests (positive and negative)
through the WSGI app of the test fixtures: rolled-back PostgreSQL, fixed clock, the stand-in
identity provider. Each response must be documented: status code, content type, body schema,
headers, never a 500. The document is generated (webhooks.openapi_build) from the route table
and the body models; a test keeps the committed copy equal to what the code builds.

The schema is fetched from an app at import time because `schema.parametrize()` needs it then;
the lazy `schemathesis.pytest.from_fixture` cannot be used with the installed pytest (9.x has no
`Node._nodeid`, which schemathesis 4 sets). The requests themselves go to the fixture's `app`.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from openapi_spec_validator import OpenAPIV30SpecValidator
from schemathesis import GenerationMode
from sqlalchemy.orm import sessionmaker

from gymctl.config import Settings
from gymctl.errors import DomainError
from gymctl.identity.webhook_signature import sign
from gymctl.quickstart import seed_demo_gym
from tests.conftest import NOW, WEBHOOK_SECRET
from tests.idp import IdentityProvider
from webhooks import openapi_build
from webhooks.app import create_app
from webhooks.blueprints.openapi import document

OWNER = "user_demo_owner"

# Every built-in check. Negative cases that only add undeclared query parameters, headers or
# body properties are not generated: the app ignores those (the document does not say they are
# refused).
# An invitation token is valid only when the app signed it for a live invitation, which a
# generated one never is: a schema-valid /invitations/accept body is refused with the documented
# 400 ticket_invalid, so that operation's positive cases may also answer 400.
# Payment webhooks likewise: a schema-valid delivery names no page the provider knows (400
# deal_not_found), and every rejection of the card provider is a 400 (spec B 6).
ACCEPTS_VALID_BODIES_WITH_400 = (
    "/invitations/accept",
    "/webhooks/card-provider/{org_id}",
    "/webhooks/payments/{provider}/{org_id}",
)
POSITIVE_STATUSES = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]  # schemathesis' own
CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {"allow-extra-parameters": False},
        "operations": [
            {
                "include-path": path,
                "checks": {
                    "positive_data_acceptance": {"expected-statuses": [*POSITIVE_STATUSES, "400"]}
                },
            }
            for path in ACCEPTS_VALID_BODIES_WITH_400
        ],
    }
)


def _served_schema():
    """/openapi.json as an app serves it (in process; that route touches no database)."""
    app = create_app(Settings(GYMCTL_ENV="test"), session_factory=sessionmaker())
    return schemathesis.openapi.from_wsgi("/openapi.json", app, config=CONFIG)


schema = _served_schema()


@pytest.fixture
def demo(session) -> None:
    """The demo gym: its owner has memberships and legal consents owed."""
    seed_demo_gym(session, now=NOW)
    session.commit()


def _owner_token() -> str:
    """The demo owner's session token. Coverage cases are built (and signed in) at collection,
    before any fixture, so it is minted here; RS256 is deterministic and the stand-in provider's
    key is one per test session, so it equals what the `idp` fixture mints (checked below)."""
    provider = IdentityProvider()
    try:
        return provider.token(OWNER, now=NOW)
    finally:
        provider.close()


OWNER_TOKEN = _owner_token()


def _bearer_operation(ctx) -> bool:
    """Operations the document marks with the bearer scheme (public ones have `security: []`)."""
    return bool(ctx.operation.definition.raw.get("security"))


@schema.auth(refresh_interval=None).apply_to(_bearer_operation)
class OwnerSession:
    """Signs generated calls to every bearer operation in as the demo owner, so they get past the
    guard (/users/me answers 200; the access routes reach their own refusals: the owner holds no
    platform admin role or owner grant, and generated ids name no organization of theirs).
    Schemathesis leaves the header off (or broken) in the cases that test the 401, and
    `ignored_auth` replays calls without it and with a bad one."""

    def get(self, case, context) -> str:
        return OWNER_TOKEN

    def set(self, case, data: str, context) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.fixture
def owner_session(idp) -> None:
    assert idp.token(OWNER, now=NOW) == OWNER_TOKEN, "the idp fixture's key changed"


def _signed(case) -> dict[str, object]:
    """Schema-valid deliveries are signed like the provider's, so the 200 path is exercised too;
    negative ones go out as generated and must be refused with a documented 400."""
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return {}
    body = json.dumps(case.body).encode()
    delivery_id = f"msg_{uuid.uuid4().hex}"
    timestamp = int(NOW.timestamp())
    headers = {
        "svix-id": delivery_id,
        "svix-timestamp": str(timestamp),
        "svix-signature": sign(WEBHOOK_SECRET, delivery_id, timestamp, body),
    }
    return {"headers": headers, "data": body}


@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_conforms_to_the_document(case, app, demo, owner_session):
    kwargs = _signed(case) if case.path == "/webhooks/identity" else {}
    case.call_and_validate(app=app, **kwargs)


def test_the_generated_calls_sign_the_demo_owner_in(client, demo, owner_session):
    """Without this, a stale token would only turn the 200s into (documented) 401s."""
    response = client.get("/users/me", headers={"Authorization": f"Bearer {OWNER_TOKEN}"})
    assert response.status_code == 200
    assert response.json["activeOrganization"]["slug"] == "demo-gym"


def test_the_committed_document_is_what_the_code_generates_and_it_validates(app):
    """Generated from the route table and the body models (webhooks.openapi_build), so it
    cannot drift: after changing a route or a model, run `python -m webhooks.openapi_build`."""
    generated = openapi_build.build(app)
    assert OpenAPIV30SpecValidator(generated).is_valid()
    assert generated == document(), "webhooks/openapi.json is stale"


def test_every_route_needs_its_operation_and_every_operation_its_route(app):
    @app.post("/undocumented")
    def undocumented():
        return {}

    with pytest.raises(ValueError, match="POST /undocumented has no operation"):
        openapi_build.build(app)


def test_a_request_body_is_the_schema_of_the_model_its_view_parses():
    from webhooks.blueprints.join import CheckoutFailed, checkout_failed

    assert openapi_build.body_model(checkout_failed) is CheckoutFailed
    operation = document()["paths"]["/join/{token}/checkout-failed"]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/body.CheckoutFailed"}
    assert document()["components"]["schemas"]["body.CheckoutFailed"]["properties"]["email"][
        "nullable"
    ]
    assert operation["responses"]["413"]


def test_a_string_with_a_minimum_length_is_documented_as_the_model_reads_it():
    """A body model strips whitespace before it checks a length: schemathesis sent the
    document-valid `{"name": " "}` to POST /organizations and got 400. Such a string is now
    documented as holding a character that is neither whitespace nor NUL, and the document's
    pattern says of every character what the model does."""
    from webhooks.blueprints.organizations import CreateGym

    name = document()["components"]["schemas"]["body.CreateGym"]["properties"]["name"]
    pattern = re.compile(name["pattern"])
    assert not pattern.search(" ")
    assert pattern.search(" a ")
    for code in (*range(1, 0x3100), 0xFEFF):
        if 0xD800 <= code <= 0xDFFF:
            continue
        try:
            CreateGym.model_validate({"name": chr(code), "slug": "x"})
            accepted = True
        except ValueError:
            accepted = False
        assert accepted == bool(pattern.search(chr(code))), hex(code)
    for query in (
        "/admin/exercises/canonical/jobs",
        "/admin/organizations/{org_id}/billing-forecast",
    ):
        assert "requestBody" not in document()["paths"][query]["get"], "a query is no body"


def _samples() -> set[str]:
    """Every character up to U+30FF (and a BOM, an emoji) alone, at either end, inside, doubled
    and padded: where a strip, a length and a per-character rule can disagree."""
    samples: set[str] = set()
    for code in (*range(0x3100), 0xFEFF, 0x1F600):
        if 0xD800 <= code <= 0xDFFF:
            continue
        c = chr(code)
        samples.update({c, c + "a", "a" + c, "a" + c + "b", c + c, " " + c + " "})
    return samples


def _accepts(check, value: str) -> bool:
    try:
        check(value)
    except (ValueError, DomainError):  # pydantic's ValidationError is a ValueError
        return False
    return True


def test_a_one_line_name_is_documented_as_the_server_reads_it():
    """Found by a randomized seeded run: a class type's and an app's names matched the document
    and were refused (400 class_type_name_invalid, brand_name_invalid: one line). The pattern
    says what the model strips and the domain then refuses, no more and no less, so that a
    document-valid name is taken and a document-invalid one refused."""
    from gymctl.branding.workspace import MAX_APP_NAME, _brand_name
    from gymctl.text import one_line
    from webhooks.blueprints.bookings import ClassTypeBody
    from webhooks.blueprints.branding import AppDraftBody

    schemas = document()["components"]["schemas"]

    def class_type(name: str) -> None:
        body = ClassTypeBody.model_validate(
            {"name": name, "defaultCapacity": 1, "durationMinutes": 5}
        )
        if not one_line(body.name):
            raise ValueError(name)

    def app_name(name: str) -> None:
        _brand_name(AppDraftBody.model_validate({"displayName": name}).display_name, MAX_APP_NAME)

    for schema, check in (
        (schemas["body.ClassTypeBody"]["properties"]["name"], class_type),
        (schemas["body.AppDraftBody"]["properties"]["displayName"], app_name),
    ):
        pattern = re.compile(schema["pattern"])
        for name in _samples():
            assert bool(pattern.search(name)) == _accepts(check, name), repr(name)


def test_a_failed_checkouts_address_is_documented_as_the_server_reads_it():
    """Found by a randomized seeded run: any text was a document-valid address (422
    email_invalid). Now an address as normalize_email reads one, or blank (no address)."""
    from gymctl.access.invitations import normalize_email
    from webhooks.blueprints.join import CheckoutFailed

    schema = document()["components"]["schemas"]["body.CheckoutFailed"]["properties"]["email"]
    pattern = re.compile(schema["pattern"])

    def checkout(address: str) -> None:
        body = CheckoutFailed.model_validate({"email": address})
        if body.email:
            normalize_email(body.email)

    for address in ("", " ", "ann@example.test", " ann@example.test\n", "\u00e9@\u00e9.fr"):
        assert pattern.search(address), repr(address)
        assert _accepts(checkout, address), repr(address)
    for piece in _samples():
        for address in (piece, f"a{piece}@b.cd", f"a@b{piece}.cd", f"{piece}a@b.cd"):
            if pattern.search(address):
                assert _accepts(checkout, address), repr(address)
    long_domain = "a@" + "\u0130" + "b" * 314 + ".cd"  # 320: lower-casing makes it 321
    assert not pattern.search(long_domain)
    assert not _accepts(checkout, long_domain)


def test_the_refusals_every_route_makes_are_documented_on_every_operation(client, demo):
    """Every route has a body limit and every path is refused with a NUL in it, before the
    route runs: a webhook whose raw body is over its limit answered 413 and a join token
    holding a NUL answered 400 path_invalid, neither of which their operations listed."""
    paths = document()["paths"]
    huge = client.post("/webhooks/identity", data=b"{" + b" " * 300_000 + b"}")
    assert (huge.status_code, huge.json["code"]) == (413, "body_too_large")
    nul = client.get("/join/%00")
    assert (nul.status_code, nul.json["code"]) == (400, "path_invalid")
    assert "413" in paths["/webhooks/identity"]["post"]["responses"]
    assert "400" in paths["/join/{token}"]["get"]["responses"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            if method in openapi_build.BODY_METHODS:
                assert "413" in operation["responses"], f"{method} {path}"
            if "{" in path and method in openapi_build.METHODS:
                assert "400" in operation["responses"], f"{method} {path}"


def test_openapi_path_conversion():
    assert openapi_build.openapi_path("/a/<int:b>/c/<d>") == "/a/{b}/c/{d}"


def test_the_served_document_is_the_repo_document(client):
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.json == document()


def test_405_lists_the_allowed_methods(client):
    response = client.delete("/health")
    assert response.status_code == 405
    assert set(response.headers.get("Allow", "").replace(" ", "").split(",")) >= {"GET"}


def test_a_non_ascii_digit_branding_schema_is_refused(client, demo, owner_session):
    response = client.get(
        "/users/me",
        query_string={"brandingSchema": "²"},
        headers={"Authorization": f"Bearer {OWNER_TOKEN}"},
    )
    assert (response.status_code, response.json["code"]) == (400, "schema_unsupported")


def test_a_signed_event_with_a_nul_is_refused(client):
    body = json.dumps({"type": "user.\u0000", "data": {}}).encode()
    timestamp = int(NOW.timestamp())
    headers = {
        "svix-id": "msg_nul",
        "svix-timestamp": str(timestamp),
        "svix-signature": sign(WEBHOOK_SECRET, "msg_nul", timestamp, body),
    }
    response = client.post(
        "/webhooks/identity", data=body, headers=headers, content_type="application/json"
    )
    assert (response.status_code, response.json["code"]) == (400, "webhook_payload_invalid")
