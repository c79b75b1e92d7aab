"""An erasure while a dispatcher is sending the member's user op (real commits, both engines).

The claim took the op in flight and committed; the worker is out on its HTTP call, holding no
lock. The erasure (mirror.member_erased) locks and scrubs the op as it does every other user op
of the member: the attempt under way sends the copy its worker holds (it had left already), but
nothing is stored to send again. An attempt that does not succeed then withdraws the op
(queue.record, under the dispatcher's lock of its rows): the erased person's name and address
are never sent again, and the deactivation that follows (mirror.member_retired) finds any user
the attempt may have made there by the address the bridge searches by (s49), as for a create
erased before it went. Before, the erasure skipped the op in flight and kept its payload, and
its failed attempt was retried with the erased person's name and address: a user created there,
named after a person the gym had erased.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.access.erasure import erase_personal_data
from gymctl.bridge import mirror, queue
from gymctl.bridge.connection import connect
from gymctl.bridge.dispatcher import drain
from gymctl.clock import FixedClock
from gymctl.db import get_engine
from gymctl.models import Organization, User
from gymctl.models.bridge import OpStatus, OpType, SyncOp
from tests.bridge.conftest import API_KEY, FAST
from tests.conftest import NOW
from tests.embedded_outside_calls import watching
from tests.factories import make_gym

# The erasure runs while the worker waits for its answer: room for it on either engine.
PATIENT = FAST.__class__(**{**FAST.__dict__, "timeout": 10.0})


def _run(factory, gym_id, settings, at):
    """One dispatcher run; on the embedded default no call leaves holding the write lock (the
    erasure the fake runs meanwhile takes it)."""
    with factory() as session, watching() as detector:
        summary = drain(session, gym_id, settings=settings, policy=PATIENT, runner="t",
                        clock=FixedClock(at))  # fmt: skip
    assert detector.calls == [], detector.report()
    return summary


def _sent_with(calls, *values: str) -> list[str]:
    """The calls that carried any of `values` (in their body or query)."""
    return [
        f"{call.method} {call.path}"
        for call in calls
        if any(value in json.dumps([call.body, call.query]) for value in values)
    ]


@pytest.fixture
def member_queued(committed_database, account, bridge_settings):
    """A connected gym whose member Noa Barak's user.create waits, committed."""
    factory = sessionmaker(bind=get_engine(committed_database), expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        person = session.get(User, gym.membership.user_id)
        person.name = "Noa Barak"
        connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
        mirror.member_created(session, gym.membership, now=NOW)
        session.commit()
        create = session.scalars(select(SyncOp)).one()
        assert (create.op_type, create.payload["firstName"]) == (OpType.user_create, "Noa")
    return factory, gym, person.email, create.id


def _erase_during(fake, factory, gym, route: str, at) -> list[int]:
    """The owner erases the member while the worker's call to `route` is being answered; how
    many calls had arrived then (that one included)."""
    erased: list[int] = []

    def erase(call) -> None:
        if f"{call.method} {call.path}" == route and not erased:
            with factory() as staff:
                erase_personal_data(staff, staff.get(Organization, gym.id),
                                    gym.membership.user_id, actor_user_id=gym.owner.id,
                                    now=at)  # fmt: skip
                staff.commit()
            erased.append(len(fake.calls))

    fake.on_call = erase
    return erased


@pytest.mark.parametrize(
    ("failing", "status"),
    [("GET /v3/searchUser", 503), ("POST /v3/users", 503), ("POST /v3/users", 429)],
    ids=["search-503", "create-503", "create-429"],
)
def test_an_op_in_flight_when_its_member_is_erased_is_never_sent_again(
    member_queued, fake, account, bridge_settings, failing, status
):
    factory, gym, email, create_id = member_queued
    at = NOW + timedelta(minutes=1)
    erased = _erase_during(fake, factory, gym, failing, at)
    fake.fail(failing, status)

    _run(factory, gym.id, bridge_settings, at)

    (erased_at,) = erased
    fake.on_call = None
    with factory() as session:
        create = session.get(SyncOp, create_id)
        after_the_attempt = (create.status, create.payload, create.last_error)

    for later in (2, 10, 60, 180, 600):  # the ladder's steps, had it stayed on it
        _run(factory, gym.id, bridge_settings, NOW + timedelta(minutes=later))

    since = fake.calls[erased_at:]
    assert [c for c in since if (c.method, c.path) == ("POST", "/v3/users")] == []
    assert after_the_attempt == (
        OpStatus.superseded,  # withdrawn: never sent again
        {"memberId": str(gym.membership.id)},
        "withdrawn: personal data erased",
    )
    assert _sent_with(since, "Noa", "Barak") == []
    # The address left once more, only as the deactivation's search (s49): nothing found.
    assert _sent_with(since, email) == ["GET /v3/searchUser"]
    assert account.users == {}
    with factory() as session:
        ops = session.scalars(select(SyncOp).order_by(SyncOp.id)).all()
        assert [(op.op_type, op.status) for op in ops] == [
            (OpType.user_create, OpStatus.superseded),
            (OpType.user_update, OpStatus.succeeded),  # the deactivation: no one there
        ]
        assert not any(email in json.dumps(op.payload) for op in ops)


def test_an_op_in_flight_that_succeeds_as_its_member_is_erased_is_deactivated_there(
    member_queued, fake, account, bridge_settings
):
    """It went: the user there is the external system's, and is deactivated by its link; the
    stored op keeps nothing of the person."""
    factory, gym, email, _create = member_queued
    at = NOW + timedelta(minutes=1)
    _erase_during(fake, factory, gym, "POST /v3/users", at)

    _run(factory, gym.id, bridge_settings, at)
    fake.on_call = None
    _run(factory, gym.id, bridge_settings, at + timedelta(minutes=1))

    (there,) = account.users
    assert account.users[there]["active"] is False
    assert len(fake.calls_to("POST /v3/users")) == 1
    with factory() as session:
        ops = session.scalars(select(SyncOp).order_by(SyncOp.id)).all()
        assert [(op.op_type, op.status) for op in ops] == [
            (OpType.user_create, OpStatus.succeeded),
            (OpType.user_update, OpStatus.succeeded),
        ]
        assert not any(
            value in json.dumps(op.payload) for op in ops for value in (email, "Noa", "Barak")
        )


def test_a_scrubbed_op_rescued_from_a_dead_dispatcher_is_withdrawn_unsent(
    member_queued, fake, account, bridge_settings
):
    """The worker died mid-call after the erasure scrubbed its op: the next holder of the
    organization's lock rescues it, and withdraws it rather than send an op with no one's
    details (it would fail its check on every rung of the ladder, holding back the
    deactivation behind it, then park)."""
    factory, gym, _email, create_id = member_queued
    at = NOW + timedelta(minutes=1)
    with factory() as worker:
        (_claimed,) = queue.claim(worker, gym.id, now=at, limit=10, lease=timedelta(minutes=5),
                                 owner="dies")  # fmt: skip
    with factory() as staff:
        erase_personal_data(staff, staff.get(Organization, gym.id), gym.membership.user_id,
                            actor_user_id=gym.owner.id, now=at)  # fmt: skip
        staff.commit()

    summary = _run(factory, gym.id, bridge_settings, at + timedelta(minutes=1))

    assert summary.rescued == 1
    assert fake.calls_to("POST /v3/users") == []
    assert _sent_with(fake.calls, "Noa", "Barak") == []
    with factory() as session:
        create = session.get(SyncOp, create_id)
        assert (create.status, create.payload) == (
            OpStatus.superseded, {"memberId": str(gym.membership.id)}
        )  # fmt: skip
        deactivation = session.scalars(
            select(SyncOp).where(SyncOp.op_type == OpType.user_update)
        ).one()
        assert deactivation.status is OpStatus.succeeded  # searched, found no one
    assert account.users == {}
