"""A gym with one person per role, each able to call the API with a real token."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.models import Base, Role
from tests import factories
from tests.factories import Gym, Person, signed_in


@pytest.fixture
def gym(session, idp) -> Gym:
    gym = factories.make_gym(session, name="Iron Temple", roles=Role, idp=idp)
    session.commit()
    return gym


@pytest.fixture
def outsider(session, idp) -> Person:
    person = signed_in(idp, session, identity_id="user_outsider", email="outsider@else.example")
    session.commit()
    return person


NOT_STATE = {"user_sessions", "job_runs", "rate_windows"}  # bookkeeping, not what a refusal
# may not touch (a refused attempt still spends its rate-limit budget)


def snapshot(session: Session) -> dict[str, list[str]]:
    """Every row of every table: equal snapshots mean nothing was written or altered."""
    session.expire_all()
    return {
        table.name: sorted(repr(tuple(row)) for row in session.execute(select(table)))
        for table in Base.metadata.sorted_tables
        if table.name not in NOT_STATE
    }


@pytest.fixture
def platform_admin(session, idp) -> Person:
    """A platform admin: platformRole admin in the provider's private metadata."""
    idp.add_account("user_ops", "ops@gymctl.example", private_metadata={"platformRole": "admin"})
    person = signed_in(idp, session, identity_id="user_ops", email="ops@gymctl.example")
    session.commit()
    return person


def imported(client, response, headers):
    """A roster import the route queued (202), registered by the daemons' job with the app's
    own session factory and outreach, then read back at its Location as the route shows it."""
    from gymctl.access.member_imports import work_imports

    assert response.status_code == 202, response.get_json()
    services = client.application.extensions["gymctl"]
    work_imports(services.session_factory, services.outreach, now=services.clock.now())
    return client.get(response.headers["Location"], headers=headers)


def links_sent(client) -> dict[str, int]:
    """The daemons' `link_requests` sweep, with the app's session factory and outreach: the
    link requests registrations stored, emailed."""
    from gymctl.access.invitations import deliver_link_requests

    services = client.application.extensions["gymctl"]
    now = services.clock.now()
    return deliver_link_requests(services.session_factory, services.outreach, now=now)
