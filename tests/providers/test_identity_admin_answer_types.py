"""The provider's answers are read defensively: a field of an unexpected type is read as absent
(no account, an unproven address) and an answer that cannot be read at all is an
IdentityAdminError (a 502), never an AttributeError or TypeError that answers 500."""

from __future__ import annotations

import functools

import httpx
import pytest

from gymctl.identity.users import address_keys
from gymctl.providers.identity_admin import Account, HttpIdentityAdmin, IdentityAdminError

EMAIL = "ann@example.test"


def _admin(clock, body) -> HttpIdentityAdmin:
    def provider(request: httpx.Request) -> httpx.Response:
        if isinstance(body, bytes):
            return httpx.Response(200, content=body)
        return httpx.Response(200, json=body)

    client = httpx.Client(transport=httpx.MockTransport(provider))
    return HttpIdentityAdmin("https://idp.example.test", "sk_test_x", client=client, clock=clock)


def _user(**fields):
    address = {"id": "idn_1", "email_address": EMAIL, **fields.pop("address", {})}
    return {"id": "user_1", "email_addresses": [address], **fields}


@pytest.mark.parametrize(
    "verification", ["verified", ["verified"], 1, True, {"status": ["verified"]}]
)
def test_a_verification_that_is_not_an_object_reads_as_unproven(session, clock, verification):
    admin = _admin(clock, [_user(address={"verification": verification})])

    account = admin.find_account(EMAIL, functools.partial(address_keys, session))

    assert account == Account(identity_id="user_1", email=EMAIL, email_verified=False)


@pytest.mark.parametrize(
    "user",
    [
        _user(email_addresses=5),
        _user(email_addresses=EMAIL),
        _user(email_addresses={"email_address": EMAIL}),
        _user(email_addresses=[EMAIL, None, 3]),
        _user(id=None),
        _user(id=7),
        _user(id={"id": "user_1"}),
        _user(id=""),
        _user(address={"email_address": ["ann@example.test"]}),
        "user_1",
        None,
    ],
)
def test_a_user_or_address_of_the_wrong_shape_holds_no_account(session, clock, user):
    admin = _admin(clock, [user])

    assert admin.find_account(EMAIL, functools.partial(address_keys, session)) is None


@pytest.mark.parametrize("body", [{"data": []}, "users", 3, b"[" * 100_000 + b"]" * 100_000])
def test_an_answer_that_is_no_list_of_users_is_an_identity_admin_error(session, clock, body):
    admin = _admin(clock, body)

    with pytest.raises(IdentityAdminError):
        admin.find_account(EMAIL, functools.partial(address_keys, session))
