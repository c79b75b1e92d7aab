"""Hostile query text on the billing operator routes: a uuid the document gives as
`format: uuid` is read from its canonical text only, not from whatever `uuid.UUID` takes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.billing import factories as bf
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.test_routes import headers, operator  # noqa: F401 (fixtures)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

# uuid.UUID takes each of these: int(hex, 16) reads any Unicode decimal digit, and braces, a
# "urn:uuid:" prefix, no hyphens or hyphens anywhere are dropped before it reads.
NOT_A_UUID = [
    "\u0661" * 32,  # Arabic-Indic digits: read as 11111111-1111-...
    "\uff10" * 32,  # fullwidth zeros: read as the nil uuid
    "{00000000-0000-0000-0000-000000000000}",
    "urn:uuid:00000000-0000-0000-0000-000000000000",
    "0" * 32,
    "0-0000000-0000-0000-0000-000000000000",
]


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


@pytest.mark.parametrize("cursor", NOT_A_UUID)
def test_a_readiness_cursor_is_a_uuid_in_its_canonical_text(
    client,
    session,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
    cursor,
):
    session.commit()
    answer = client.get(
        f"/admin/organizations/{gym.organization.id}/billing-readiness",
        query_string={"cursor": cursor},
        headers=headers(operator),
    )
    assert (answer.status_code, answer.json["code"]) == (400, "cursor_invalid"), answer.json
    assert answer.json["message"]


@pytest.mark.parametrize("organization_id", NOT_A_UUID)
def test_users_me_reads_an_organization_id_in_its_canonical_text(
    client,
    session,
    gym,
    headers,  # noqa: F811
    organization_id,
):
    session.commit()
    answer = client.get(
        "/users/me", query_string={"organizationId": organization_id}, headers=headers(gym.owner)
    )
    assert (answer.status_code, answer.json["code"]) == (400, "organization_id_invalid")
