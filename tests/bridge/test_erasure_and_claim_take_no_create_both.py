"""An erasure and a dispatcher's claim at once, on PostgreSQL with real commits. The erasure
(mirror.member_erased) reads the member's user ops locked (FOR UPDATE, read as they are), so a
claim (SKIP LOCKED) takes none of them while the erasure rewrites them. Before, the erasure read
a pending user.create, the claim took it in flight, and the erasure's flush then wrote it
superseded while its worker sent the person's name and email."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import event, select
from sqlalchemy.orm import sessionmaker

from gymctl.access.erasure import erase_personal_data
from gymctl.bridge import mirror, queue
from gymctl.bridge.connection import connect
from gymctl.db import get_engine
from gymctl.models import Organization
from gymctl.models.bridge import OpStatus, OpType, SyncOp
from tests.bridge.conftest import API_KEY
from tests.conftest import NOW
from tests.factories import make_gym
from tests.lock_order import meeting

LATER = NOW + timedelta(hours=1)


def _writes_op(op_id: int):
    """The erasure's flush of the member's ops: its first UPDATE of bridge_sync_ops that
    rewrites `op_id` (after it read them: mirror._user_ops)."""

    def matches(statement: str, parameters) -> bool:
        return (
            statement.lstrip().startswith("UPDATE bridge_sync_ops")
            and isinstance(parameters, dict)
            and parameters.get("bridge_sync_ops_id") == op_id
        )

    return matches


def _claims(statement: str, _parameters) -> bool:
    """queue.claim's statement (its candidates CTE, FOR UPDATE SKIP LOCKED)."""
    return statement.lstrip().startswith("WITH candidates") and "SKIP LOCKED" in statement


def test_an_erasure_and_a_claim_never_both_take_a_pending_user_create(
    committed_pg, account, bridge_settings
):
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        member = gym.membership
        connect(session, gym.id, API_KEY, settings=bridge_settings, now=NOW)
        mirror.member_created(session, member, now=NOW)
        session.commit()
        (create,) = session.scalars(select(SyncOp)).all()
        assert (create.op_type, create.status) == (OpType.user_create, OpStatus.pending)

    claimed: list[SyncOp] = []
    claim_done = threading.Event()
    errors: list[BaseException] = []

    def erase() -> None:
        with factory() as staff:
            organization = staff.get(Organization, gym.id)
            erase_personal_data(
                staff, organization, member.user_id, actor_user_id=gym.owner.id, now=LATER
            )
            staff.commit()

    def claim() -> None:
        try:
            with factory() as worker:
                claimed.extend(
                    queue.claim(
                        worker, gym.id, now=LATER, limit=10, lease=timedelta(minutes=5), owner="w1"
                    )
                )
        finally:
            claim_done.set()

    erasure_writes = _writes_op(create.id)

    def after_the_meeting(_conn, _cursor, statement, parameters, *_args) -> None:
        """The erasure writes once the claim is done (it read the ops before the claim ran):
        the one order in which a claim could take what the erasure read pending."""
        if threading.current_thread().name == "erasure" and erasure_writes(statement, parameters):
            claim_done.wait(timeout=10)

    def run(flow) -> None:
        try:
            flow()
        except BaseException as error:  # reported to the test
            errors.append(error)

    with meeting(engine, {"erasure": erasure_writes, "claim": _claims}):
        event.listen(engine, "before_cursor_execute", after_the_meeting)  # after the pause
        try:
            threads = [
                threading.Thread(target=run, args=(erase,), name="erasure"),
                threading.Thread(target=run, args=(claim,), name="claim"),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
        finally:
            event.remove(engine, "before_cursor_execute", after_the_meeting)

    assert errors == []
    with factory() as session:
        ops = {op.id: op for op in session.scalars(select(SyncOp))}
    for op in claimed:
        if op.aggregate_key == create.aggregate_key:
            # Taken by the claim: its worker's, never withdrawn under it.
            assert ops[op.id].status is OpStatus.in_flight, (op.id, ops[op.id].status)
    assert ops[create.id].status in (OpStatus.superseded, OpStatus.in_flight)
