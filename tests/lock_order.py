"""Two flows run at once on PostgreSQL, each paused just before a chosen lock statement until
the other reaches its own: on a lock order that differs between them each holds what the other
asks for next ("deadlock detected"); on one fixed order one of them waits and both commit. The
tests of the lock order (tests/*/test_locks_*.py) share these."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta

from sqlalchemy import event, select
from sqlalchemy.engine import Engine

from gymctl.access.memberships import remove_member
from gymctl.bookings import schedule
from gymctl.models import Booking, BookingStatus
from tests.bookings.conftest import book_seat
from tests.conftest import NOW


@contextmanager
def meeting(engine: Engine, at: dict[str, Callable], timeout: float = 3.0) -> Iterator[None]:
    """Each named thread pauses before its first statement its matcher accepts until the
    other has reached its own: both hold what they took first, and then each asks for its
    second lock. A thread that waits on a lock before its pattern (the fixed order: it asks
    for the first lock the other holds) never arrives; the other goes on after `timeout`."""
    barrier = threading.Barrier(len(at), timeout=timeout)
    met: set[str] = set()

    def pause(_conn, _cursor, statement, parameters, *_args) -> None:
        name = threading.current_thread().name
        if name in at and name not in met and at[name](statement, parameters):
            met.add(name)
            with suppress(threading.BrokenBarrierError):
                barrier.wait()

    event.listen(engine, "before_cursor_execute", pause)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", pause)


def run_together(engine: Engine, flows: dict[str, tuple[Callable, Callable]]) -> list:
    """Run each flow in a thread of its name, meeting as `meeting` says; the errors raised."""
    errors: list[BaseException] = []

    def run(flow: Callable) -> None:
        try:
            flow()
        except BaseException as error:  # reported to the test
            errors.append(error)

    with meeting(engine, {name: pattern for name, (pattern, _) in flows.items()}):
        threads = [
            threading.Thread(target=run, args=(flow,), name=name)
            for name, (_, flow) in flows.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    return errors


def locks(table: str, row_id=None, strength: str = "FOR SHARE") -> Callable:
    """A statement locking `table`'s rows (the one of `row_id` when given)."""
    pattern = re.compile(rf"FROM {table}\b.*{strength}", re.S)

    def matches(statement: str, parameters) -> bool:
        if not pattern.search(statement):
            return False
        values = parameters.values() if isinstance(parameters, dict) else parameters or ()
        return row_id is None or row_id in values

    return matches


def class_at(session, gym, starts_at, capacity=5):
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=capacity,
        duration_minutes=60, now=NOW,
    )  # fmt: skip
    return schedule.schedule_session(session, kind, starts_at=starts_at, now=NOW)


def mutual_waits(session, gym, one, two, *, days=(20, 21)):
    """Each of two members holds the one seat of a class where the other waits (the scene of a
    lock order's deadlock: each flow holds its member and wants the other's); one's seat."""
    first = class_at(session, gym, NOW + timedelta(days=days[0]), capacity=1)
    second = class_at(session, gym, NOW + timedelta(days=days[1]), capacity=1)
    seat = book_seat(session, gym, first, one)
    book_seat(session, gym, second, two)
    book_seat(session, gym, first, two, at=NOW + timedelta(seconds=1))
    book_seat(session, gym, second, one, at=NOW + timedelta(seconds=1))
    return seat


def removed_by_staff(factory, gym, member, now) -> None:
    """The gym's owner removes `member`, in a transaction of its own."""
    with factory() as staff:
        remove_member(
            staff, gym.organization.id, member.user_id, actor=gym.owner_membership,
            actor_user_id=gym.owner.id, now=now,
        )  # fmt: skip
        staff.commit()


def seats_left(session, member) -> list:
    """The member's bookings not cancelled."""
    return session.scalars(
        select(Booking.id).where(
            Booking.membership_id == member.id, Booking.status != BookingStatus.cancelled
        )
    ).all()
