"""Migration 0026 marks the rows folded before 0023 (users.folded_into_id) from the audit
trail's `user.linked` rows, which both ways of folding write in the fold's transaction: an
erasure of the person reaches the rows retired into them (erasure._retired_rows) only through
that mark. The folds here are the real ones (a link request accepted, then a sign-in link that
retires the login in turn); their marks are then cleared as a database from before 0023 has
them, and the revision's backfill must put back exactly what the code wrote."""

from __future__ import annotations

import importlib
from datetime import timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import update

from gymctl.access.invitations import _link_profile
from gymctl.access.ownership import link_profiles
from gymctl.models import User
from tests import factories
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

revision = importlib.import_module("migrations.versions.0026_s59_folded_into_backfill")


def _fold_a_person_three_times(session):
    """Pat's login accepted a gym's link request (its desk profile retired into the login);
    an hour later the login's first /users/me linked it to another gym's older profile of
    the same address, retiring the login and a newer profile into it: one chain, three rows
    retired, all into the profile that goes on."""
    organization = factories.organization(session)
    goes_on = factories.user(session, identity_id=None, email="pat@example.test")
    login = factories.user(
        session, identity_id="user_pat", email="pat@example.test", email_verified_at=NOW
    )
    newer = factories.user(session, identity_id=None, email="pat@example.test")
    newer.created_at = login.created_at + timedelta(seconds=1)
    desk = factories.user(session, identity_id=None, email="pat.desk@example.test")
    request = SimpleNamespace(profile_user_id=desk.id, organization_id=organization.id)
    _link_profile(session, request, login, now=NOW)
    assert link_profiles(session, login, now=NOW + timedelta(hours=1)).id == goes_on.id
    session.flush()
    return goes_on, {desk.id: goes_on.id, login.id: goes_on.id, newer.id: goes_on.id}


def _marks(session, ids):
    session.expire_all()
    return {row_id: session.get(User, row_id).folded_into_id for row_id in ids}


def test_folds_from_before_the_column_are_marked_from_the_trail(session):
    _goes_on, expected = _fold_a_person_three_times(session)
    assert _marks(session, expected) == expected  # what the code writes today
    session.execute(update(User).values(folded_into_id=None))  # a database from before 0023

    assert revision.backfill(session.connection()) == 3
    assert _marks(session, expected) == expected


def test_a_fold_before_the_column_follows_a_later_fold_marked_by_the_code(session):
    """The desk profile retired into the login before 0023 (no mark); the login retired into
    the other profile after it (marked by fold_person): the profile goes on as the last."""
    goes_on, expected = _fold_a_person_three_times(session)
    desk = next(iter(expected))
    session.execute(update(User).where(User.id == desk).values(folded_into_id=None))

    assert revision.backfill(session.connection()) == 1
    assert _marks(session, expected) == expected
    assert _marks(session, [goes_on.id]) == {goes_on.id: None}


def test_a_database_without_folds_is_left_as_it_is(session):
    factories.user(session)
    session.flush()
    assert revision.backfill(session.connection()) == 0
