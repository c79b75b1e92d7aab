"""Two writers of one row at the same instant, on PostgreSQL: the second finds the first's row
instead of failing its request with a unique-key error.

- Spec A 3: a current candidate becomes superseded once, though the daemon's pass and an owner's
  read may notice the same new revision together.
- Spec A 6.4: a device registering its push token twice at once (an app retrying) keeps one
  registration."""

from __future__ import annotations

import threading
import time

from sqlalchemy import func, select, text

from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, OutboxEvent, Role, User
from gymctl.models.releases import CandidateSupersession, PushRegistration, ReleaseCandidate
from gymctl.releases import candidates, push
from tests import factories
from tests.conftest import NOW
from tests.releases.helpers import inserted_candidate


def _waiting_on_a_lock(engine) -> bool:
    with engine.connect() as connection:
        return bool(connection.scalar(text("SELECT count(*) FROM pg_locks WHERE NOT granted")) or 0)


def _race(engine, first, second_write) -> list[BaseException]:
    """Run `second_write` in a thread until it waits on `first`'s uncommitted row, then commit
    `first`; the errors the second writer met."""
    errors: list[BaseException] = []

    def race() -> None:
        try:
            second_write()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=race)
    thread.start()
    deadline = time.monotonic() + 10
    while not _waiting_on_a_lock(engine) and time.monotonic() < deadline:
        time.sleep(0.02)
    first.commit()
    thread.join(timeout=30)
    return errors


def test_two_transactions_superseding_one_candidate_write_it_once(committed_pg):
    engine = get_engine(committed_pg)
    with engine.begin() as connection:
        _, candidate_id = inserted_candidate(connection, {"generation": 1})
    factory = session_factory(engine)
    first, second = factory(), factory()
    try:
        # Both passed refresh_current's "not superseded yet" check.
        candidates.supersede(first, first.get(ReleaseCandidate, candidate_id), "config", now=NOW)
        other = second.get(ReleaseCandidate, candidate_id)

        def second_write() -> None:
            candidates.supersede(second, other, "publish", now=NOW)
            second.commit()

        assert _race(engine, first, second_write) == []
    finally:
        first.close()
        second.close()
    with factory() as session:
        rows = session.scalars(select(CandidateSupersession)).all()
        assert [(row.candidate_id, row.reason) for row in rows] == [(candidate_id, "config")]
        superseded = "release.candidate_superseded"
        events = select(func.count()).select_from(OutboxEvent).where(OutboxEvent.name == superseded)
        audits = select(func.count()).select_from(AuditLog).where(AuditLog.action == superseded)
        assert (session.scalar(events), session.scalar(audits)) == (1, 1)


def test_one_device_registering_twice_at_once_keeps_one_registration(committed_pg, settings):
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as session:
        gym = factories.organization(session)
        person = factories.user(session)
        factories.membership(session, user=person, organization=gym, role=Role.member)
        session.commit()
        gym_id, person_id = gym.id, person.id
    first, second = factory(), factory()
    container = settings.multi_org_app_id

    def register(session, platform):
        user = session.get(User, person_id)
        push.register(
            session,
            settings,
            gym_id,
            user,
            app_id=container,
            platform=platform,
            token="t-1",
            now=NOW,
        )

    try:
        register(first, "ios")

        def second_write() -> None:
            register(second, "android")
            second.commit()

        assert _race(engine, first, second_write) == []
    finally:
        first.close()
        second.close()
    with factory() as session:
        rows = session.scalars(select(PushRegistration)).all()
        assert [(row.app_id, row.platform, row.user_id) for row in rows] == [
            (container, "android", person_id)
        ]
