"""The provider's account lookup picks the address by the one address rule
(`identity.users.address_keys`), as sign-up and every lookup read it: by `str.lower()` it missed
'İpek@' for 'ipek@' on PostgreSQL and took 'Élodie@' for 'élodie@' on SQLite (decisions s48)."""

from __future__ import annotations

import functools

import httpx
import pytest

from gymctl.identity.users import address_keys, is_same_address
from gymctl.providers.identity_admin import HttpIdentityAdmin

pytestmark = pytest.mark.embedded  # the fold is the engine's: both engines


@pytest.mark.parametrize(
    ("held", "asked"),
    [
        ("Ann@Example.test", "ann@example.TEST"),
        ("İpek@example.test", "ipek@example.test"),
        ("Élodie@example.test", "élodie@example.test"),
    ],
)
def test_the_lookup_finds_the_account_exactly_when_the_addresses_are_one(
    engine, session, clock, held, asked
):
    def provider(request: httpx.Request) -> httpx.Response:
        address = {"id": "idn_1", "email_address": held, "verification": {"status": "verified"}}
        return httpx.Response(200, json=[{"id": "user_1", "email_addresses": [address]}])

    client = httpx.Client(transport=httpx.MockTransport(provider))
    admin = HttpIdentityAdmin("https://idp.example.test", "sk_test_x", client=client, clock=clock)

    account = admin.find_account(asked, functools.partial(address_keys, session))

    found = account is not None and account.identity_id == "user_1"
    assert found == is_same_address(session, held, asked)
