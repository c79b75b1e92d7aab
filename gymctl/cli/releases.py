"""`gymctl releases ...`: what operators use to build and ship a gym's own app. The same domain
functions as the admin routes; `--dry-run` runs a write and rolls it back."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gymctl import clock
from gymctl.cli import codes
from gymctl.cli.inputs import read_given
from gymctl.cli.output import JSON, err_console, print_json, render_mapping, render_rows
from gymctl.errors import invalid

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

app = typer.Typer(no_args_is_help=True)
apps = typer.Typer(no_args_is_help=True, help="The gym's dedicated app mapping (immutable).")
candidate_app = typer.Typer(no_args_is_help=True, help="Release candidates (snapshots).")
app.add_typer(apps, name="app")
app.add_typer(candidate_app, name="candidate")

ORG = typer.Argument(..., help="Organization id or slug.")
DRY_RUN = typer.Option(False, "--dry-run", help="Do it, show the result, roll it back.")


@contextmanager
def _unit(dry_run: bool = False) -> Iterator[Session]:
    """`session_scope`, or with --dry-run the same work rolled back."""
    from gymctl.db import session_factory, session_scope

    if not dry_run:
        with session_scope() as session:
            yield session
        return
    with session_factory()() as session:
        yield session
        session.rollback()
        err_console.print("dry run: nothing was written")


def _show(data: dict[str, Any], title: str, as_json: bool) -> None:
    if as_json:
        print_json(data)
    else:
        render_mapping(data, title=title)


# --- the app mapping -------------------------------------------------------------------------


@apps.command("create")
def create_command(
    organization: str = ORG,
    link_slug: str | None = typer.Option(None, "--link-slug", help="Default: the gym's slug."),
    apple_bundle_id: str | None = typer.Option(None, "--apple-bundle-id"),
    android_package: str | None = typer.Option(None, "--android-package"),
    as_json: bool = JSON,
    dry_run: bool = DRY_RUN,
) -> None:
    """Map the gym to its dedicated app; the IDs and link slug can never change afterwards."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.config import get_settings
    from gymctl.releases import branded_apps
    from gymctl.releases.requests import open_request

    settings = get_settings()
    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        row = branded_apps.create_app(
            session,
            settings,
            gym,
            link_slug=link_slug,
            apple_bundle_id=apple_bundle_id,
            android_package=android_package,
            now=clock.now(),
        )
        open_request(session, gym.id, now=clock.now())
        shown = branded_apps.describe_for_operator(row, settings)
    _show(shown, "branded app", as_json)


@apps.command("show")
def show_command(organization: str = ORG, as_json: bool = JSON) -> None:
    from gymctl.access.gyms import resolve_organization
    from gymctl.config import get_settings
    from gymctl.releases import branded_apps

    settings = get_settings()
    with _unit(dry_run=False) as session:
        gym = resolve_organization(session, organization)
        shown = branded_apps.describe_for_operator(
            branded_apps.require_app(session, gym.id), settings
        )
    _show(shown, "branded app", as_json)


@apps.command("configure")
def configure_command(
    organization: str = ORG,
    apple_team_id: str | None = typer.Option(None, "--apple-team-id"),
    android_cert_sha256: list[str] | None = typer.Option(
        None, "--android-cert-sha256", help="AA:BB:... (repeat for several)."
    ),
    build_project: str | None = typer.Option(None, "--build-project"),
    ios_profile: str | None = typer.Option(None, "--ios-profile"),
    android_profile: str | None = typer.Option(None, "--android-profile"),
    apple_store_account: str | None = typer.Option(None, "--apple-store-account"),
    google_store_account: str | None = typer.Option(None, "--google-store-account"),
    push_credential: Path | None = typer.Option(
        None, "--push-credential", exists=True, dir_okay=False, help="Only its digest is kept."
    ),
    as_json: bool = JSON,
    dry_run: bool = DRY_RUN,
) -> None:
    """Operator settings of the app; a change is a new config revision."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.config import get_settings
    from gymctl.releases import branded_apps

    given = {
        "appleTeamId": apple_team_id,
        "androidCertSha256": [c.upper() for c in android_cert_sha256 or []] or None,
        "buildServiceProject": build_project,
        "iosProfile": ios_profile,
        "androidProfile": android_profile,
        "appleStoreAccount": apple_store_account,
        "googleStoreAccount": google_store_account,
        "pushCredentialSha256": (_credential_digest(push_credential) if push_credential else None),
    }
    changes = {name: value for name, value in given.items() if value is not None}
    settings = get_settings()
    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        row = branded_apps.configure(session, gym.id, changes, now=clock.now())
        shown = branded_apps.describe_for_operator(row, settings)
    _show(shown, "branded app", as_json)


# A push credential is a key file of a few kilobytes (an APNs .p8, an FCM service account).
MAX_CREDENTIAL_BYTES = 1024 * 1024


def _credential_digest(path: Path) -> str:
    """The digest of the credential file (the only thing kept of it). An empty file (or one of
    only whitespace) is refused, push_credential_empty, before the database is opened: its
    digest, sha256 of nothing, was kept as the app's credential and a candidate carried it."""
    content = read_given(path, "--push-credential", limit=MAX_CREDENTIAL_BYTES)
    if len(content) > MAX_CREDENTIAL_BYTES:
        raise typer.BadParameter(
            f"{path} is over {MAX_CREDENTIAL_BYTES} bytes: not a push credential",
            param_hint="--push-credential",
        )
    if not content.strip():
        raise invalid(
            codes.PUSH_CREDENTIAL_EMPTY,
            f"--push-credential {path} is empty: give the key file (an APNs .p8, an FCM "
            "service account); nothing was changed",
        )
    return hashlib.sha256(content).hexdigest()


def _enable(organization: str, enabled: bool, as_json: bool) -> None:
    from gymctl.access.gyms import resolve_organization
    from gymctl.releases import branded_apps

    with _unit() as session:
        gym = resolve_organization(session, organization)
        row = branded_apps.set_enabled(session, gym.id, enabled, now=clock.now())
        shown = {"organizationId": str(gym.id), "enabled": row.enabled}
    _show(shown, "branded app", as_json)


@apps.command("enable")
def enable_command(organization: str = ORG, as_json: bool = JSON) -> None:
    """Turn the internal runtime switch on (lookups and links resolve)."""
    _enable(organization, True, as_json)


@apps.command("disable")
def disable_command(organization: str = ORG, as_json: bool = JSON) -> None:
    """Turn it off: lookups and links deny, pushes stop."""
    _enable(organization, False, as_json)


# --- feature switches -----------------------------------------------------------------------


@app.command("switch")
def switch_command(
    organization: str = ORG,
    name: str = typer.Argument(
        ...,
        help="member-app-release-tracker, member-app-internal-upload-assistance or "
        "member-app-hermes-assistance.",
    ),
    state: str = typer.Argument(..., help="on or off"),
    as_json: bool = JSON,
) -> None:
    """Enable or disable a release feature switch for one gym (all are off by default)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.releases import switches

    if state not in ("on", "off"):
        raise invalid(codes.FEATURE_SWITCH_STATE_INVALID, "state is on or off")
    with _unit() as session:
        gym = resolve_organization(session, organization)
        shown = switches.set_switch(session, gym.id, name, state == "on", now=clock.now())
    _show(shown, "feature switches", as_json)


# --- build input, candidates, operations, observed results ----------------------------------


@app.command("build-input")
def build_input_command(organization: str = ORG, as_json: bool = JSON) -> None:
    """The build input {app, brand, submission, assets, assetDownloads}; URLs are signed now."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.config import get_settings
    from gymctl.providers.storage import storage_from_settings
    from gymctl.releases.build_input import build_input

    settings = get_settings()
    with _unit() as session:
        gym = resolve_organization(session, organization)
        data = build_input(session, storage_from_settings(settings), settings, gym.id)
    if as_json:
        print_json(data)
        return
    render_mapping(data["app"], title="app")
    render_rows(
        ({"asset": name, **entry} for name, entry in data["assets"].items()),
        ["asset", "key", "sha256"],
        title="assets",
    )


def _candidate_row(candidate) -> dict[str, Any]:
    return {
        "generation": candidate.generation,
        "snapshotSha256": candidate.snapshot_sha256,
        "sourceCommit": candidate.snapshot["sourceCommit"],
        "brandSchemaVersion": candidate.brand_schema_version,
        "createdAt": candidate.created_at.isoformat(),
    }


@candidate_app.command("create")
def candidate_create_command(
    organization: str = ORG,
    source_commit: str = typer.Option(..., "--source-commit", help="Full commit id."),
    as_json: bool = JSON,
    dry_run: bool = DRY_RUN,
) -> None:
    """Take an immutable snapshot; it replaces the current candidate."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.config import get_settings
    from gymctl.providers.storage import storage_from_settings
    from gymctl.releases import candidates

    settings = get_settings()
    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        candidate = candidates.cut_candidate(
            session,
            storage_from_settings(settings),
            settings,
            gym.id,
            source_commit=source_commit,
            now=clock.now(),
        )
        shown = {**_candidate_row(candidate), "snapshot": candidate.snapshot}
    if as_json:
        print_json(shown)
    else:
        render_mapping(_candidate_row(candidate), title="release candidate")


@candidate_app.command("show")
def candidate_show_command(organization: str = ORG, as_json: bool = JSON) -> None:
    """The current candidate (superseding it first if a publish, config or intake moved on)."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.releases import candidates

    with _unit() as session:
        gym = resolve_organization(session, organization)
        _, candidate = candidates.require_current(session, gym.id, now=clock.now())
        shown = {**_candidate_row(candidate), "snapshot": candidate.snapshot}
    if as_json:
        print_json(shown)
    else:
        render_mapping(_candidate_row(candidate), title="current release candidate")


@app.command("dispatch")
def dispatch_command(
    organization: str = ORG,
    kind: str = typer.Option(
        ..., "--kind", help="build, internal_upload, smoke or production_review."
    ),
    platform: str = typer.Option(..., "--platform", help="ios or android"),
    as_json: bool = JSON,
) -> None:
    """Dispatch the protected workflow for the current candidate: prints the operation id and
    the single-use dispatch nonce (shown only now) to pass as its inputs."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.config import get_settings
    from gymctl.releases import operations

    settings = get_settings()
    with _unit() as session:
        gym = resolve_organization(session, organization)
        operation, nonce = operations.dispatch(
            session, settings, gym.id, kind=kind, platform=platform, now=clock.now()
        )
        shown = {"operationId": str(operation.id), "dispatchNonce": nonce}
    _show(shown, "operation", as_json)


@app.command("record")
def record_command(
    organization: str = ORG,
    platform: str = typer.Option(..., "--platform", help="ios or android"),
    result: str = typer.Option(
        ...,
        "--result",
        help="store_review_submitted, store_review_approved, store_review_rejected or "
        "publicly_released.",
    ),
    observed_at: datetime | None = typer.Option(
        None, "--observed-at", help="When you saw it in the store console (UTC; default now)."
    ),
    note: str | None = typer.Option(None, "--note"),
    as_json: bool = JSON,
    dry_run: bool = DRY_RUN,
) -> None:
    """Record a store-review or public-release result observed by hand in the store console."""
    from gymctl.access.gyms import resolve_organization
    from gymctl.releases import candidates, evidence

    now = clock.now()
    # Typer parses a naive time: the console's times are taken as UTC.
    seen = observed_at.replace(tzinfo=UTC) if observed_at is not None else now
    with _unit(dry_run) as session:
        gym = resolve_organization(session, organization)
        request, candidate = candidates.require_current(session, gym.id, now=now)
        row = evidence.record_observed(
            session,
            request,
            candidate,
            platform=platform,
            result=result,
            observed_at=seen,
            note=note,
            now=now,
        )
        shown = {
            "platform": row.platform,
            "result": row.result,
            "generation": candidate.generation,
            "observedAt": row.observed_at.isoformat(),
        }
    _show(shown, "observed result", as_json)
