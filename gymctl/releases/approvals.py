"""Owner approvals (spec A 2.14, 3, 8): purpose-specific and bound to a revision.

An approval counts only for its own purpose, only while the intake revision it names is the
current one, and (except the intake approval itself) only for the candidate snapshot it names.
The internal-upload approval lapses 24 hours after it was given (at exactly 24 h it is expired)
and is checked again immediately before the upload is submitted. Store-review and
public-release approvals authorize no API call: they let an administrator act in the store
console by hand and record what they observed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.errors import conflict, invalid
from gymctl.models.releases import ReleaseApproval, ReleaseCandidate, ReleaseRequest
from gymctl.releases import codes
from gymctl.releases.requests import audit

INTAKE = "submission_intake"
INTERNAL_UPLOAD = "internal_upload"
STORE_REVIEW = "store_review"
PUBLIC_RELEASE = "public_release"
PURPOSES = (INTAKE, INTERNAL_UPLOAD, STORE_REVIEW, PUBLIC_RELEASE)
INTERNAL_UPLOAD_LIFETIME = timedelta(hours=24)


def intake_approval(session: Session, request: ReleaseRequest) -> ReleaseApproval | None:
    return session.scalar(
        select(ReleaseApproval)
        .where(
            ReleaseApproval.release_request_id == request.id,
            ReleaseApproval.purpose == INTAKE,
            ReleaseApproval.revision == request.submission_revision,
        )
        .order_by(ReleaseApproval.approved_at.desc())
        .limit(1)
    )


def valid_approval(
    session: Session,
    request: ReleaseRequest,
    candidate: ReleaseCandidate,
    purpose: str,
    *,
    now: datetime,
) -> ReleaseApproval | None:
    """The newest approval of `purpose` bound to this candidate and the current revision that
    has not expired at `now`."""
    found = session.scalar(
        select(ReleaseApproval)
        .where(
            ReleaseApproval.release_request_id == request.id,
            ReleaseApproval.purpose == purpose,
            ReleaseApproval.candidate_id == candidate.id,
            ReleaseApproval.snapshot_sha256 == candidate.snapshot_sha256,
            ReleaseApproval.revision == request.submission_revision,
        )
        .order_by(ReleaseApproval.approved_at.desc())
        .limit(1)
    )
    if found is None or (found.expires_at is not None and found.expires_at <= now):
        return None
    return found


def require_internal_upload(
    session: Session, request: ReleaseRequest, candidate: ReleaseCandidate, *, now: datetime
) -> ReleaseApproval:
    approval = valid_approval(session, request, candidate, INTERNAL_UPLOAD, now=now)
    if approval is None:
        raise conflict(
            codes.INTERNAL_UPLOAD_APPROVAL_MISSING,
            "the owner's internal-upload approval is missing or expired (24 h)",
        )
    return approval


def approve(
    session: Session,
    request: ReleaseRequest,
    candidate: ReleaseCandidate | None,
    *,
    purpose: str,
    revision: int,
    snapshot_sha256: str | None,
    actor_user_id,
    now: datetime,
) -> ReleaseApproval:
    """Record the owner's approval for one purpose. `revision` (and for candidate purposes
    `snapshot_sha256`) must be what is current: an approval of something already replaced
    would approve what the owner never saw."""
    if purpose not in PURPOSES:
        raise invalid(codes.RELEASE_APPROVAL_PURPOSE_INVALID, f"purposes: {', '.join(PURPOSES)}")
    if revision != request.submission_revision:
        raise conflict(codes.RELEASE_REVISION_STALE, "the intake changed since you reviewed it")
    if purpose == INTAKE:
        if request.submission is None:
            raise conflict(codes.RELEASE_SUBMISSION_MISSING, "fill in the submission first")
        candidate = None
    else:
        if candidate is None:
            raise conflict(codes.RELEASE_CANDIDATE_MISSING, "there is no current release candidate")
        if snapshot_sha256 != candidate.snapshot_sha256:
            raise conflict(codes.RELEASE_CANDIDATE_STALE, "that candidate is no longer current")
    approval = ReleaseApproval(
        organization_id=request.organization_id,
        release_request_id=request.id,
        candidate_id=candidate.id if candidate is not None else None,
        purpose=purpose,
        revision=revision,
        snapshot_sha256=candidate.snapshot_sha256 if candidate is not None else None,
        approved_by_user_id=actor_user_id,
        approved_at=now,
        expires_at=now + INTERNAL_UPLOAD_LIFETIME if purpose == INTERNAL_UPLOAD else None,
    )
    session.add(approval)
    audit(
        session,
        request,
        "release.approved",
        now=now,
        actor_user_id=actor_user_id,
        payload={"purpose": purpose, "revision": revision},
    )
    session.flush()
    return approval


def approvals_of(session: Session, request: ReleaseRequest) -> list[ReleaseApproval]:
    return list(
        session.scalars(
            select(ReleaseApproval)
            .where(ReleaseApproval.release_request_id == request.id)
            .order_by(ReleaseApproval.approved_at, ReleaseApproval.id)
        )
    )
