"""A business check that fails after the owner's store-review approval (spec A 3: the four owner
checks of a target are missing, passing or failing; decisions: store-review approval needs all
four passing on both targets). The approval was given while they passed; an owner who then
marks one failing (the privacy answers changed, the support contact is wrong) has withdrawn what
the approval rested on. The operator's `gymctl releases record --result store_review_submitted`
recorded the submission anyway: it now refuses with release_checks_incomplete and writes nothing
until every check passes again. Results the store gave afterwards are still recorded."""

from __future__ import annotations

import json

from sqlalchemy import func, select

from gymctl.config import get_settings
from gymctl.models import Organization
from gymctl.models.organizations import Tier
from gymctl.models.releases import ReleaseEvidence
from gymctl.providers.storage import storage_from_settings
from gymctl.releases import branded_apps, candidates, checks, owner
from tests.conftest import NOW
from tests.releases.conftest import APP_CONFIG, COMMIT
from tests.releases.helpers import approve_intake_in
from tests.releases.test_cli import operator_env, refusal, run  # noqa: F401 (fixture)

SUBMITTED = ("record", "iron-temple", "--platform", "ios", "--result", "store_review_submitted")


def _check(factory, org_id, owner_id, check: str, status: str, target: str = "ios") -> None:
    with factory() as session:
        owner.record_check(
            session,
            org_id,
            target=target,
            check=check,
            status=status,
            actor_user_id=owner_id,
            now=NOW,
        )
        session.commit()


def _evidence(factory) -> int:
    with factory() as session:
        return session.scalar(select(func.count()).select_from(ReleaseEvidence))


def test_a_check_failed_after_the_store_review_approval_stops_the_submission(operator_env):  # noqa: F811
    factory, org_id, owner_id = operator_env
    settings = get_settings()
    with factory() as session:
        gym = session.get(Organization, org_id)
        gym.tier = Tier.elite
        branded_apps.create_app(session, settings, gym, now=NOW)
        branded_apps.configure(session, org_id, APP_CONFIG, now=NOW)
        approve_intake_in(session, org_id, actor_user_id=owner_id)
        store = storage_from_settings(settings)
        candidate = candidates.cut_candidate(
            session, store, settings, org_id, source_commit=COMMIT, now=NOW
        )
        session.commit()
        digest = candidate.snapshot_sha256
    for target in checks.TARGETS:
        for check in checks.CHECKS:
            _check(factory, org_id, owner_id, check, "passing", target)
    with factory() as session:
        owner.approve(
            session,
            org_id,
            purpose="store_review",
            revision=1,
            snapshot_sha256=digest,
            actor_user_id=owner_id,
            now=NOW,
        )
        session.commit()

    _check(factory, org_id, owner_id, "privacy_answers_confirmed", "failing", "android")
    assert refusal(*SUBMITTED) == "release_checks_incomplete"
    assert _evidence(factory) == 0

    _check(factory, org_id, owner_id, "privacy_answers_confirmed", "passing", "android")
    recorded = json.loads(run(*SUBMITTED, "--json").stdout)
    assert recorded["result"] == "store_review_submitted"
    _check(factory, org_id, owner_id, "store_listing_confirmed", "failing")
    approved = ("record", "iron-temple", "--platform", "ios", "--result", "store_review_approved")
    assert json.loads(run(*approved, "--json").stdout)["result"] == "store_review_approved"
    assert _evidence(factory) == 2
