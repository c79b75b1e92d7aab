"""The four owner business checks of a release target (spec A 3): scoped to the target (store
platform) and the artifact generation (the candidate they were made against), each missing,
passing or failing with the time it was observed. A new candidate starts with all missing."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.errors import invalid
from gymctl.models.releases import BusinessCheck, ReleaseCandidate, ReleaseRequest
from gymctl.releases import codes, rows
from gymctl.releases.requests import audit

TARGETS = ("ios", "android")
CHECKS = (
    "store_listing_confirmed",
    "privacy_answers_confirmed",
    "content_rating_confirmed",
    "support_contact_confirmed",
)
STATUSES = ("passing", "failing")


def record(
    session: Session,
    request: ReleaseRequest,
    candidate: ReleaseCandidate,
    *,
    target: str,
    check: str,
    status: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> BusinessCheck:
    if target not in TARGETS:
        raise invalid(codes.RELEASE_TARGET_INVALID, f"targets: {', '.join(TARGETS)}")
    if check not in CHECKS:
        raise invalid(codes.RELEASE_CHECK_INVALID, f"checks: {', '.join(CHECKS)}")
    if status not in STATUSES:
        raise invalid(codes.RELEASE_CHECK_STATUS_INVALID, "status is passing or failing")
    # The same check sent twice at once (a double tap, a retry): the second records this
    # observation on the first one's row.
    row = rows.write(
        session,
        BusinessCheck,
        {
            "release_request_id": request.id,
            "target": target,
            "generation": candidate.generation,
            "check": check,
        },
        "pk_release_business_checks",
        {"status": status, "observed_at": now, "recorded_by_user_id": actor_user_id},
    )
    audit(
        session,
        request,
        "release.check_recorded",
        now=now,
        actor_user_id=actor_user_id,
        payload={"target": target, "check": check, "status": status},
    )
    session.flush()
    return row


def states(
    session: Session, request: ReleaseRequest, generation: int | None
) -> dict[str, dict[str, dict[str, Any]]]:
    """target -> check -> {status, observedAt}; everything missing without a candidate."""
    recorded = (
        session.scalars(
            select(BusinessCheck).where(
                BusinessCheck.release_request_id == request.id,
                BusinessCheck.generation == generation,
            )
        ).all()
        if generation is not None
        else []
    )
    found = {(row.target, row.check): row for row in recorded}
    return {
        target: {
            check: (
                {"status": row.status, "observedAt": row.observed_at.isoformat()}
                if (row := found.get((target, check))) is not None
                else {"status": "missing", "observedAt": None}
            )
            for check in CHECKS
        }
        for target in TARGETS
    }


def all_passing(session: Session, request: ReleaseRequest, generation: int) -> bool:
    return all(
        entry["status"] == "passing"
        for target in states(session, request, generation).values()
        for entry in target.values()
    )
