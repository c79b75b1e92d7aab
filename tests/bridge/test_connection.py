"""The connection (spec B 2.6, 5): a key checked with a real call and stored encrypted, the
roster import without phones, disconnect purging, and the owners' HTTP routes."""

from __future__ import annotations

import socket
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from gymctl.bridge import dispatcher, enqueue, entity_map
from gymctl.bridge.client import CallFailure, ExternalCallError, ExternalGymClient, Throttle
from gymctl.bridge.connection import connect, disconnect, import_roster
from gymctl.errors import DomainError
from gymctl.models import IntegrationConnection, Role, RosterEntry
from gymctl.models.bridge import ConnectionStatus, EntityType, OpStatus, Origin
from tests import factories
from tests.access.conftest import snapshot
from tests.bridge.conftest import API_KEY, member_payload, run
from tests.conftest import NOW


def test_a_checked_key_is_stored_encrypted_and_names_the_account(session, org, connected):
    assert connected.status is ConnectionStatus.active
    assert (connected.external_account_id, connected.bridge_membership_type_id) == ("777", "60")
    assert API_KEY not in connected.credentials_ciphertext
    assert connected.credentials_ciphertext.startswith("v1.b1.")


@pytest.mark.parametrize(
    ("setup", "code", "status"),
    [
        ("bad_key", "bridge_key_invalid", 400),
        ("no_free_type", "bridge_membership_type_missing", 409),
        ("two_free_types", "bridge_membership_type_ambiguous", 409),
        ("unknown_type", "bridge_membership_type_invalid", 409),
        ("malformed", "bridge_key_malformed", 400),
        ("not_ascii", "bridge_key_malformed", 400),
        ("disabled", "bridge_disabled", 503),
        ("no_cipher", "bridge_not_configured", 503),
    ],
)
def test_connect_refusals_store_nothing(session, org, fake, bridge_settings, setup, code, status):
    key, chosen, settings = API_KEY, None, bridge_settings
    if setup != "bad_key":
        fake.add_account(API_KEY, free_types={"no_free_type": 0, "two_free_types": 2}.get(setup, 1))
    if setup == "unknown_type":
        chosen = "50"  # the priced recurring type: never the bridge's
    if setup == "malformed":
        key = "two words"
    if setup == "not_ascii":
        key = "\ua2ceßkey"  # the api-key header cannot carry it (it reached the client: 500)
    if setup == "disabled":
        settings = settings.model_copy(update={"bridge_api_url": None})
    if setup == "no_cipher":
        settings = settings.model_copy(update={"bridge_credentials_key": None})
    before = snapshot(session)
    with pytest.raises(DomainError) as refused:
        connect(session, org.id, key, settings=settings, now=NOW, membership_type_id=chosen)
    assert (refused.value.code, refused.value.status) == (code, status)
    session.rollback()
    assert snapshot(session) == before


def test_a_check_that_cannot_finish_keeps_the_key_pending_until_the_dispatcher_checks_it(
    session, org, fake, bridge_settings, clock, monkeypatch
):
    """The dispatcher's check holds no transaction open across its calls (on SQLite that
    would hold the write lock while the external system answers)."""
    in_transaction = []
    real_check = dispatcher.check_account

    def check_account(client, membership_type_id):
        in_transaction.append(session.in_transaction())
        return real_check(client, membership_type_id)

    monkeypatch.setattr(dispatcher, "check_account", check_account)
    fake.add_account(API_KEY)
    pending, op, _ = _pending_then_checked(session, org, fake, bridge_settings, clock)
    assert pending.status is ConnectionStatus.active
    assert op.status is OpStatus.succeeded
    assert in_transaction == [False]


@pytest.mark.embedded
@pytest.mark.parametrize("key", [API_KEY, "another-key-of-the-same-account"])
def test_a_second_gym_is_refused_an_external_account_another_gym_is_active_on(
    session, org, connected, account, fake, bridge_settings, key
):
    """Its members would be written into the first gym's system and that gym's roster
    imported as its own: 409 bridge_account_in_use, nothing stored, nothing read from the
    first gym's roster; the other gym is not named (another tenant)."""
    fake.accounts[key] = account
    second = factories.organization(session, name="Copper Temple")
    session.commit()
    before = snapshot(session)
    with pytest.raises(DomainError) as refused:
        connect(session, second.id, key, settings=bridge_settings, now=NOW)
    assert (refused.value.code, refused.value.status) == ("bridge_account_in_use", 409)
    assert "Iron Temple" not in refused.value.message
    session.rollback()
    assert snapshot(session) == before
    assert not [call for call in fake.calls if call.path.startswith("/v3/users")]


@pytest.mark.embedded
def test_the_gym_itself_reconnects_and_another_connects_once_it_disconnected(
    session, org, connected, bridge_settings
):
    again = connect(session, org.id, API_KEY, settings=bridge_settings, now=NOW)
    assert (again.id, again.status) == (connected.id, ConnectionStatus.active)
    disconnect(session, org.id, now=NOW)
    second = factories.organization(session, name="Copper Temple")
    session.commit()
    moved = connect(session, second.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    assert (moved.status, moved.external_account_id) == (ConnectionStatus.active, "777")


@pytest.mark.embedded
def test_a_pending_key_of_an_account_another_gym_is_active_on_errs_at_its_check(
    session, org, connected, fake, bridge_settings, clock
):
    """The check that could not finish at connect runs in the dispatcher: the account is
    found in use there, the connection errs with the cause and nothing is sent."""
    second = factories.organization(session, name="Copper Temple")
    session.commit()
    pending, op, summary = _pending_then_checked(session, second, fake, bridge_settings, clock)
    assert summary.stopped == "pending"
    assert pending.status is ConnectionStatus.error
    assert pending.last_error.startswith("that external account is connected to another gym")
    assert op.status is OpStatus.pending
    assert not [call for call in fake.calls if call.method == "POST"]


@pytest.mark.embedded
def test_the_database_refuses_a_second_active_gym_on_one_account(session, org, connected):
    second = factories.organization(session, name="Copper Temple")
    session.add(IntegrationConnection(organization_id=second.id, status=ConnectionStatus.active,
                                      external_account_id="777"))  # fmt: skip
    with pytest.raises(IntegrityError):
        session.flush()


def _pending_then_checked(session, org, fake, bridge_settings, clock):
    """Connect while the external system cannot answer (the key is kept pending), queue an op,
    then let the dispatcher check the key two minutes later."""
    fake.fail("GET /v3/locations", 503)
    pending = connect(session, org.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    assert pending.status is ConnectionStatus.pending
    op = enqueue(session, organization_id=org.id, op_type="user.create",
                 payload=member_payload(), now=NOW)  # fmt: skip
    session.commit()
    clock.set(NOW + timedelta(minutes=2))
    return pending, op, run(session, org.id, bridge_settings, clock)


def test_roster_import_keeps_no_phone_and_links_by_email(
    session, org, connected, fake, account, bridge_settings
):
    linked = factories.membership(
        session, user=factories.user(session, email="Noa@Example.test"), organization=org
    )
    factories.membership(session, user=factories.user(session, email="solo@example.test"),
                         organization=org)  # fmt: skip
    noa = fake.add_user(account, "noa@example.test", phone="+972509999999")
    for n in range(3):
        fake.add_user(account, f"other{n}@example.test", phone=f"+97250000000{n}")
    client = ExternalGymClient(fake.url, API_KEY, throttle=Throttle(None), account_id="777")
    with client:
        outcome = import_roster(session, connected, client, now=NOW)
    assert outcome == {"fetched": 4, "linked": 1, "alreadyLinked": 0, "ambiguous": 0,
                       "unmatched": 1}  # fmt: skip
    link = entity_map.find(session, org.id, EntityType.member, linked.id)
    assert (link.external_id, link.origin) == (noa, Origin.import_)
    assert not hasattr(RosterEntry, "phone")
    stored = [tuple(row) for row in session.execute(select(RosterEntry.__table__))]
    assert "+972509999999" not in repr(stored)

    disconnect(session, org.id, now=NOW)
    session.commit()
    assert session.scalars(select(RosterEntry)).all() == []
    assert (connected.status, connected.credentials_ciphertext) == (ConnectionStatus.revoked, None)


def test_disconnect_without_a_connection_is_refused(session, org):
    with pytest.raises(DomainError) as refused:
        disconnect(session, org.id, now=NOW)
    assert (refused.value.code, refused.value.status) == ("bridge_not_connected", 404)


# -- the owners' routes ---------------------------------------------------------------------


@pytest.fixture
def owner_app(bridge_settings, session_factory, clock, mailbox):
    """The app of the fixtures, configured with the bridge."""
    from gymctl.providers.mail import MailboxMailer
    from webhooks.app import create_app

    mailer = MailboxMailer(mailbox, bridge_settings.mail_from, clock=clock)
    app = create_app(bridge_settings, session_factory=session_factory, clock=clock, mailer=mailer)
    return app.test_client()


def test_owner_connects_sees_the_inbox_retries_and_dismisses(owner_app, gym, fake, session):
    fake.add_account(API_KEY)
    owner = gym[Role.owner].headers
    base = f"/organizations/{gym.id}/bridge"
    response = owner_app.put(f"{base}/connection", json={"apiKey": API_KEY}, headers=owner)
    assert response.status_code == 200, response.json
    assert API_KEY not in response.get_data(as_text=True)
    parked = []
    for _ in range(2):
        op = enqueue(session, organization_id=gym.id, op_type="booking.create",
                     payload={"memberId": str(uuid.uuid4()), "bookingId": str(uuid.uuid4()),
                              "sessionId": str(uuid.uuid4())}, now=NOW)  # fmt: skip
        op.status, op.issue_code = OpStatus.parked, "identity_conflict"
        parked.append(op)
    session.commit()
    inbox = owner_app.get(f"{base}/issues", headers=owner).json
    assert [issue["id"] for issue in inbox["issues"]] == [op.id for op in parked]
    assert inbox["issues"][0]["issueCode"] == "identity_conflict"
    retried = owner_app.post(f"{base}/issues/{parked[0].id}/retry", headers=owner)
    assert retried.json["op"]["status"] == "pending"
    dismissed = owner_app.post(f"{base}/issues/{parked[1].id}/dismiss", headers=owner)
    assert dismissed.json["op"]["status"] == "dismissed"
    again = owner_app.post(f"{base}/issues/{parked[1].id}/dismiss", headers=owner)
    assert (again.status_code, again.json["code"]) == (409, "bridge_op_not_parked")
    overview = owner_app.get(base, headers=owner).json
    assert overview["queue"]["byStatus"]["dismissed"] == 1
    gone = owner_app.delete(f"{base}/connection", headers=owner)
    assert gone.json["connection"]["status"] == "revoked"


@pytest.mark.parametrize("key", ["\ua2ceßM{\x8f,\U00046251*", "clé", "two words", " "])
def test_a_key_no_header_can_carry_is_refused_over_http_and_nothing_is_called(
    owner_app, gym, fake, session, key
):
    """CI's schemathesis sent `{"apiKey": "\ua2ce..."}`: the key went to the HTTP client as the
    api-key header, which cannot encode it (UnicodeEncodeError, a 500). A key is printable
    ASCII, and the document says so."""
    fake.add_account(API_KEY)
    before = snapshot(session)
    calls = len(fake.calls)
    response = owner_app.put(
        f"/organizations/{gym.id}/bridge/connection",
        json={"apiKey": key},
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["code"]) == (400, "invalid_body")
    assert [f["field"] for f in response.json["fields"]] == ["apiKey"]
    assert len(fake.calls) == calls
    assert snapshot(session) == before


@pytest.mark.parametrize(
    ("path", "code", "status"),
    [
        ("/issues/123456/retry", "bridge_op_not_found", 404),
        ("/issues/99999999999999999999/dismiss", "bridge_op_not_found", 404),
        ("/issues/abc/retry", "bridge_op_not_found", 404),
        # Past 4,300 digits int() raised ValueError: a 500 for retry, dismiss and link.
        ("/issues/" + "9" * 4301 + "/retry", "bridge_op_not_found", 404),
        ("/issues/" + "0" * 5000 + "/dismiss", "bridge_op_not_found", 404),
    ],
)
def test_route_refusals(owner_app, gym, path, code, status):
    response = owner_app.post(
        f"/organizations/{gym.id}/bridge{path}", headers=gym[Role.owner].headers
    )
    assert (response.status_code, response.json["code"]) == (status, code)


@pytest.mark.parametrize("cursor", ["9" * 4301, "-1", "\u00b2", "1" * 20])
def test_an_issues_cursor_that_is_no_op_id_is_refused(owner_app, gym, cursor):
    response = owner_app.get(
        f"/organizations/{gym.id}/bridge/issues",
        query_string={"cursor": cursor},
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["code"]) == (400, "cursor_invalid")


def test_a_bad_key_through_the_route_is_the_external_401(owner_app, gym, fake, session):
    response = owner_app.put(
        f"/organizations/{gym.id}/bridge/connection",
        json={"apiKey": "wrong-key"},
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["code"]) == (400, "bridge_key_invalid")
    assert session.scalar(select(IntegrationConnection)) is None
    assert fake.calls[0].status == 401


def test_another_organizations_op_is_not_found(owner_app, gym, session, fake):
    other = factories.organization(session)
    session.add(IntegrationConnection(organization_id=other.id, status="active",
                                      credentials_ciphertext=None))  # fmt: skip
    op = enqueue(session, organization_id=other.id, op_type="user.update",
                 payload=member_payload(), now=NOW)  # fmt: skip
    op.status = OpStatus.parked
    session.commit()
    response = owner_app.post(
        f"/organizations/{gym.id}/bridge/issues/{op.id}/dismiss", headers=gym[Role.owner].headers
    )
    assert (response.status_code, response.json["code"]) == (404, "bridge_op_not_found")


def test_the_client_goes_through_the_proxy_the_environment_names(fake, account, monkeypatch):
    """As httpx.Client would: HTTP_PROXY carries the request (the fake is the proxy here, so
    the gym's host is never resolved), and NO_PROXY exempts a host."""
    monkeypatch.setenv("HTTP_PROXY", fake.url.removesuffix("/api/public"))
    with ExternalGymClient("http://gym.invalid/api/public", API_KEY,
                           throttle=Throttle(None)) as client:  # fmt: skip
        assert client.locations()
    assert len(fake.calls_to("GET /v3/locations")) == 1
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    direct = ExternalGymClient(f"http://127.0.0.1:{port}/api/public", API_KEY,
                               throttle=Throttle(None))  # fmt: skip
    with direct, pytest.raises(ExternalCallError) as refused:
        direct.locations()
    assert refused.value.kind == CallFailure.network
    assert len(fake.calls_to("GET /v3/locations")) == 1


def test_the_route_refuses_a_key_of_an_account_another_gym_is_active_on(
    owner_app, gym, connected, session
):
    before = snapshot(session)
    response = owner_app.put(
        f"/organizations/{gym.id}/bridge/connection",
        json={"apiKey": API_KEY},
        headers=gym[Role.owner].headers,
    )
    assert (response.status_code, response.json["code"]) == (409, "bridge_account_in_use")
    assert API_KEY not in response.get_data(as_text=True)
    assert snapshot(session) == before
