"""A disconnect stops a dispatcher that is already sending (real commits on PostgreSQL: the
disconnect commits from another connection while the dispatcher's call is being answered)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bridge.connection import disconnect
from gymctl.bridge.dispatcher import drain
from gymctl.clock import FixedClock
from gymctl.db import get_engine
from gymctl.models.bridge import OpStatus, SyncOp
from tests.bridge.conftest import API_KEY, FAST, committed_gym
from tests.conftest import NOW


def test_after_a_disconnect_commits_no_further_call_leaves(committed_pg, fake, bridge_settings):
    """Spec B 2.6: a disconnect revokes the key; the dispatcher re-checks the connection
    before every call, so nothing is sent for the organization once it has committed."""
    engine = get_engine(committed_pg)
    fake.add_account(API_KEY)
    org, _ = committed_gym(engine, bridge_settings, name="Cut", ops=4)
    fake.calls.clear()
    cut_at: list[int] = []

    def cut(call) -> None:
        if (call.method, call.path) == ("POST", "/v3/users") and not cut_at:
            with Session(engine) as other:
                disconnect(other, org.id, now=NOW)
                other.commit()
            cut_at.append(len(fake.calls))

    fake.on_call = cut
    with Session(engine, expire_on_commit=False) as session:
        summary = drain(session, org.id, settings=bridge_settings, policy=FAST, runner="t",
                        clock=FixedClock(NOW))  # fmt: skip
        statuses = session.scalars(select(SyncOp.status).order_by(SyncOp.id)).all()
        attempts = session.scalars(select(SyncOp.attempts).order_by(SyncOp.id)).all()
    assert cut_at
    assert len(fake.calls) == cut_at[0]  # the call being answered was the last
    assert summary.stopped == "disconnected"
    assert statuses == [OpStatus.succeeded] + [OpStatus.pending] * 3
    assert attempts[1:] == [0, 0, 0]  # not charged: they wait for a new connect
