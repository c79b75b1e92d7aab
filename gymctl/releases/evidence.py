"""Release evidence and per-platform state (spec A 2.14, 5.5).

Evidence is append-only (the database refuses an UPDATE) and kept apart from the per-platform
state, which only says where each platform stands now. Store review and public release happen in
the store consoles by hand: the owner's approval authorizes no API call, and an administrator
records the result they observed (`gymctl releases record ...`), which appends evidence and
moves the platform's state.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.errors import conflict, invalid
from gymctl.models.releases import (
    ReleaseCandidate,
    ReleaseEvidence,
    ReleasePlatformState,
    ReleaseRequest,
)
from gymctl.releases import approvals, checks, codes, rows
from gymctl.releases.requests import audit

PLATFORMS = ("ios", "android")
# Observed results an administrator records by hand -> (evidence kind, approval it needs).
OBSERVED = {
    "store_review_submitted": ("store_review", approvals.STORE_REVIEW),
    "store_review_approved": ("store_review", approvals.STORE_REVIEW),
    "store_review_rejected": ("store_review", approvals.STORE_REVIEW),
    "publicly_released": ("public_release", approvals.PUBLIC_RELEASE),
}
SUBMITTED = "store_review_submitted"  # the one the checks gate: the others report the store


def append(
    session: Session,
    candidate: ReleaseCandidate,
    *,
    platform: str,
    kind: str,
    result: str,
    source: str,
    observed_at: datetime,
    now: datetime,
    operation_id: uuid.UUID | None = None,
    data: dict[str, Any] | None = None,
) -> ReleaseEvidence:
    row = ReleaseEvidence(
        organization_id=candidate.organization_id,
        candidate_id=candidate.id,
        operation_id=operation_id,
        platform=platform,
        kind=kind,
        result=result,
        source=source,
        observed_at=observed_at,
        recorded_at=now,
        data=dict(data or {}),
    )
    session.add(row)
    session.flush()
    return row


def set_state(
    session: Session,
    request: ReleaseRequest,
    candidate: ReleaseCandidate,
    platform: str,
    state: str,
    *,
    now: datetime,
) -> ReleasePlatformState:
    """`candidate`'s platform is now at `state`. Created by its first write; two at once (two
    dispatches, a dispatch and a report) leave one row, the later one's."""
    return rows.write(
        session,
        ReleasePlatformState,
        {"release_request_id": request.id, "platform": platform},
        "pk_release_platform_states",
        {"candidate_id": candidate.id, "state": state, "updated_at": now},
    )


def record_observed(
    session: Session,
    request: ReleaseRequest,
    candidate: ReleaseCandidate,
    *,
    platform: str,
    result: str,
    observed_at: datetime,
    note: str | None,
    now: datetime,
) -> ReleaseEvidence:
    """An administrator's record of what the store console showed."""
    if platform not in PLATFORMS:
        raise invalid(codes.RELEASE_TARGET_INVALID, "platform is ios or android")
    if result not in OBSERVED:
        raise invalid(codes.RELEASE_RESULT_INVALID, f"results: {', '.join(OBSERVED)}")
    if observed_at > now:
        raise invalid(codes.RELEASE_OBSERVED_IN_FUTURE, "an observation cannot be in the future")
    kind, purpose = OBSERVED[result]
    if approvals.valid_approval(session, request, candidate, purpose, now=now) is None:
        raise conflict(
            codes.RELEASE_APPROVAL_MISSING,
            f"the owner has not approved {purpose.replace('_', ' ')} of this candidate",
        )
    if result == SUBMITTED and not checks.all_passing(session, request, candidate.generation):
        # The approval rested on the four checks passing on both targets; one the owner marked
        # failing since withdraws it until it passes again. What the store answered to an
        # earlier submission is still recorded.
        raise conflict(
            codes.RELEASE_CHECKS_INCOMPLETE,
            "a business check is no longer passing: the owner must confirm it before submitting",
        )
    row = append(
        session,
        candidate,
        platform=platform,
        kind=kind,
        result=result,
        source="admin",
        observed_at=observed_at,
        now=now,
        data={"note": note} if note else None,
    )
    set_state(session, request, candidate, platform, result, now=now)
    audit(
        session,
        request,
        "release.result_recorded",
        now=now,
        payload={"platform": platform, "result": result, "generation": candidate.generation},
    )
    return row


def evidence_of(session: Session, request: ReleaseRequest) -> list[ReleaseEvidence]:
    return list(
        session.scalars(
            select(ReleaseEvidence)
            .join(ReleaseCandidate, ReleaseCandidate.id == ReleaseEvidence.candidate_id)
            .where(ReleaseCandidate.release_request_id == request.id)
            .order_by(ReleaseEvidence.recorded_at, ReleaseEvidence.id)
        )
    )


def platform_states(
    session: Session, request: ReleaseRequest, candidate: ReleaseCandidate | None
) -> dict[str, str | None]:
    """Where each platform stands with `candidate` (the tracker's: the current one): None for
    a platform whose last state is another candidate's, as for every platform without one."""
    found = {
        row.platform: row.state
        for row in session.scalars(
            select(ReleasePlatformState).where(
                ReleasePlatformState.release_request_id == request.id
            )
        )
        if candidate is not None and row.candidate_id == candidate.id
    }
    return {platform: found.get(platform) for platform in PLATFORMS}
