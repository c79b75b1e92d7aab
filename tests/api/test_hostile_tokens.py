"""Forged and malformed session tokens on a bearer route (issue 20, spec A 5.1, 7): every one is
a 401 JSON answer with a code and changes nothing, never a 500. The deployment verifies against
the provider's key set on loopback (no PEM), the path where a `kid` is looked up."""

from __future__ import annotations

import base64
import json

import pytest
from jwt.algorithms import RSAAlgorithm
from sqlalchemy import func, select

from gymctl.config import Settings
from gymctl.models import User, UserSession
from tests.access.conftest import snapshot
from tests.conftest import NOW, WEBHOOK_SECRET
from webhooks.app import create_app

APP = "https://app.example.test"


@pytest.fixture
def client(idp, session_factory, clock):
    settings = Settings(
        GYMCTL_ENV="test",
        IDENTITY_API_URL=idp.url,
        IDENTITY_SECRET_KEY=idp.SECRET_KEY,
        IDENTITY_WEBHOOK_SECRET=WEBHOOK_SECRET,
        IDENTITY_AUTHORIZED_PARTIES=APP,
        IDENTITY_ISSUER="https://clerk.example.test",
        IDENTITY_AUDIENCE="gymctl-api",
    )
    return create_app(settings, session_factory=session_factory, clock=clock).test_client()


def token(idp, *, kid=None, literal=None, **claims):
    """`literal`: claims written into the payload as raw JSON text (1e400 parses to infinity)."""
    payload = {
        "sub": "user_alice",
        "sid": "sess_1",
        "iat": int(NOW.timestamp()),
        "exp": int(NOW.timestamp()) + 60,
        "azp": APP,
        "iss": "https://clerk.example.test",
        "aud": "gymctl-api",
        **claims,
    }
    header = {"alg": "RS256", "typ": "JWT", "kid": idp.key.kid if kid is None else kid}
    body = json.dumps({**payload, **{name: f"@{name}@" for name in literal or {}}})
    for name, text in (literal or {}).items():
        body = body.replace(f'"@{name}@"', text)
    # Signed by hand: PyJWT refuses to encode some of these shapes, a forger does not.
    signing_input = f"{_b64(header)}.{_b64_text(body)}".encode()
    signature = RSAAlgorithm(RSAAlgorithm.SHA256).sign(signing_input, idp.key.private)
    return f"{signing_input.decode()}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _b64(part: dict) -> str:
    return _b64_text(json.dumps(part))


def _b64_text(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def me(client, raw):
    return client.get("/users/me", headers={"Authorization": f"Bearer {raw}"})


def test_a_well_formed_token_of_this_deployment_passes(client, idp):
    assert me(client, token(idp)).status_code == 200


@pytest.mark.parametrize(
    ("claims", "code"),
    [
        ({"kid": ["kid-1"]}, "token_malformed"),
        ({"kid": {"id": "kid-1"}}, "token_malformed"),
        ({"kid": 7}, "token_malformed"),
        ({"sub": "user_\x00alice"}, "token_claims"),
        ({"sub": "user_" + "a" * 124}, "token_claims"),
        ({"sub": ["user_alice"]}, "token_invalid"),
        ({"sid": "sess_" + "s" * 4995}, "token_claims"),
        ({"sid": "sess\n1"}, "token_claims"),
        ({"act": {"sub": "user_op" + "x" * 200}}, "token_claims"),
        ({"act": "user_op"}, "token_claims"),
        ({"azp": "https://evil.example"}, "token_unauthorized_party"),
        ({"azp": ["https://app.example.test"]}, "token_unauthorized_party"),
        ({"iss": "https://clerk.other.example"}, "token_issuer"),
        ({"iss": None}, "token_issuer"),
        ({"aud": "another-api"}, "token_audience"),
        ({"aud": ["another-api", 7]}, "token_audience"),
        ({"aud": {"gymctl-api": True}}, "token_audience"),
        ({"aud": None}, "token_audience"),
    ],
    ids=lambda value: repr(value)[:40],
)
def test_a_hostile_token_is_a_401_json_answer_that_changes_nothing(
    client, idp, session, claims, code
):
    before = snapshot(session)

    response = me(client, token(idp, **claims))

    assert (response.status_code, response.json["code"]) == (401, code)
    assert snapshot(session) == before
    assert session.scalar(select(func.count()).select_from(UserSession)) == 0
    assert session.scalar(select(func.count()).select_from(User)) == 0


@pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", '"soon"', "[1]"])
def test_a_time_claim_that_is_no_finite_number_is_token_claims_not_a_500(
    client, idp, session, claim, number
):
    before = snapshot(session)

    response = me(client, token(idp, literal={claim: number}))

    assert (response.status_code, response.json["code"]) == (401, "token_claims")
    assert snapshot(session) == before
    assert session.scalar(select(func.count()).select_from(UserSession)) == 0


def test_a_longest_allowed_sub_and_sid_fit_their_columns(client, idp, session):
    sub, sid = "user_" + "a" * 123, "sess_" + "s" * 123

    response = me(client, token(idp, sub=sub, sid=sid))

    assert response.status_code == 200
    assert response.json["user"]["identityId"] == sub


def test_a_header_nested_thousands_deep_is_token_malformed_not_a_500(client, session):
    """A JOSE header of 5,000 nested arrays (6.7 KB base64, under gunicorn's 8,190-byte header
    line) made json.loads recurse out of the stack: a 500 on every bearer route, before any
    signature was checked. Its depth is now measured first, as a body's is."""
    head = base64.urlsafe_b64encode(b"[" * 5000).rstrip(b"=").decode()
    before = snapshot(session)

    by_header = me(client, f"{head}.e30.c2ln")
    client.set_cookie("__session", f"{head}.e30.c2ln")
    by_cookie = client.get("/users/me")

    for response in (by_header, by_cookie):
        assert (response.status_code, response.json["code"]) == (401, "token_malformed")
    assert snapshot(session) == before
