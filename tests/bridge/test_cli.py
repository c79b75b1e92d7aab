"""`gymctl bridge ...` end to end on the embedded default (SQLite), against the fake on
loopback: connect, dispatch, status, the parked op's retry (twice: the second says it is
queued already), a refused dismiss."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bookings import schedule
from gymctl.bridge import enqueue, entity_map
from gymctl.bridge.connection import disconnect
from gymctl.crypto import generate_key_setting
from gymctl.db import get_engine
from gymctl.models import AuditLog, Organization, User
from gymctl.models.bridge import EntityType, Origin, RosterEntry
from tests import factories
from tests.bridge.conftest import API_KEY, member_payload
from tests.conftest import NOW
from tests.test_quickstart import GYMCTL, gymctl, home_env  # noqa: F401 (fixture)


def _home(base_env, fake) -> tuple[dict[str, str], str]:
    """The CLI's environment pointed at the fake (its API_KEY account added), its database
    upgraded; and that database's URL."""
    fake.add_account(API_KEY)
    env = {
        **base_env,
        "GYMCTL_BRIDGE_API_URL": fake.url,
        "GYMCTL_BRIDGE_CREDENTIALS_KEY": generate_key_setting("cli"),
    }
    gymctl(env, "db", "upgrade")
    return env, f"sqlite:///{env['GYMCTL_HOME']}/gymctl.db"


def _gym_with_operator(url: str) -> Organization:
    """The gym iron-temple and its operator user_ops, committed."""
    with Session(get_engine(url), expire_on_commit=False) as session:
        org = Organization(name="Iron Temple", slug="iron-temple")
        session.add(org)
        session.add(User(identity_id="user_ops", email="ops@example.test", created_at=NOW,
                         updated_at=NOW))  # fmt: skip
        session.commit()
    return org


def test_an_operator_connects_dispatches_and_retries_a_parked_op(home_env, fake):  # noqa: F811
    env, url = _home(home_env, fake)
    _gym_with_operator(url)
    nobody = subprocess.run(
        [*GYMCTL, "bridge", "connect", "iron-temple", "--operator", "user_nobody"],
        env=env, input=API_KEY + "\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (nobody.returncode, "operator_unknown" in nobody.stderr) == (1, True)
    connected = subprocess.run(
        [*GYMCTL, "bridge", "connect", "iron-temple", "--operator", "user_ops", "--json"],
        env=env, input=API_KEY + "\n", capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(connected.stdout)["status"] == "active"
    assert API_KEY not in connected.stdout + connected.stderr

    with Session(get_engine(url)) as session:
        organization_id = session.query(Organization.id).scalar()
        rejected = enqueue(session, organization_id=organization_id, op_type="user.create",
                           payload=member_payload(email="a@example.test"), now=NOW)  # fmt: skip
        enqueue(session, organization_id=organization_id, op_type="user.create",
                payload=member_payload(uuid.uuid4(), email="b@example.test"), now=NOW)  # fmt: skip
        session.commit()
        parked_id = rejected.id
    fake.fail("POST /v3/users", 422)
    runs = json.loads(gymctl(env, "bridge", "dispatch", "--once", "--json").stdout)
    assert [(r["succeeded"], r["parked"]) for r in runs] == [(1, 1)]

    status = json.loads(gymctl(env, "bridge", "status", "iron-temple", "--json").stdout)
    assert (status["parked"], status["byStatus"]["succeeded"]) == (1, 1)
    assert status["connection"]["lastRun"]["correlation_id"]
    parked = json.loads(
        gymctl(env, "bridge", "ops", "iron-temple", "--status", "parked", "--json").stdout
    )
    assert [(op["id"], op["issueCode"]) for op in parked] == [(parked_id, "rejected")]

    retried = json.loads(
        gymctl(env, "bridge", "retry", str(parked_id), "--operator", "user_ops", "--json").stdout
    )
    assert (retried["status"], retried["alreadyQueued"]) == ("pending", False)
    again = gymctl(env, "bridge", "retry", str(parked_id), "--operator", "user_ops", "--json")
    assert json.loads(again.stdout)["alreadyQueued"] is True  # exit 0: queued, as asked
    gymctl(env, "bridge", "dispatch", "--once", "--json")
    status = json.loads(gymctl(env, "bridge", "status", "iron-temple", "--json").stdout)
    assert (status["parked"], status["byStatus"]["succeeded"]) == (0, 2)
    with Session(get_engine(url)) as session:
        actors = session.scalars(select(AuditLog.action).where(
            AuditLog.actor_user_id.is_not(None))).all()  # fmt: skip
    assert {"bridge.connected", "bridge.op_retried"} <= set(actors)

    drift = json.loads(gymctl(env, "bridge", "drift", "iron-temple", "--json").stdout)
    # The hand-made ops named members the platform does not have: orphaned links.
    assert drift["summary"] == {"members": 2, "memberships": 0, "bookings": 0}
    assert len(drift["members"]["orphaned"]) == 2
    refused = gymctl(env, "bridge", "dismiss", str(parked_id), "--operator", "user_ops",
                     check=False)  # fmt: skip
    assert refused.returncode == 1
    assert "bridge_op_not_parked" in refused.stderr
    fake.fail("GET /v3/users", 500)  # the external system fails the roster import's read
    failed = gymctl(env, "bridge", "import", "iron-temple", "--operator", "user_ops", "--json",
                    check=False)  # fmt: skip
    assert failed.returncode == 1, failed.stderr  # a refusal naming it, not a crash (70)
    assert json.loads(failed.stdout)["code"] == "bridge_call_failed"


def test_an_operator_links_a_class_and_a_member_sets_a_cutover_and_disconnects(
    home_env,  # noqa: F811
    fake,
):
    """The operator writes that settle the inbox and move a series, each audited under the
    operator."""
    env, url = _home(home_env, fake)
    org = _gym_with_operator(url)
    with Session(get_engine(url), expire_on_commit=False) as session:
        kind = schedule.create_class_type(session, org.id, name="WOD", default_capacity=5,
                                          duration_minutes=60, now=NOW)  # fmt: skip
        row = schedule.schedule_session(session, kind, starts_at=NOW + timedelta(days=1), now=NOW)
        entity_map.link(session, org.id, EntityType.schedule, platform_id=None,
                        external_id="4242", origin=Origin.poll, now=NOW)  # fmt: skip
        member = str(factories.membership(session, user=factories.user(session),
                                          organization=org).id)  # fmt: skip
        session.commit()
    as_operator = ("--operator", "user_ops", "--json")
    subprocess.run(
        [*GYMCTL, "bridge", "connect", "iron-temple", *as_operator],
        env=env, input=API_KEY + "\n", capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    linked = json.loads(gymctl(env, "bridge", "link-class", "iron-temple", str(row.id), "4242",
                               *as_operator).stdout)  # fmt: skip
    assert linked["externalClassId"] == "4242"
    for no_row in (str(uuid.uuid4()), str(row.id), "not-an-id"):  # a session is no member
        refused = gymctl(env, "bridge", "link", "iron-temple", "member", no_row, "77",
                         *as_operator, check=False)  # fmt: skip
        assert (refused.returncode, json.loads(refused.stdout)["code"]) == (
            1, "bridge_entity_not_found")  # fmt: skip
    link = json.loads(gymctl(env, "bridge", "link", "iron-temple", "member", member, "77",
                             *as_operator).stdout)  # fmt: skip
    assert (link["platformId"], link["externalId"]) == (member, "77")
    day = (datetime.now(UTC) + timedelta(days=30)).date().isoformat()
    cut = json.loads(gymctl(env, "bridge", "cutover", "iron-temple", str(kind.id), "0", "07:00",
                            day, *as_operator).stdout)  # fmt: skip
    assert cut["cutoverOn"] == day
    gone = json.loads(gymctl(env, "bridge", "disconnect", "iron-temple", *as_operator).stdout)
    assert gone["status"] == "revoked"
    with Session(get_engine(url)) as session:
        operator = session.scalar(select(User.id).where(User.identity_id == "user_ops"))
        audited = session.scalars(select(AuditLog.action).where(
            AuditLog.actor_user_id == operator)).all()  # fmt: skip
    assert {"bridge.connected", "bridge.class_linked", "bridge.linked_by_operator",
            "bridge.series_cutover_set", "bridge.disconnected"} <= set(audited)  # fmt: skip


def test_an_import_a_disconnect_overtakes_is_refused_and_stores_nothing(
    home_env,  # noqa: F811
    fake,
):
    """`gymctl bridge import` while the owner disconnects (another process, here the test's):
    the import's calls are a dispatcher's (the calls lock, the connection read again before
    each) and its pages are stored only onto the connection it found, so it ends in 409
    bridge_not_connected with no roster kept and no call after the disconnect committed."""
    env, url = _home(home_env, fake)
    account = fake.accounts[API_KEY]
    for n in range(5):  # three pages of two
        fake.add_user(account, f"person{n}@example.test")
    org = _gym_with_operator(url)
    as_operator = ("--operator", "user_ops", "--json")
    subprocess.run(
        [*GYMCTL, "bridge", "connect", "iron-temple", *as_operator],
        env=env, input=API_KEY + "\n", capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    committed: list[int] = []

    def disconnect_now() -> None:
        with Session(get_engine(url)) as other:
            disconnect(other, org.id, now=NOW)
            other.commit()
        committed.append(len(fake.calls))

    started: list[threading.Thread] = []

    def cut(call) -> None:
        if call.path == "/v3/users" and call.query.get("page") == "2" and not started:
            started.append(threading.Thread(target=disconnect_now))
            started[0].start()

    fake.on_call = cut
    imported = gymctl(env, "bridge", "import", "iron-temple", *as_operator, check=False)
    started[0].join(30)

    assert (imported.returncode, json.loads(imported.stdout)["code"]) == (1, "bridge_not_connected")
    assert len(fake.calls) == committed[0]  # nothing after the disconnect
    with Session(get_engine(url)) as session:
        assert session.scalars(select(RosterEntry)).all() == []
