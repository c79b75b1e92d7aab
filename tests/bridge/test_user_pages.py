"""GET /v3/users read page by page (the roster import, drift) against an external system whose
meta.next_page names the page just read (a hunter's test of s55): both asked for the same page
for ever, the import holding the organization's dispatch lock. The read now stops at such an
answer, refused as the external system's failure (`client.user_pages`)."""

from __future__ import annotations

import pytest

from gymctl.bridge.client import ExternalCallError, ExternalGymClient, Throttle
from gymctl.bridge.connection import import_roster
from gymctl.bridge.drift import read_external
from tests.bridge.conftest import API_KEY
from tests.conftest import NOW


@pytest.fixture
def stuck(fake, account):
    for n in range(3):
        fake.add_user(account, f"member{n}@example.test")
    fake.stuck_pages = True
    with ExternalGymClient(fake.url, API_KEY, throttle=Throttle(None), account_id="777") as client:
        yield client


def _reads(fake) -> int:
    return len(fake.calls_to("GET /v3/users"))


def test_the_roster_import_stops_at_a_next_page_that_does_not_move_on(
    session, connected, fake, stuck
):
    with pytest.raises(ExternalCallError) as failed:
        import_roster(session, connected, stuck, now=NOW)
    assert (failed.value.kind, failed.value.route) == ("server", "/users")
    assert _reads(fake) == 1


def test_drift_stops_at_a_next_page_that_does_not_move_on(session, connected, fake, stuck):
    with pytest.raises(ExternalCallError):
        read_external(session, connected.organization_id, stuck, NOW)
    assert _reads(fake) == 1


def test_a_next_page_given_as_digits_pages_on(session, connected, fake, account):
    """The external system's next_page as text ("2"): a page number all the same."""
    for n in range(3):
        fake.add_user(account, f"member{n}@example.test")
    fake.page_numbers_as_text = True
    with ExternalGymClient(fake.url, API_KEY, throttle=Throttle(None), account_id="777") as client:
        outcome = import_roster(session, connected, client, now=NOW)
    assert outcome["fetched"] == 3


@pytest.mark.parametrize("odd", [None, "", {"n": 1}], ids=repr)
def test_a_page_with_an_odd_user_id_is_the_external_systems_failure(
    session, connected, fake, account, odd
):
    """A user whose id is none is refused as the schedule's odd class is (client.schedule_rows):
    the roster import stored the user "None" for the gym's members to be matched against."""
    from sqlalchemy import select

    from gymctl.models.bridge import RosterEntry

    fake.add_user(account, "kept@example.test")
    fake.add_user(account, "odd@example.test", id=odd)
    client = ExternalGymClient(fake.url, API_KEY, throttle=Throttle(None), account_id="777")
    with client, pytest.raises(ExternalCallError) as failed:
        import_roster(session, connected, client, now=NOW)
    assert (failed.value.kind, failed.value.route) == ("server", "/users")
    session.rollback()
    assert session.scalars(select(RosterEntry.external_id)).all() == []
