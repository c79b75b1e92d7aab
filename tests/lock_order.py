"""Two flows run at once on PostgreSQL, each paused just before a chosen lock statement until
the other reaches its own: on a lock order that differs between them each holds what the other
asks for next ("deadlock detected"); on one fixed order one of them waits and both commit. The
tests of the lock order (tests/*/test_locks_*.py) share these."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from sqlalchemy import event
from sqlalchemy.engine import Engine

from gymctl.bookings import schedule
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
