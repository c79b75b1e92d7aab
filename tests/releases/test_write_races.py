"""Two writers of one row at the same instant, on PostgreSQL: the second finds the first's row
instead of failing its request with a unique-key error.

- Spec A 3: a current candidate becomes superseded once, though the daemon's pass and an owner's
  read may notice the same new revision together.
- Spec A 6.4: a device registering its push token twice at once (an app retrying) keeps one
  registration."""

from __future__ import annotations

from sqlalchemy import func, select

from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, OutboxEvent, Role, User
from gymctl.models.releases import CandidateSupersession, PushRegistration, ReleaseCandidate
from gymctl.releases import candidates, push
from tests import factories
from tests.conftest import NOW
from tests.releases.helpers import inserted_candidate, race_writes, two_writers


def test_two_transactions_superseding_one_candidate_write_it_once(committed_pg):
    engine = get_engine(committed_pg)
    with engine.begin() as connection:
        _, candidate_id = inserted_candidate(connection, {"generation": 1})
    factory = session_factory(engine)
    with two_writers(engine) as (first, second):
        # Both passed refresh_current's "not superseded yet" check.
        candidates.supersede(first, first.get(ReleaseCandidate, candidate_id), "config", now=NOW)
        other = second.get(ReleaseCandidate, candidate_id)

        def second_write() -> None:
            candidates.supersede(second, other, "publish", now=NOW)
            second.commit()

        assert race_writes(engine, first, second_write) == []
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

    with two_writers(engine) as (first, second):
        register(first, "ios")

        def second_write() -> None:
            register(second, "android")
            second.commit()

        assert race_writes(engine, first, second_write) == []
    with factory() as session:
        rows = session.scalars(select(PushRegistration)).all()
        assert [(row.app_id, row.platform, row.user_id) for row in rows] == [
            (container, "android", person_id)
        ]
