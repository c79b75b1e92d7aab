"""What the gym's owner sees and does in the release pipeline, redacted by construction.

Owner-facing answers are built here from an allow-list of fields, never by passing rows or
snapshots through: no bundle or package IDs, store account identifiers, certificate
fingerprints, build-service or CI identifiers, raw errors, or the runtime `enabled` switch
(spec A 2.13).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from gymctl.errors import conflict
from gymctl.models.releases import ReleaseApproval, ReleaseCandidate
from gymctl.releases import approvals, checks, codes, evidence, requests, switches
from gymctl.releases.candidates import refresh_current, require_current


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def candidate_view(candidate: ReleaseCandidate | None) -> dict[str, Any] | None:
    if candidate is None:
        return None
    branding = candidate.snapshot["branding"]
    return {
        "generation": candidate.generation,
        "snapshotSha256": candidate.snapshot_sha256,
        "createdAt": _iso(candidate.created_at),
        "nativeVersion": candidate.snapshot["nativeVersion"],
        "brandRevision": branding["brandRevision"],
        "appVersion": branding["appVersion"],
    }


def approval_view(approval: ReleaseApproval, *, now: datetime) -> dict[str, Any]:
    return {
        "purpose": approval.purpose,
        "revision": approval.revision,
        "approvedAt": _iso(approval.approved_at),
        "expiresAt": _iso(approval.expires_at),
        "expired": approval.expires_at is not None and approval.expires_at <= now,
    }


def tracker(session: Session, organization_id: uuid.UUID, *, now: datetime) -> dict[str, Any]:
    """The release tracker (behind member-app-release-tracker)."""
    switches.require(session, organization_id, switches.RELEASE_TRACKER)
    features = switches.states(session, organization_id)
    request = requests.find_request(session, organization_id)
    if request is None:
        return {"requested": False, "features": features}
    candidate = refresh_current(session, request, now=now)
    generation = candidate.generation if candidate is not None else None
    return {
        "requested": True,
        "features": features,
        "submission": submission_view(session, request),
        "candidate": candidate_view(candidate),
        "approvals": [
            approval_view(a, now=now)
            for a in approvals.approvals_of(session, request)
            if a.revision == request.submission_revision
            and (
                a.candidate_id is None or (candidate is not None and a.candidate_id == candidate.id)
            )
        ],
        "checks": checks.states(session, request, generation),
        "platforms": evidence.platform_states(session, request, candidate),
        "evidence": [
            {
                "platform": row.platform,
                "kind": row.kind,
                "result": row.result,
                "observedAt": _iso(row.observed_at),
            }
            for row in evidence.evidence_of(session, request)
            if candidate is not None and row.candidate_id == candidate.id
        ],
    }


def submission_view(session: Session, request) -> dict[str, Any]:
    return {
        "intake": request.submission,
        "revision": request.submission_revision,
        "approved": approvals.intake_approval(session, request) is not None,
    }


def save_submission(
    session: Session,
    organization_id: uuid.UUID,
    submission: dict[str, Any] | None,
    *,
    revision: int,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    request = requests.save_submission(
        session,
        organization_id,
        submission,
        revision=revision,
        actor_user_id=actor_user_id,
        now=now,
    )
    refresh_current(session, request, now=now)  # a new intake revision supersedes it now
    return submission_view(session, request)


def approve(
    session: Session,
    organization_id: uuid.UUID,
    *,
    purpose: str,
    revision: int,
    snapshot_sha256: str | None,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    request = requests.require_request(session, organization_id)
    candidate = refresh_current(session, request, now=now)
    if purpose == approvals.INTERNAL_UPLOAD:
        switches.require(session, organization_id, switches.INTERNAL_UPLOAD_ASSISTANCE)
    if (
        purpose == approvals.STORE_REVIEW
        and candidate is not None
        and not checks.all_passing(session, request, candidate.generation)
    ):
        raise conflict(
            codes.RELEASE_CHECKS_INCOMPLETE,
            "every business check of every target must pass first",
        )
    approval = approvals.approve(
        session,
        request,
        candidate,
        purpose=purpose,
        revision=revision,
        snapshot_sha256=snapshot_sha256,
        actor_user_id=actor_user_id,
        now=now,
    )
    return approval_view(approval, now=now)


def record_check(
    session: Session,
    organization_id: uuid.UUID,
    *,
    target: str,
    check: str,
    status: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    request, candidate = require_current(session, organization_id, now=now)
    checks.record(
        session,
        request,
        candidate,
        target=target,
        check=check,
        status=status,
        actor_user_id=actor_user_id,
        now=now,
    )
    return {
        "generation": candidate.generation,
        "checks": checks.states(session, request, candidate.generation),
    }
