"""The CLI's import (member_imports.import_here) registers the roster itself, a chunk a
transaction: a step whose statements fail waits for its retry there and goes on, as the
daemons' job would, rather than leaving the rest to daemons an embedded install may not run."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from gymctl.access import member_imports
from gymctl.access.registrations import Registrar
from gymctl.access.staff_queue import RETRY_AFTER
from gymctl.models import Organization, Role
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_a_failed_step_waits_for_its_retry_and_the_import_finishes(
    session, session_factory, gym, monkeypatch
):
    session.commit()
    register = member_imports._register
    failures = []

    def flaky(session, registrar, row, *, now):
        if not failures:
            failures.append(row.email)
            raise OperationalError("INSERT", {}, Exception("the database went away"))
        return register(session, registrar, row, now=now)

    monkeypatch.setattr(member_imports, "_register", flaky)
    slept = []
    rows = [{"email": f"m{n}@example.test", "name": ""} for n in range(3)]
    registrar = Registrar(
        organization=session.get(Organization, gym.id),
        staff_user_id=gym[Role.owner].user.id,
        ip=None,
        path="cli: gymctl members import",
        outreach=None,
    )

    done = member_imports.import_here(
        session_factory,
        registrar,
        gym[Role.owner].membership.id,
        rows,
        now=lambda: NOW,
        sleep=slept.append,
    )

    assert failures == ["m0@example.test"]
    assert slept == [RETRY_AFTER[0].total_seconds()]
    assert (done["status"], done["done"]) == ("finished", 3)
    assert sorted(done["results"]["members"]["created"]) == [r["email"] for r in rows]
