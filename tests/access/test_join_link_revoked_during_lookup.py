"""A join link revoked (or paused) while the join form asks the identity provider issues no
ticket. The form reads the link, then asks the provider with no transaction open on the embedded
default (decisions s41); staff who revoke the link meanwhile commit, and the form's write phase
must see it: it re-reads the link locked and answers as a revoked link answers before the call,
404 join_link_not_found, writing nothing. It issued the ticket and stored a ticket_issued
submission for the revoked link.

Real commits on both engines (committed_database): the revoke is another session's, as staff's
request is; the provider is the loopback fake (tests/idp.py), asked for real."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gymctl.access import join
from gymctl.db import get_engine, session_factory
from gymctl.models import AuditLog, JoinLink, JoinSubmission, Role
from gymctl.providers.mail import MailboxMailer
from tests import factories
from tests.access.test_join import make_link
from tests.conftest import NOW

ADDRESS = "new.person@example.test"


@pytest.fixture
def world(committed_database, settings, clock, tmp_path, idp):
    """A gym with an owner and a live join link, committed; the app over that database."""
    from webhooks.app import create_app

    factory = session_factory(get_engine(committed_database))
    with factory() as session:
        gym = factories.make_gym(session, roles=(Role.owner,))
        link = make_link(session, gym.organization)
        session.commit()
        owner_id, link_id, org_id, token = (gym[Role.owner].user.id, link.id, gym.id, link.token)
    mailer = MailboxMailer(tmp_path / "mailbox", settings.mail_from, clock=clock)
    app = create_app(settings, session_factory=factory, clock=clock, mailer=mailer)
    return app, factory, owner_id, org_id, link_id, token


def _revoke(factory, org_id, link_id, owner_id):
    with factory() as staff:
        join.revoke_join_link(staff, org_id, link_id, actor_user_id=owner_id, now=NOW)
        staff.commit()


def _pause(factory, org_id, link_id, owner_id):
    with factory() as staff:
        join.set_link_active(staff, org_id, link_id, False, actor_user_id=owner_id, now=NOW)
        staff.commit()


def _during_lookup(monkeypatch, app, meanwhile):
    """Run `meanwhile` (once) while the identity provider is asked for the address: inside the
    lookup, before the loopback provider answers."""
    admin = app.extensions["gymctl"].identity_admin
    lookup, ran = admin.find_account, []

    def looking_up(email, keys):
        if not ran:
            ran.append(True)
            meanwhile()
        return lookup(email, keys)

    monkeypatch.setattr(admin, "find_account", looking_up)
    return ran


def _submissions(factory, link_id) -> int:
    with factory() as session:
        query = select(func.count()).where(JoinSubmission.join_link_id == link_id)
        return session.scalar(query.select_from(JoinSubmission))


@pytest.mark.parametrize("change", [_revoke, _pause], ids=["revoked", "paused"])
def test_a_link_revoked_during_the_lookup_issues_no_ticket(world, monkeypatch, idp, change):
    app, factory, owner_id, org_id, link_id, token = world
    before = idp.admin_requests
    ran = _during_lookup(monkeypatch, app, lambda: change(factory, org_id, link_id, owner_id))

    answer = app.test_client().post(f"/join/{token}/request-invite", json={"email": ADDRESS})

    assert ran  # the change came while the provider was asked
    assert idp.admin_requests > before
    assert answer.status_code == 404, answer.json  # it was 201, a ticket for a revoked link
    assert answer.json["code"] == "join_link_not_found"
    assert _submissions(factory, link_id) == 0
    with factory() as session:
        assert session.get(JoinLink, link_id).active is False
        blocked = select(func.count()).where(AuditLog.action == "join.blocked")
        assert session.scalar(blocked.select_from(AuditLog)) == 0


def test_a_known_address_on_a_link_revoked_during_the_lookup_is_not_audited_blocked(
    world, monkeypatch, idp
):
    """The provider holds the address: before the call a revoked link answered 404 whatever the
    address; after it, it did not write join.blocked for a link no longer open either."""
    app, factory, owner_id, org_id, link_id, token = world
    idp.add_account("user_known", ADDRESS, verified=True)
    _during_lookup(monkeypatch, app, lambda: _revoke(factory, org_id, link_id, owner_id))

    answer = app.test_client().post(f"/join/{token}/request-invite", json={"email": ADDRESS})

    assert (answer.status_code, answer.json["code"]) == (404, "join_link_not_found")
    assert _submissions(factory, link_id) == 0
    with factory() as session:
        blocked = select(func.count()).where(AuditLog.action == "join.blocked")
        assert session.scalar(blocked.select_from(AuditLog)) == 0


def test_a_link_left_alone_during_the_lookup_still_issues_its_ticket(world, monkeypatch):
    app, factory, _owner_id, _org_id, link_id, token = world
    _during_lookup(monkeypatch, app, lambda: None)

    answer = app.test_client().post(f"/join/{token}/request-invite", json={"email": ADDRESS})

    assert answer.status_code == 201, answer.json
    assert "__identity_ticket" in answer.json["signUpUrl"]
    assert _submissions(factory, link_id) == 1
