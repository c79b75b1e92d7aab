"""An erasure while a dispatcher works through a claimed batch that holds the member's op (real
commits, both engines).

The claim took a batch in flight and committed; the worker sends its ops one by one, each call
after a commit (`OpContext.commit_before_call`). The erasure (mirror.member_erased) scrubs the
member's op in flight as every other of their user ops; the worker holds the copy it claimed.
An attempt that had left when the erasure committed sends that copy (it is gone); one that had
not begins with the stored op, which names no one: withdrawn, unsent. Before, a later op of
the batch went out with the erased person's name and address from the worker's copy, and a
user was created there, named after a person the gym had erased.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.access.erasure import erase_personal_data
from gymctl.bridge import mirror
from gymctl.bridge.connection import connect
from gymctl.bridge.dispatcher import drain
from gymctl.clock import FixedClock
from gymctl.db import get_engine
from gymctl.models import Organization, User
from gymctl.models.bridge import OpStatus, OpType, SyncOp
from tests import factories
from tests.bridge.conftest import API_KEY, FAST
from tests.conftest import NOW
from tests.embedded_outside_calls import watching
from tests.factories import make_gym

PATIENT = FAST.__class__(**{**FAST.__dict__, "timeout": 10.0})


@pytest.fixture
def two_queued(committed_database, account, bridge_settings):
    """A connected gym where Ada Levi's user.create waits, then Noa Barak's, committed."""
    factory = sessionmaker(bind=get_engine(committed_database), expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
        ada = factories.user(session, name="Ada Levi")
        first = factories.membership(session, user=ada, organization=gym.organization)
        session.flush()
        mirror.member_created(session, first, now=NOW)
        noa = session.get(User, gym.membership.user_id)
        noa.name = "Noa Barak"
        mirror.member_created(session, gym.membership, now=NOW)
        session.commit()
        ops = session.scalars(select(SyncOp).order_by(SyncOp.created_at, SyncOp.id)).all()
        assert [op.payload["firstName"] for op in ops] == ["Ada", "Noa"]
    return factory, gym, noa.email, ops[1].id


def _calls_with(calls, *values: str) -> list[str]:
    return [
        f"{call.method} {call.path}"
        for call in calls
        if any(value in json.dumps([call.body, call.query]) for value in values)
    ]


def test_a_batched_op_whose_member_is_erased_before_its_call_is_withdrawn_unsent(
    two_queued, fake, account, bridge_settings
):
    """Noa is erased while Ada's create, ahead of hers in the batch, is being answered: Noa's
    create had not left, so it never does."""
    factory, gym, email, noa_op = two_queued
    at = NOW + timedelta(minutes=1)
    erased: list[int] = []

    def erase(call) -> None:
        if (call.method, call.path) == ("POST", "/v3/users") and not erased:
            with factory() as staff:
                erase_personal_data(staff, staff.get(Organization, gym.id),
                                    gym.membership.user_id, actor_user_id=gym.owner.id,
                                    now=at)  # fmt: skip
                staff.commit()
            erased.append(len(fake.calls))

    fake.on_call = erase
    with factory() as session, watching() as detector:
        summary = drain(session, gym.id, settings=bridge_settings, policy=PATIENT, runner="t",
                        clock=FixedClock(at))  # fmt: skip
    assert detector.calls == [], detector.report()
    fake.on_call = None

    (before,) = erased
    assert (fake.calls[before - 1].path, fake.calls[before - 1].body["first_name"]) == (
        "/v3/users", "Ada"
    )  # fmt: skip
    assert summary.withdrawn == 1
    assert _calls_with(fake.calls, "Noa", "Barak") == []
    # Her address left only as the deactivation's search (s49), which found no one.
    assert set(_calls_with(fake.calls, email)) <= {"GET /v3/searchUser"}
    assert not any(call.method != "GET" for call in fake.calls[before:])
    assert [user["first_name"] for user in account.users.values()] == ["Ada"]
    with factory() as session:
        op = session.get(SyncOp, noa_op)
        assert (op.status, op.payload, op.last_error) == (
            OpStatus.superseded,
            {"memberId": str(gym.membership.id)},
            "withdrawn: personal data erased",
        )
    # Nothing of hers was ever there: the deactivation the erasure queued (if any) finds no one.
    drain_again = NOW + timedelta(minutes=2)
    with factory() as session:
        drain(session, gym.id, settings=bridge_settings, policy=PATIENT, runner="t",
              clock=FixedClock(drain_again))  # fmt: skip
    assert _calls_with(fake.calls, "Noa", "Barak") == []
    assert set(_calls_with(fake.calls, email)) <= {"GET /v3/searchUser"}
    assert [user["first_name"] for user in account.users.values()] == ["Ada"]
    with factory() as session:
        ops = session.scalars(select(SyncOp).where(SyncOp.op_type == OpType.user_create)).all()
        assert not any(email in json.dumps(op.payload) for op in ops)
