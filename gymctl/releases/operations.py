"""Operations of the protected release workflow (spec A 5.5).

An operator dispatches an operation for the current candidate; the workflow receives only the
operation id and a dispatch nonce (shown once, stored as a digest). It claims the operation with
both plus its CI provider's OIDC token; only when the token's bound claims match what the
operation was dispatched with does the API answer, once (the nonce is single use):

- build and internal_upload jobs get short-lived executor access and the immutable inputs (the
  candidate's snapshot, its digest, and fresh signed asset URLs that are never stored);
- smoke and production_review jobs get only a redacted receipt: no build-service or store
  identifiers, no credentials.

Before an internal upload is submitted to the store, the executor asks again: the owner's
internal-upload approval is rechecked at that instant (it lapses after 24 hours). A candidate a
publish, config or intake revision superseded after the dispatch is neither built (the claim of a
build or upload job) nor uploaded (the submit): `release_candidate_stale`. A nonce not yet
claimed when the operator dispatched the platform again claims nothing (`ci_nonce_invalid`).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.config import Settings
from gymctl.errors import conflict, forbidden, invalid, not_found, unauthorized
from gymctl.events import EventKind, emit
from gymctl.models import Organization
from gymctl.models.releases import ReleaseCandidate, ReleaseOperation, ReleaseRequest
from gymctl.providers.storage import ObjectStore
from gymctl.releases import approvals, ci_access, codes, evidence, switches
from gymctl.releases.branded_apps import require_building
from gymctl.releases.build_input import ASSET_DOWNLOAD_LIFETIME
from gymctl.releases.candidates import is_current, require_current, require_dispatchable

EXECUTOR_KINDS = ("build", "internal_upload")
RECEIPT_KINDS = ("smoke", "production_review")
KINDS = EXECUTOR_KINDS + RECEIPT_KINDS
PLATFORMS = ("ios", "android")
EXECUTOR_ACCESS_LIFETIME = timedelta(minutes=15)
RESULTS = ("succeeded", "failed")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _same(secret: str | None, digest: str | None) -> bool:
    return bool(secret) and bool(digest) and hmac.compare_digest(_digest(secret), digest)


def dispatch(
    session: Session,
    settings: Settings,
    organization_id: uuid.UUID,
    *,
    kind: str,
    platform: str,
    now: datetime,
) -> tuple[ReleaseOperation, str]:
    """A new operation for the current candidate, and its dispatch nonce (returned once)."""
    if kind not in KINDS:
        raise invalid(codes.RELEASE_OPERATION_KIND_INVALID, f"kinds: {', '.join(KINDS)}")
    if platform not in PLATFORMS:
        raise invalid(codes.RELEASE_TARGET_INVALID, "platform is ios or android")
    require_building(session.get(Organization, organization_id))  # may_have_app's rule
    expected = ci_access.expected_claims(settings)
    request, candidate = require_current(session, organization_id, now=now)
    require_dispatchable(candidate)
    if kind == "internal_upload":
        switches.require(session, organization_id, switches.INTERNAL_UPLOAD_ASSISTANCE)
        approvals.require_internal_upload(session, request, candidate, now=now)
    nonce = ids.token()
    operation = ReleaseOperation(
        organization_id=organization_id,
        candidate_id=candidate.id,
        snapshot_sha256=candidate.snapshot_sha256,
        kind=kind,
        platform=platform,
        status="dispatched",
        nonce_sha256=_digest(nonce),
        ci=expected,
        created_at=now,
    )
    session.add(operation)
    session.flush()
    evidence.set_state(session, request, candidate, platform, f"{kind}_dispatched", now=now)
    emit(
        session,
        EventKind.audit,
        "release.operation_dispatched",
        at=now,
        aggregate_type="release_operation",
        aggregate_id=operation.id,
        organization_id=organization_id,
        payload={"kind": kind, "platform": platform, "generation": candidate.generation},
    )
    return operation, nonce


def _operation(session: Session, operation_id: uuid.UUID) -> ReleaseOperation:
    operation = session.scalar(
        select(ReleaseOperation).where(ReleaseOperation.id == operation_id).with_for_update()
    )
    if operation is None:
        raise not_found(codes.RELEASE_OPERATION_NOT_FOUND, "no such operation")
    return operation


def _require_still_current(session: Session, candidate: ReleaseCandidate) -> ReleaseRequest:
    """A publish, config or intake revision since the dispatch superseded what the operation
    would build or upload: its approvals bound a snapshot that is no longer the gym's app. Nor
    is it built for a gym deleted, inactive or moved below the top tier since the dispatch
    (`require_building`): the claim handed such a run executor access and the gym's inputs."""
    require_building(session.get(Organization, candidate.organization_id))
    request = session.get(ReleaseRequest, candidate.release_request_id)
    if not is_current(session, request, candidate):
        raise conflict(codes.RELEASE_CANDIDATE_STALE, "that candidate is no longer current")
    return request


def receipt(operation: ReleaseOperation, candidate: ReleaseCandidate) -> dict[str, Any]:
    """What smoke and production-review jobs may know: nothing to build, sign or upload with."""
    branding = candidate.snapshot["branding"]
    return {
        "operationId": str(operation.id),
        "kind": operation.kind,
        "platform": operation.platform,
        "snapshotSha256": candidate.snapshot_sha256,
        "generation": candidate.generation,
        "nativeVersion": candidate.snapshot["nativeVersion"],
        "brandRevision": branding["brandRevision"],
        "appVersion": branding["appVersion"],
    }


def claim(
    session: Session,
    store: ObjectStore,
    claims: dict[str, Any],
    *,
    operation_id: uuid.UUID,
    dispatch_nonce: str,
    now: datetime,
) -> dict[str, Any]:
    """`claims` come from a verified OIDC token (ci_access). Refusals change nothing."""
    operation = _operation(session, operation_id)
    if not _same(dispatch_nonce, operation.nonce_sha256):
        raise forbidden(codes.CI_NONCE_INVALID, "the dispatch nonce does not match")
    if operation.nonce_used_at is not None:
        raise conflict(codes.CI_NONCE_USED, "this dispatch nonce was already used")
    if not _is_newest(session, operation):
        # A re-dispatch replaces a run that never claimed: a late start of it would build
        # beside the newer one, whose outcome alone moves the platform's state.
        raise forbidden(
            codes.CI_NONCE_INVALID, "a later dispatch of this platform replaced this operation"
        )
    wrong = ci_access.mismatched(claims, operation.ci)
    if wrong:
        raise forbidden(
            codes.CI_CLAIMS_MISMATCH,
            "the CI token does not prove the dispatched workflow",
            claims=wrong,
        )
    candidate = session.get(ReleaseCandidate, operation.candidate_id)
    if operation.kind in EXECUTOR_KINDS:
        _require_still_current(session, candidate)
    operation.nonce_used_at = now
    operation.status = "claimed"
    emit(
        session,
        EventKind.audit,
        "release.operation_claimed",
        at=now,
        aggregate_type="release_operation",
        aggregate_id=operation.id,
        organization_id=operation.organization_id,
        payload={"kind": operation.kind, "platform": operation.platform},
    )
    if operation.kind in RECEIPT_KINDS:
        session.flush()
        return {"receipt": receipt(operation, candidate)}
    access = ids.token()
    operation.access_sha256 = _digest(access)
    operation.access_expires_at = now + EXECUTOR_ACCESS_LIFETIME
    session.flush()
    snapshot = candidate.snapshot
    return {
        "operationId": str(operation.id),
        "kind": operation.kind,
        "platform": operation.platform,
        "executorAccess": {
            "token": access,
            "expiresAt": operation.access_expires_at.isoformat(),
        },
        "inputs": {
            "snapshot": snapshot,
            "snapshotSha256": candidate.snapshot_sha256,
            "assetDownloads": {
                name: store.presign_get(entry["key"], expires=ASSET_DOWNLOAD_LIFETIME)
                for name, entry in snapshot["assets"].items()
            },
        },
    }


def _with_access(
    session: Session, operation_id: uuid.UUID, access: str | None, now: datetime
) -> ReleaseOperation:
    operation = _operation(session, operation_id)
    if not _same(access, operation.access_sha256):
        raise unauthorized(codes.EXECUTOR_ACCESS_INVALID, "executor access is missing or wrong")
    if operation.access_expires_at is None or operation.access_expires_at <= now:
        raise unauthorized(codes.EXECUTOR_ACCESS_EXPIRED, "executor access has expired")
    return operation


def _is_newest(session: Session, operation: ReleaseOperation) -> bool:
    """No later dispatch of the candidate's platform overtook `operation`: only then may it
    still be claimed, and do its submit or outcome say where the platform stands (an operator
    who dispatched again, or two at once, left an older one in flight; its late outcome is its
    evidence only)."""
    newer = session.scalar(
        select(ReleaseOperation.id)
        .where(
            ReleaseOperation.candidate_id == operation.candidate_id,
            ReleaseOperation.platform == operation.platform,
            ReleaseOperation.created_at > operation.created_at,
        )
        .limit(1)
    )
    return newer is None


def _require_unfinished(operation: ReleaseOperation) -> None:
    """An operation's outcome is reported once: a later report or submit would append a second
    record and move the platform's state away from what happened."""
    if operation.status in RESULTS:
        raise conflict(
            codes.RELEASE_OPERATION_FINISHED,
            f"this operation already reported its result ({operation.status})",
            result=operation.status,
        )


def authorize_submit(
    session: Session, operation_id: uuid.UUID, access: str | None, *, now: datetime
) -> dict[str, Any]:
    """Immediately before an internal upload goes to the store: is the approval still valid?"""
    operation = _with_access(session, operation_id, access, now)
    if operation.kind != "internal_upload":
        raise conflict(codes.RELEASE_OPERATION_KIND_INVALID, "only internal uploads are submitted")
    _require_unfinished(operation)
    candidate = session.get(ReleaseCandidate, operation.candidate_id)
    request = _require_still_current(session, candidate)
    approval = approvals.require_internal_upload(session, request, candidate, now=now)
    if operation.status == "submitted":  # a retry whose answer was lost: recorded once
        return {"authorized": True, "approvalExpiresAt": approval.expires_at.isoformat()}
    operation.submitted_at = now
    operation.status = "submitted"
    evidence.append(
        session,
        candidate,
        platform=operation.platform,
        kind="internal_upload",
        result="submitted",
        source="executor",
        observed_at=now,
        now=now,
        operation_id=operation.id,
    )
    if _is_newest(session, operation):
        evidence.set_state(
            session, request, candidate, operation.platform, "internal_upload_submitted", now=now
        )
    return {"authorized": True, "approvalExpiresAt": approval.expires_at.isoformat()}


def report_result(
    session: Session,
    operation_id: uuid.UUID,
    access: str | None,
    *,
    result: str,
    now: datetime,
) -> dict[str, Any]:
    """The executor's outcome of its job: appended as evidence; the platform's state follows
    while the operation's candidate is still the current one."""
    if result not in RESULTS:
        raise invalid(codes.RELEASE_RESULT_INVALID, "result is succeeded or failed")
    operation = _with_access(session, operation_id, access, now)
    if operation.status == result:  # the same report again: answered, recorded once
        return {"operationId": str(operation.id), "status": operation.status}
    _require_unfinished(operation)
    if (
        operation.kind == "internal_upload"
        and result == "succeeded"
        and (operation.status != "submitted")
    ):
        # Spec A 3: the owner's approval is rechecked immediately before submit; an upload
        # reported done without its submit skipped that recheck.
        raise conflict(
            codes.RELEASE_OPERATION_NOT_SUBMITTED,
            "an internal upload succeeds only after its submit was authorized",
        )
    candidate = session.get(ReleaseCandidate, operation.candidate_id)
    request = session.get(ReleaseRequest, candidate.release_request_id)
    evidence.append(
        session,
        candidate,
        platform=operation.platform,
        kind=operation.kind,
        result=result,
        source="executor",
        observed_at=now,
        now=now,
        operation_id=operation.id,
    )
    if is_current(session, request, candidate) and _is_newest(session, operation):
        # A late result of a replaced candidate, or of an operation a newer dispatch of the
        # platform overtook, is its evidence only: the platform's state is where the current
        # candidate's newest operation stands (spec A 2.14).
        evidence.set_state(
            session, request, candidate, operation.platform, f"{operation.kind}_{result}", now=now
        )
    operation.status = result
    session.flush()
    return {"operationId": str(operation.id), "status": operation.status}
