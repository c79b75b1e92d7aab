"""`gymctl releases ...`: what operators use to build and ship a gym's own app."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from gymctl.cli import app as gymctl_app
from gymctl.config import get_settings
from gymctl.db import get_engine, session_factory
from gymctl.errors import DomainError
from gymctl.models.organizations import Tier
from gymctl.models.releases import BrandedApp, ReleaseEvidence
from gymctl.providers.storage import storage_from_settings
from gymctl.releases import approvals, requests
from gymctl.releases.candidates import require_current
from tests import factories
from tests.conftest import NOW
from tests.releases.conftest import COMMIT, REPOSITORY, WORKFLOW_REF, publish_branding
from tests.releases.helpers import approve_intake_in


@pytest.fixture
def operator_env(committed_pg, monkeypatch, tmp_path):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("GYMCTL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GYMCTL_RELEASE_CI_REPOSITORY", REPOSITORY)
    monkeypatch.setenv("GYMCTL_RELEASE_CI_REPOSITORY_ID", "123456789")
    monkeypatch.setenv("GYMCTL_RELEASE_CI_WORKFLOW", "Branded app")
    monkeypatch.setenv("GYMCTL_RELEASE_CI_WORKFLOW_REF", WORKFLOW_REF)
    get_settings.cache_clear()
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = factories.organization(session, name="Iron Temple", tier=Tier.elite)
        gym.slug = "iron-temple"
        owner_user = factories.user(session)
        factories.membership(session, user=owner_user, organization=gym, role="owner")
        publish_branding(session, storage_from_settings(get_settings()), gym.id)
        session.commit()
        return factory, gym.id, owner_user.id


def run(*args: str):
    result = CliRunner().invoke(gymctl_app, ["releases", *args])
    assert result.exit_code == 0, result.output
    return result


def refusal(*args: str) -> str:
    """The code a refused command reaches the top-level handler with (it exits 1 there)."""
    result = CliRunner().invoke(gymctl_app, ["releases", *args])
    assert result.exit_code != 0
    assert isinstance(result.exception, DomainError), result.output
    return result.exception.code


def test_an_operator_maps_builds_cuts_dispatches_and_records(operator_env):
    factory, org_id, owner_id = operator_env
    dry = json.loads(run("app", "create", "iron-temple", "--json", "--dry-run").stdout)
    assert dry["androidPackage"] == "com.gymctl.gym.iron_temple"
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(BrandedApp)) == 0
    created = json.loads(run("app", "create", "iron-temple", "--json").stdout)
    assert (created["appleBundleId"], created["enabled"]) == ("com.gymctl.gym.iron-temple", False)
    assert refusal("app", "create", "iron-temple") == "branded_app_exists"

    run(
        "app",
        "configure",
        "iron-temple",
        "--apple-team-id",
        "AB12CD34EF",
        "--build-project",
        "bsp-1",
        "--ios-profile",
        "ios-1",
        "--android-profile",
        "and-1",
        "--android-cert-sha256",
        ":".join(["a1"] * 32),
    )
    assert refusal("app", "configure", "iron-temple", "--apple-team-id", "nope") == (
        "branded_app_config_invalid"
    )
    shown = json.loads(run("app", "enable", "iron-temple", "--json").stdout)
    assert shown["enabled"] is True
    assert (
        json.loads(
            run("switch", "iron-temple", "member-app-release-tracker", "on", "--json").stdout
        )["member-app-release-tracker"]
        is True
    )

    built = json.loads(run("build-input", "iron-temple", "--json").stdout)
    assert set(built) == {"app", "brand", "submission", "assets", "assetDownloads"}
    assert "signature=" in built["assetDownloads"]["icon"]

    cut = ("candidate", "create", "iron-temple", "--source-commit", COMMIT)
    assert refusal(*cut) == "release_config_incomplete"
    credential = get_settings().home / "apns.p8"
    credential.parent.mkdir(parents=True, exist_ok=True)
    credential.write_bytes(b"-----BEGIN PRIVATE KEY-----")
    run("app", "configure", "iron-temple", "--push-credential", str(credential))
    assert refusal(*cut) == "release_intake_not_approved"

    with factory() as session:
        approve_intake_in(session, org_id, actor_user_id=owner_id)
        session.commit()
    candidate = json.loads(
        run("candidate", "create", "iron-temple", "--source-commit", COMMIT, "--json").stdout
    )
    assert candidate["generation"] == 1
    assert candidate["snapshot"]["pushCredentialSha256"] != ""
    current = json.loads(run("candidate", "show", "iron-temple", "--json").stdout)
    assert current["snapshotSha256"] == candidate["snapshotSha256"]

    dispatched = json.loads(
        run("dispatch", "iron-temple", "--kind", "build", "--platform", "ios", "--json").stdout
    )
    assert set(dispatched) == {"operationId", "dispatchNonce"}

    record = ("record", "iron-temple", "--platform", "ios", "--result", "publicly_released")
    assert refusal(*record) == "release_approval_missing"
    with factory() as session:
        request = requests.require_request(session, org_id)
        _, current_row = require_current(session, org_id, now=NOW)
        approvals.approve(
            session,
            request,
            current_row,
            purpose="public_release",
            revision=1,
            snapshot_sha256=current_row.snapshot_sha256,
            actor_user_id=owner_id,
            now=NOW,
        )
        session.commit()
    recorded = json.loads(
        run(
            "record",
            "iron-temple",
            "--platform",
            "ios",
            "--result",
            "publicly_released",
            "--observed-at",
            "2026-11-21T08:30:00",
            "--note",
            "live",
            "--json",
        ).stdout
    )
    assert (recorded["result"], recorded["observedAt"]) == (
        "publicly_released",
        "2026-11-21T08:30:00+00:00",
    )
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(ReleaseEvidence)) == 1

    table = run("app", "show", "iron-temple")
    assert "iron-temple" in table.stdout
