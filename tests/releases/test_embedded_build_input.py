"""The build input and a candidate cut on the quick start's demo gym, with the outside-call
detector on (tests/embedded_outside_calls.py): both digest the live app's stored assets, and no
thread may hold SQLite's one write lock while the object store answers (decision s42). The
admin route, `gymctl releases build-input` and `gymctl releases candidate create` held it."""

from __future__ import annotations

import uuid

import pytest

from gymctl import clock
from gymctl.config import get_settings
from gymctl.db import session_factory, session_scope
from gymctl.models import Organization
from gymctl.models.organizations import Tier
from gymctl.models.releases import ReleaseCandidate
from gymctl.releases import branded_apps, candidates, requests
from tests import test_embedded_workflows as walks
from tests.embedded_outside_calls import watching
from tests.releases.conftest import APP_CONFIG, COMMIT
from tests.releases.helpers import approve_intake_in
from tests.test_embedded_workflows import OWNER

demo, api = walks.demo, walks.api  # the quick start's demo gym over its API (fixtures)


@pytest.fixture
def released(api, monkeypatch):
    """The demo gym with its own app, an approved intake, and its owner a platform admin."""
    from webhooks.app import create_app

    org_id = uuid.UUID(api.org)
    at = clock.now()
    with session_scope(session_factory()) as session:
        if requests.find_request(session, org_id) is None:
            gym = session.get(Organization, org_id)
            gym.tier = Tier.elite  # a dedicated app is the top tier's
            branded_apps.create_app(session, get_settings(), gym, now=at)
            branded_apps.configure(session, org_id, APP_CONFIG, now=at)
            branded_apps.set_enabled(session, org_id, True, now=at)
            requests.open_request(session, org_id, now=at)
            approve_intake_in(session, org_id)
    monkeypatch.setenv("GYMCTL_PLATFORM_ADMINS", OWNER)
    get_settings.cache_clear()
    api.client = create_app().test_client()
    return api


def test_the_admin_build_input_holds_no_write_lock_while_the_store_answers(released):
    with watching() as seen:
        answer = released.call("GET", "/admin/organizations/ORG/releases/build-input", OWNER, 200)
    assert answer["assets"]
    assert set(answer["assetDownloads"]) == set(answer["assets"])
    assert "folder store (S3 stand-in)" in seen.doors()
    assert not seen.calls, seen.report()


def test_a_candidate_cut_holds_no_write_lock_while_the_store_answers(released):
    org_id = uuid.UUID(released.org)
    store = released.client.application.extensions["gymctl"].store
    with watching() as seen, session_scope(session_factory()) as session:
        cut = candidates.cut_candidate(
            session, store, get_settings(), org_id, source_commit=COMMIT, now=clock.now()
        )
        digests = cut.snapshot["assets"]
    assert "folder store (S3 stand-in)" in seen.doors()
    assert not seen.calls, seen.report()
    with session_scope(session_factory()) as session:
        stored = session.get(ReleaseCandidate, cut.id)
        assert digests
        assert stored.snapshot["assets"] == digests
