"""Release candidates (spec A 2.14, 3): immutable snapshots and which one is current.

A snapshot binds the source commit, config revision, branding version (brand revision and member
app version), native version, build-service project, per-platform profiles, asset digests,
push-credential digest and the approved submission intake with its revision. Its
`snapshot_sha256` is taken over the canonical JSON and is what approvals and operations bind to;
the row is never updated (the database refuses it).

The current candidate is the newest one not superseded. A new brand or app publish, config
revision or intake revision supersedes it; `refresh_current` notices that on every use (and the
daemon sweep notices it unattended), writing the supersession beside the immutable snapshot.
New snapshots admit only brand schemaVersion 2; stored schemaVersion 1 snapshots still dispatch.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gymctl.branding.published import live_app_version, live_brand
from gymctl.config import Settings
from gymctl.errors import DomainError, conflict, invalid
from gymctl.events import EventKind, emit
from gymctl.models import Organization
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.models.releases import (
    BrandedApp,
    CandidateSupersession,
    ReleaseCandidate,
    ReleaseRequest,
)
from gymctl.providers.storage import ObjectStore
from gymctl.releases import approvals, codes
from gymctl.releases.branded_apps import may_have_app, require_building
from gymctl.releases.build_input import (
    NATIVE_VERSION,
    branding_part,
    inputs_from,
    read_live_assets,
)
from gymctl.releases.canonical import sha256_of
from gymctl.releases.requests import audit, require_request

SNAPSHOT_FORMAT = 1
NEW_BRAND_SCHEMA = 2
DISPATCHABLE_BRAND_SCHEMAS = (1, 2)  # the stored-snapshot union (spec A 9)
COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
REQUIRED_CONFIG = (
    "buildServiceProject",
    "iosProfile",
    "androidProfile",
    "pushCredentialSha256",
)


def latest_candidate(session: Session, request: ReleaseRequest) -> ReleaseCandidate | None:
    return session.scalar(
        select(ReleaseCandidate)
        .where(ReleaseCandidate.release_request_id == request.id)
        .order_by(ReleaseCandidate.generation.desc())
        .limit(1)
    )


def is_superseded(session: Session, candidate: ReleaseCandidate) -> bool:
    return session.get(CandidateSupersession, candidate.id) is not None


def live_binding(session: Session, request: ReleaseRequest) -> dict[str, int | None]:
    """What a snapshot taken now would be bound to."""
    app = session.get(BrandedApp, request.branded_app_id)
    brand = live_brand(session, request.organization_id)
    version = live_app_version(session, request.organization_id)
    return {
        "brandRevision": brand.revision if brand else None,
        "appVersion": version.version if version else None,
        "configRevision": app.config_revision if app else None,
        "submissionRevision": request.submission_revision,
    }


def snapshot_binding(snapshot: dict[str, Any]) -> dict[str, int | None]:
    return {
        "brandRevision": snapshot["branding"]["brandRevision"],
        "appVersion": snapshot["branding"]["appVersion"],
        "configRevision": snapshot["configRevision"],
        "submissionRevision": snapshot["submission"]["revision"],
    }


REASONS = {
    "brandRevision": "publish",
    "appVersion": "publish",
    "configRevision": "config",
    "submissionRevision": "intake",
}


def supersede(session: Session, candidate: ReleaseCandidate, reason: str, *, now: datetime) -> None:
    """Written once: when another transaction (the daemon's pass, an owner's read) superseded the
    same candidate first, its row stands and this one is dropped, not raised as a conflict."""
    try:
        with unique_violation("pk_release_candidate_supersessions"), session.begin_nested():
            session.add(
                CandidateSupersession(candidate_id=candidate.id, reason=reason, superseded_at=now)
            )
            session.flush()
    except UniqueViolation:
        return
    emit(
        session,
        EventKind.audit,
        "release.candidate_superseded",
        at=now,
        aggregate_type="release_candidate",
        aggregate_id=candidate.id,
        organization_id=candidate.organization_id,
        payload={"generation": candidate.generation, "reason": reason},
    )
    session.flush()


def _moved_on(session: Session, request: ReleaseRequest, candidate: ReleaseCandidate) -> list[str]:
    """The bound revisions that no longer match the live ones."""
    bound, live = snapshot_binding(candidate.snapshot), live_binding(session, request)
    return [name for name in REASONS if bound[name] != live[name]]


def is_current(session: Session, request: ReleaseRequest, candidate: ReleaseCandidate) -> bool:
    """Read-only (a refusal built on it writes nothing): `candidate` is the newest one, not
    superseded, and nothing it binds has moved on."""
    latest = latest_candidate(session, request)
    return (
        latest is not None
        and latest.id == candidate.id
        and not is_superseded(session, candidate)
        and not _moved_on(session, request, candidate)
    )


def refresh_current(
    session: Session, request: ReleaseRequest, *, now: datetime
) -> ReleaseCandidate | None:
    """The current candidate, after superseding it if a publish, config or intake revision
    moved on since it was taken."""
    candidate = latest_candidate(session, request)
    if candidate is None or is_superseded(session, candidate):
        return None
    changed = _moved_on(session, request, candidate)
    if changed:
        supersede(session, candidate, REASONS[changed[0]], now=now)
        return None
    return candidate


def require_current(
    session: Session, organization_id: uuid.UUID, *, now: datetime
) -> tuple[ReleaseRequest, ReleaseCandidate]:
    request = require_request(session, organization_id)
    candidate = refresh_current(session, request, now=now)
    if candidate is None:
        raise conflict(codes.RELEASE_CANDIDATE_MISSING, "there is no current release candidate")
    return request, candidate


def cut_candidate(
    session: Session,
    store: ObjectStore,
    settings: Settings,
    organization_id: uuid.UUID,
    *,
    source_commit: str,
    now: datetime,
) -> ReleaseCandidate:
    """Take a new snapshot; it replaces the current candidate (or is the current one, when
    nothing it binds has changed)."""
    if not COMMIT.fullmatch(source_commit or ""):
        raise invalid(codes.RELEASE_SOURCE_COMMIT_INVALID, "a full lowercase hex commit id")
    require_building(session.get(Organization, organization_id))  # may_have_app's rule
    ahead = read_live_assets(session, store, organization_id)  # before the request's lock
    request = require_request(session, organization_id)
    session.refresh(request, with_for_update=True)
    app = session.get(BrandedApp, request.branded_app_id)
    missing = [name for name in REQUIRED_CONFIG if not app.config.get(name)]
    if missing:
        raise conflict(
            codes.RELEASE_CONFIG_INCOMPLETE, "the app is not fully configured", missing=missing
        )
    if approvals.intake_approval(session, request) is None:
        raise conflict(
            codes.RELEASE_INTAKE_NOT_APPROVED, "the owner has not approved the current intake"
        )
    inputs = inputs_from(session, ahead, settings, organization_id)
    brand = inputs["brand"]
    if brand.get("schemaVersion") != NEW_BRAND_SCHEMA:
        raise conflict(
            codes.RELEASE_BRAND_SCHEMA_UNSUPPORTED, "new snapshots take brand schemaVersion 2 only"
        )
    body = {
        "format": SNAPSHOT_FORMAT,
        "organizationId": str(organization_id),
        "sourceCommit": source_commit,
        "configRevision": app.config_revision,
        "nativeVersion": NATIVE_VERSION,
        "brandSchemaVersion": NEW_BRAND_SCHEMA,
        "branding": {
            "brandRevision": brand["revision"],
            "appVersion": brand["appVersion"],
            "brand": brand,
        },
        "buildServiceProject": app.config["buildServiceProject"],
        "profiles": {"ios": app.config["iosProfile"], "android": app.config["androidProfile"]},
        "assets": inputs["assets"],
        "pushCredentialSha256": app.config["pushCredentialSha256"],
        "submission": inputs["submission"],
        "app": inputs["app"],
    }
    current = refresh_current(session, request, now=now)
    if current is not None:
        previous = {k: v for k, v in current.snapshot.items() if k != "generation"}
        if previous == body:
            return current
        supersede(session, current, "replaced", now=now)
    return _insert(session, request, body, now=now)


def _insert(
    session: Session, request: ReleaseRequest, body: dict[str, Any], *, now: datetime
) -> ReleaseCandidate:
    """The next generation's snapshot of `body`."""
    organization_id = request.organization_id
    generation = (
        session.scalar(
            select(func.max(ReleaseCandidate.generation)).where(
                ReleaseCandidate.release_request_id == request.id
            )
        )
        or 0
    ) + 1
    snapshot = {**body, "generation": generation}
    candidate = ReleaseCandidate(
        organization_id=organization_id,
        release_request_id=request.id,
        generation=generation,
        snapshot=snapshot,
        snapshot_sha256=sha256_of(snapshot),
        brand_schema_version=NEW_BRAND_SCHEMA,
        created_at=now,
    )
    session.add(candidate)
    audit(
        session,
        request,
        "release.candidate_created",
        now=now,
        payload={"generation": generation, "snapshotSha256": candidate.snapshot_sha256},
    )
    session.flush()
    return candidate


def require_dispatchable(candidate: ReleaseCandidate) -> None:
    if candidate.brand_schema_version not in DISPATCHABLE_BRAND_SCHEMAS:
        raise conflict(codes.RELEASE_BRAND_SCHEMA_UNSUPPORTED, "this snapshot cannot dispatch")


def replaces_on_publish(session: Session, organization_id: uuid.UUID) -> bool:
    """Read only: a publish now may replace a current candidate (`supersede_on_publish`), whose
    snapshot digests the live app's stored assets. The publish reads them ahead of its lock."""
    request = session.scalar(
        select(ReleaseRequest).where(ReleaseRequest.organization_id == organization_id)
    )
    before = latest_candidate(session, request) if request is not None else None
    return before is not None and not is_superseded(session, before)


def supersede_on_publish(
    session: Session, organization_id: uuid.UUID, *, store: ObjectStore | None, now: datetime
) -> ReleaseCandidate | None:
    """Branding calls this after a publish or unpublish of the brand or the member app, so the
    candidate it outdates is superseded in the same transaction, at the publish instant; after
    a publish (`store` given) a new candidate replaces it (spec A 3). Returns the replacement.
    Under the publish's lock `store` answers from what it read ahead (`replaces_on_publish`,
    gymctl.assets.read_ahead): no write lock is held while the object store answers.
    The release request's lock first, as an operator's cut takes it before it supersedes:
    without it the two superseded the same candidate in opposite orders (a deadlock), and a
    cut committed between this look at the candidate and its refresh was replaced by a
    rebuild of the older commit it had replaced."""
    request = session.scalar(
        select(ReleaseRequest)
        .where(ReleaseRequest.organization_id == organization_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if request is None:
        return None
    before = latest_candidate(session, request)
    if before is None or is_superseded(session, before):
        return None
    if refresh_current(session, request, now=now) is not None or store is None:
        return None
    return replace_after_publish(session, store, request, before, now=now)


def replace_after_publish(
    session: Session,
    store: ObjectStore,
    request: ReleaseRequest,
    superseded: ReleaseCandidate,
    *,
    now: datetime,
) -> ReleaseCandidate | None:
    """Spec A 3: "new candidate replaces it". The replacement keeps the superseded snapshot's
    source commit, app and configuration and binds the branding live now. None replaces it
    when something else moved too (config or intake revision: an operator cuts or the owner
    approves first) or the live branding cannot be snapshotted; the tracker then shows none.
    Nor for a gym that may no longer have the app (`may_have_app`: moved below the top tier,
    inactive): a candidate is refused there, and the publish itself goes through."""
    previous = superseded.snapshot
    app = session.get(BrandedApp, request.branded_app_id)
    if (
        not may_have_app(session.get(Organization, request.organization_id))
        or previous.get("format") != SNAPSHOT_FORMAT
        or app is None
        or previous["configRevision"] != app.config_revision
        or previous["submission"]["revision"] != request.submission_revision
        or approvals.intake_approval(session, request) is None
    ):
        return None
    try:
        with session.begin_nested():
            brand, assets = branding_part(session, store, request.organization_id)
    except DomainError:
        return None
    if brand.get("schemaVersion") != NEW_BRAND_SCHEMA:
        return None
    body = {k: v for k, v in previous.items() if k != "generation"}
    body["branding"] = {
        "brandRevision": brand["revision"],
        "appVersion": brand["appVersion"],
        "brand": brand,
    }
    body["assets"] = assets
    return _insert(session, request, body, now=now)


def supersede_stale(session: Session, *, now: datetime) -> dict[str, int]:
    """The daemon's pass: supersede every current candidate whose binding moved on."""
    superseded = 0
    for request in session.scalars(select(ReleaseRequest)).all():
        before = latest_candidate(session, request)
        if before is None or is_superseded(session, before):
            continue
        if refresh_current(session, request, now=now) is None:
            superseded += 1
    return {"superseded": superseded}
