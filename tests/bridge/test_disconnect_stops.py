"""A disconnect stops a dispatcher that is already sending, on both engines (real commits: the
disconnect commits from another connection while the dispatcher's call is being answered).

Spec B 2.6: a disconnect revokes the key. The dispatcher holds the organization's calls lock
(connection.calls_held) from its check that the gym is still connected to the answer of the
call it then makes, and a disconnect takes that lock until it commits: once it has committed,
no call of the gym is in flight or leaves after it (the chaos test's check of the wire)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bridge import connection as bridge_connection
from gymctl.bridge import dispatcher
from gymctl.bridge.client import Throttle
from gymctl.bridge.connection import (
    Disconnected,
    calls_held,
    connect,
    disconnect,
    import_roster,
    open_client,
    require_connection,
    stop_calls,
)
from gymctl.bridge.dispatcher import drain
from gymctl.clock import FixedClock
from gymctl.db import get_engine
from gymctl.models import Organization
from gymctl.models.bridge import (
    ConnectionStatus,
    IntegrationConnection,
    OpStatus,
    RosterEntry,
    SyncOp,
)
from tests.bridge.conftest import API_KEY, FAST, committed_gym
from tests.conftest import NOW


def _drain(engine, org_id, settings, policy=FAST):
    with Session(engine, expire_on_commit=False) as session:
        summary = drain(session, org_id, settings=settings, policy=policy, runner="t",
                        clock=FixedClock(NOW))  # fmt: skip
        ops = session.execute(select(SyncOp.status, SyncOp.attempts).order_by(SyncOp.id)).all()
    return summary, [tuple(op) for op in ops]


def _status(engine, org_id) -> ConnectionStatus:
    with Session(engine) as session:
        return session.scalar(
            select(IntegrationConnection.status).where(
                IntegrationConnection.organization_id == org_id
            )
        )


def test_a_disconnect_waits_for_the_call_in_flight_and_no_call_leaves_once_it_commits(
    committed_database, fake, bridge_settings
):
    engine = get_engine(committed_database)
    fake.add_account(API_KEY)
    org, _ = committed_gym(engine, bridge_settings, name="Cut", ops=4)
    fake.calls.clear()
    seen: list[tuple[str, int]] = []
    asked = threading.Event()

    def disconnect_now() -> None:
        with Session(engine) as other:
            asked.set()
            disconnect(other, org.id, now=NOW)
            other.commit()
        seen.append(("committed", len(fake.calls)))

    started: list[threading.Thread] = []

    def cut(call) -> None:
        if (call.method, call.path) == ("POST", "/v3/users") and not started:
            started.append(threading.Thread(target=disconnect_now))
            started[0].start()
            assert asked.wait(5)
            time.sleep(1.0)  # the disconnect waits for this call meanwhile (its timeout: 5 s)
            seen.append(("answered", len(fake.calls)))

    fake.on_call = cut
    summary, ops = _drain(engine, org.id, bridge_settings, replace(FAST, timeout=5.0))
    started[0].join(10)

    answered = seen[0][1]  # the calls so far (a create searches for its member first)
    assert seen == [("answered", answered), ("committed", answered)]  # in this order
    assert len(fake.calls) == answered  # the call being answered was the last
    assert summary.stopped == "disconnected"
    assert ops == [(OpStatus.succeeded, 1)] + [(OpStatus.pending, 0)] * 3  # they wait, uncharged


# A dispatcher waiting at its call for a disconnect not yet committed: PostgreSQL's. On the
# embedded default the disconnect's write lock holds a dispatcher at its run's first write,
# before any call (the first test's order shows the calls lock on both engines).


@pytest.mark.parametrize("ended", ["committed", "rolled back"])
def test_a_dispatcher_waits_at_its_call_for_a_disconnect_being_made(
    ended, committed_pg, fake, bridge_settings
):
    """Committed, nothing is sent; rolled back (say its request failed after it), the run
    goes on and sends everything."""
    engine = get_engine(committed_pg)
    fake.add_account(API_KEY)
    org, _ = committed_gym(engine, bridge_settings, name="Cut", ops=2)
    fake.calls.clear()
    with ThreadPoolExecutor(1) as pool, Session(engine) as other:
        disconnect(other, org.id, now=NOW)  # not ended yet: it holds the calls
        dispatcher = pool.submit(_drain, engine, org.id, bridge_settings)
        time.sleep(0.5)
        assert fake.calls == []  # the dispatcher waits at its first call
        other.commit() if ended == "committed" else other.rollback()
        summary, ops = dispatcher.result(30)

    if ended == "committed":
        assert fake.calls == []
        assert summary.stopped == "disconnected"
        assert ops == [(OpStatus.pending, 0)] * 2
    else:
        assert len([c for c in fake.calls if (c.method, c.path) == ("POST", "/v3/users")]) == 2
        assert summary.stopped is None
        assert ops == [(OpStatus.succeeded, 1)] * 2
        assert _status(engine, org.id) is ConnectionStatus.active


def test_a_disconnect_held_up_past_its_wait_disconnects_anyway_and_says_so(
    committed_database, fake, bridge_settings, monkeypatch, caplog
):
    """A dispatcher stuck in a call does not keep a gym connected: the disconnect goes
    ahead after CALLS_WAIT_SECONDS (the stuck call is the last: the status is read before
    each)."""
    monkeypatch.setattr(bridge_connection, "CALLS_WAIT_SECONDS", 0.3)
    engine = get_engine(committed_database)
    fake.add_account(API_KEY)
    org, _ = committed_gym(engine, bridge_settings, name="Stuck", ops=1)
    with calls_held(engine, org.id) as held, Session(engine) as other:
        assert held  # as a dispatcher stuck in a call holds it
        with caplog.at_level(logging.WARNING, logger="gymctl.bridge"):
            disconnect(other, org.id, now=NOW)
        other.commit()
    assert _status(engine, org.id) is ConnectionStatus.revoked
    assert "a call held it for 0 s; disconnected anyway" in caplog.text


def test_a_dispatcher_held_up_past_its_wait_stops_its_run_uncharged(
    committed_database, fake, bridge_settings, monkeypatch
):
    monkeypatch.setattr(bridge_connection, "CALLS_WAIT_SECONDS", 0.3)
    engine = get_engine(committed_database)
    fake.add_account(API_KEY)
    org, _ = committed_gym(engine, bridge_settings, name="Waits", ops=2)
    fake.calls.clear()
    with Session(engine) as disconnecting:
        assert stop_calls(disconnecting, org.id)  # as a disconnect's transaction holds them
        summary, ops = _drain(engine, org.id, bridge_settings)
    assert fake.calls == []
    assert summary.stopped == "disconnected"
    assert ops == [(OpStatus.pending, 0)] * 2
    assert _status(engine, org.id) is ConnectionStatus.active  # nothing was disconnected
    assert _drain(engine, org.id, bridge_settings)[1] == [(OpStatus.succeeded, 1)] * 2


def test_a_key_check_overtaken_by_a_disconnect_leaves_the_gym_disconnected(
    committed_database, fake, bridge_settings, monkeypatch
):
    """A pending key is checked by the dispatcher (spec B 5); a disconnect committed during
    the check's last call (one that waited past CALLS_WAIT_SECONDS for it) stands: the check's
    outcome is written only to a connection read again under its row lock and still pending.
    The activation overwrote the revoke: active, with the key purged."""
    monkeypatch.setattr(bridge_connection, "CALLS_WAIT_SECONDS", 0.2)
    engine = get_engine(committed_database)
    fake.add_account(API_KEY)
    fake.fail("GET /v3/locations", 503)  # the connect's own check cannot finish: pending
    with Session(engine, expire_on_commit=False) as session:
        org = Organization(name="Late", slug=f"late-{uuid.uuid4().hex[:8]}")
        session.add(org)
        session.flush()
        kept = connect(session, org.id, API_KEY, settings=bridge_settings, now=NOW)
        session.commit()
    assert kept.status is ConnectionStatus.pending

    def cut(call) -> None:
        if call.path == "/v3/membershipTypes":
            with Session(engine) as other:
                disconnect(other, org.id, now=NOW)
                other.commit()

    fake.on_call = cut
    summary, _ = _drain(engine, org.id, bridge_settings)

    assert summary.stopped == "disconnected"
    with Session(engine) as session:
        connection = session.scalar(
            select(IntegrationConnection).where(IntegrationConnection.organization_id == org.id)
        )
        assert (connection.status, connection.credentials_ciphertext) == (
            ConnectionStatus.revoked,
            None,
        )


def test_a_401_answered_while_a_disconnect_waits_leaves_the_gym_disconnected(
    committed_database, fake, bridge_settings, monkeypatch
):
    """The key was revoked at the external system, so the call in flight ends in a 401, while
    the owner disconnects. The 401's error is written only to a connection still as the run
    found it (read again under its row lock): the disconnect stands (it was overwritten with
    `error`, which still queues the members' changes for the system the owner left). Here
    the dispatcher writes after the disconnect has committed, as a slow one may."""
    engine = get_engine(committed_database)
    fake.add_account(API_KEY)
    org, _ = committed_gym(engine, bridge_settings, name="Cut", ops=2)
    fake.fail(None, 401)
    committed = threading.Event()

    def disconnect_now() -> None:
        with Session(engine) as other:
            disconnect(other, org.id, now=NOW)
            other.commit()
        committed.set()

    started: list[threading.Thread] = []

    def cut(_call) -> None:
        if not started:
            started.append(threading.Thread(target=disconnect_now))
            started[0].start()

    real = dispatcher._lose

    def after_the_disconnect(*args, **kwargs):
        assert committed.wait(10)
        return real(*args, **kwargs)

    fake.on_call = cut
    monkeypatch.setattr(dispatcher, "_lose", after_the_disconnect)
    summary, ops = _drain(engine, org.id, bridge_settings, replace(FAST, timeout=5.0))
    started[0].join(10)

    assert summary.stopped == "disconnected"
    assert _status(engine, org.id) is ConnectionStatus.revoked
    assert ops == [(OpStatus.pending, 0)] * 2  # waiting, uncharged, for a new connect


def test_a_new_key_pasted_during_a_run_is_not_marked_refused_by_the_old_keys_401(
    committed_database, fake, bridge_settings
):
    """The owner pastes a rotated key while a run holds the old one; the old key's 401 says
    nothing of the new one (it was marked `error`: syncing stopped until the key was pasted
    again). The run stops; the next holds the new key."""
    engine = get_engine(committed_database)
    account = fake.add_account(API_KEY)
    org, _ = committed_gym(engine, bridge_settings, name="Rotated", ops=2)
    rotated = "ak_live_iron_temple_rotated_0001"
    fake.accounts[rotated] = account  # the same account, a new key
    started: list[threading.Thread] = []

    def paste_the_new_key() -> None:
        with Session(engine) as other:
            connect(other, org.id, rotated, settings=bridge_settings, now=NOW)
            other.commit()

    def cut(_call) -> None:
        if not started:
            started.append(threading.Thread(target=paste_the_new_key))
            started[0].start()
            started[0].join(10)
            fake.fail(None, 401)  # this call, with the old key, is refused

    fake.on_call = cut
    summary, ops = _drain(engine, org.id, bridge_settings, replace(FAST, timeout=5.0))

    assert summary.stopped == "disconnected"  # the connection it held a key for
    assert _status(engine, org.id) is ConnectionStatus.active
    assert ops == [(OpStatus.pending, 0)] * 2
    fake.on_call = None
    assert _drain(engine, org.id, bridge_settings)[1] == [(OpStatus.succeeded, 1)] * 2


def test_a_disconnect_during_a_roster_import_leaves_no_roster_and_stops_it(
    committed_database, fake, bridge_settings
):
    """The roster import (`gymctl bridge import`) stores each page only while the connection
    stands as it found it: a page read before a disconnect is not stored after its purge."""
    engine = get_engine(committed_database)
    account = fake.add_account(API_KEY)
    org, _ = committed_gym(engine, bridge_settings, name="Roster", ops=0)
    for n in range(5):  # three pages of two
        fake.add_user(account, f"person{n}@example.test")
    done: list[bool] = []

    def cut(call) -> None:
        if call.path == "/v3/users" and call.query.get("page") == "2" and not done:
            done.append(True)
            with Session(engine) as other:
                disconnect(other, org.id, now=NOW)
                other.commit()

    fake.on_call = cut
    with Session(engine, expire_on_commit=False) as session:
        bridge = require_connection(session, org.id)
        with (
            open_client(bridge, bridge_settings, Throttle(None), timeout=5.0) as client,
            pytest.raises(Disconnected),
        ):
            import_roster(session, bridge, client, now=NOW)
        session.rollback()
    with Session(engine) as session:
        assert session.scalars(select(RosterEntry)).all() == []
    assert [c.query.get("page") for c in fake.calls if c.path == "/v3/users"] == ["1", "2"]


def test_a_transaction_that_stops_the_calls_twice_does_not_wait_on_itself(
    committed_database, fake, bridge_settings, monkeypatch
):
    """Two disconnect-side takes in one transaction (a gym's deletion winding its bridge
    down twice, say): the second is the first's, on both engines (PostgreSQL's advisory
    locks stack; the embedded default's process lock would have waited out its bound)."""
    engine = get_engine(committed_database)
    fake.add_account(API_KEY)
    org, _ = committed_gym(engine, bridge_settings, name="Twice", ops=0)
    monkeypatch.setattr(bridge_connection, "CALLS_WAIT_SECONDS", 0.5)
    with Session(engine) as session:
        assert stop_calls(session, org.id)
        assert stop_calls(session, org.id)  # it would have waited on itself, and given up
        session.commit()
    with calls_held(engine, org.id) as held:  # given back at the commit
        assert held
