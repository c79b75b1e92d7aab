"""Bulk invites: the request queues the addresses, the daemons invite them one at a time.

Answered in the request, a bulk invite of 500 addresses (an identity-provider lookup, often a
provider invitation, and an email each) ran past gunicorn's 30 s; it held the invitations
counter's lock (on the embedded default, the database's one write lock) from its first
provider invitation to its end, and a worker killed at 30 s rolled back invitations whose emails
had gone out, so their links led nowhere. Queued, the request takes milliseconds and locks
nothing of anyone else's; the `invitation_batches` daemon job invites each address with the same
`create_invitation` as a single invite, in a transaction of its own that also records the
address's outcome, so an outcome is stored exactly when its invitation is.

Each address is invited with the rights its asker has when its turn comes: staff removed or
demoted meanwhile invite no one more (permission_denied); a person the gym erased meanwhile is
not invited (erased). After the first rate_limited answer
(the identity provider's 429, or our own per-instance window) every remaining address reports
rate_limited and the provider is not called again (spec A 7).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.access import codes
from gymctl.access.erasure import is_erased_address
from gymctl.access.grants import require_grant
from gymctl.access.invitations import Outreach, create_invitation
from gymctl.access.permissions import Action, Module, enforce
from gymctl.db import READ_ONLY, advisory_lock, organization_row
from gymctl.errors import DomainError, forbidden, not_found, too_many_requests
from gymctl.models import (
    InvitationBatch,
    InvitationBatchStatus,
    Membership,
    MembershipStatus,
    Organization,
    OrganizationStatus,
    Role,
    User,
)
from gymctl.providers.identity_admin import RATE_LIMITED

logger = logging.getLogger(__name__)

MAX_ADDRESSES = 500
UNFINISHED_PER_ORGANIZATION = 3  # queued batches of one gym: a fourth waits for one to finish
# One daemon pass's share of its 5 s ticks: no new address starts after this much of it.
PASS_BUDGET_SECONDS = 20.0
INVITED = "invited"
FAILED = "failed"
ERASED = "erased"
DEFERRED = "deferred"  # an outside part failed: the address is tried again later
# An address whose identity provider or mail server failed, or whose transaction was lost, is
# tried again after these pauses; the fourth failure is its outcome.
RETRY_AFTER = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15))
MAX_TRIES = len(RETRY_AFTER) + 1


def queue_batch(
    session: Session,
    *,
    organization: Organization,
    actor: Membership,
    emails: list[str],
    role: Role,
    now: datetime,
) -> InvitationBatch:
    """Queue the addresses; the caller commits. A role the asker cannot grant is refused now,
    for the whole batch (each address would be refused alike); everything an address alone
    decides (its syntax, a pending invitation, an existing membership) is its own outcome."""
    require_grant(actor.role, role)
    # Serializes the count-then-insert of one gym's requests.
    advisory_lock(session, f"invitation_batches:{organization.id}")
    unfinished = session.scalar(
        select(func.count()).where(
            InvitationBatch.organization_id == organization.id,
            InvitationBatch.status == InvitationBatchStatus.queued,
        )
    )
    if unfinished >= UNFINISHED_PER_ORGANIZATION:
        raise too_many_requests(
            codes.INVITATION_BATCH_QUEUE_FULL,
            f"{unfinished} bulk invites of this gym are still being sent: ask again when one "
            "has finished",
        )
    batch = InvitationBatch(
        id=ids.new_id(),
        organization_id=organization.id,
        actor_membership_id=actor.id,
        role=role,
        emails=list(emails),
        results=[],
        status=InvitationBatchStatus.queued,
        created_at=now,
    )
    session.add(batch)
    session.flush()
    return batch


def find_batch(
    session: Session, organization_id: uuid.UUID, batch_id: uuid.UUID
) -> InvitationBatch:
    batch = organization_row(session, InvitationBatch, organization_id, batch_id)
    if batch is None:
        raise not_found(codes.INVITATION_BATCH_NOT_FOUND, "no such bulk invite")
    return batch


def batch_view(batch: InvitationBatch) -> dict[str, Any]:
    """A batch as the API shows it: the outcome of each address done so far, in order."""
    return {
        "id": str(batch.id),
        "organizationId": str(batch.organization_id),
        "status": batch.status,
        "role": batch.role.value,
        "total": len(batch.emails),
        "done": len(batch.results),
        "results": batch.results,
        "createdAt": batch.created_at,
        "finishedAt": batch.finished_at,
    }


# --- The daemon's side -------------------------------------------------------------------------


def work_batches(
    factory: sessionmaker[Session],
    outreach: Outreach,
    *,
    now: datetime,
    budget_seconds: float = PASS_BUDGET_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """One pass: the batches due take turns, an address each (one gym's 500 addresses do not
    hold back another gym's five), until each is finished or waiting, or the budget is spent
    (the rest waits for the next tick)."""
    started = monotonic()
    with factory() as session:
        session.connection(execution_options=READ_ONLY)
        turn = list(
            session.scalars(
                select(InvitationBatch.id)
                .where(
                    InvitationBatch.status == InvitationBatchStatus.queued,
                    or_(InvitationBatch.retry_at.is_(None), InvitationBatch.retry_at <= now),
                )
                .order_by(InvitationBatch.created_at, InvitationBatch.id)
            )
        )
    batches = len(turn)
    outcomes: Counter[str] = Counter()
    while turn:
        for batch_id in list(turn):
            if monotonic() - started >= budget_seconds:
                return _summary(batches, outcomes)
            try:
                outcome = invite_next(factory, outreach, batch_id, now=now)
            except Exception:
                # The address's transaction was lost (the database, or a defect): it is tried
                # again, a few times, rather than holding the batch (or the queue) for ever.
                logger.exception("bulk invite %s: an address's transaction failed", batch_id)
                outcome = _lost_try(factory, batch_id, now=now)
            if outcome is None or outcome == DEFERRED:
                turn.remove(batch_id)
            if outcome is not None:
                outcomes[outcome] += 1
    return _summary(batches, outcomes)


def _summary(batches: int, outcomes: Counter[str]) -> dict[str, Any]:
    addresses = sum(n for outcome, n in outcomes.items() if outcome != DEFERRED)
    return {"batches": batches, "addresses": addresses, **outcomes}


def invite_next(
    factory: sessionmaker[Session], outreach: Outreach, batch_id: uuid.UUID, *, now: datetime
) -> str | None:
    """Invite the batch's next address and record its outcome, in one transaction. DEFERRED
    when an outside part failed (the address is tried again later); None when the batch has
    nothing to do now (finished, or waiting for its retry)."""
    with factory() as session:
        batch = _locked(session, batch_id, now)
        if batch is None:
            return None
        email = batch.emails[len(batch.results)]
        try:
            result = _invite(session, outreach, batch, email, now=now)
        except DomainError as error:
            # The identity provider or the mail server failed: not the address's fault.
            result = _failed_try(batch, email, error.code, now=now)
        _record(batch, result, now=now)
        session.commit()
    return result["outcome"] if result else DEFERRED


def _locked(session: Session, batch_id: uuid.UUID, now: datetime) -> InvitationBatch | None:
    """The batch under its lock, if it has an address to invite now."""
    batch = session.scalar(
        select(InvitationBatch)
        .where(InvitationBatch.id == batch_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if batch is None or batch.status != InvitationBatchStatus.queued:
        return None
    if batch.retry_at is not None and batch.retry_at > now:
        return None
    if len(batch.results) >= len(batch.emails):  # an empty remainder: finish it
        batch.status, batch.finished_at = InvitationBatchStatus.finished, now
        session.commit()
        return None
    return batch


def _failed_try(
    batch: InvitationBatch, email: str, code: str, *, now: datetime
) -> dict[str, Any] | None:
    """Another failed try of the batch's next address: tried again after RETRY_AFTER, then,
    after MAX_TRIES, given that failure as its outcome (None while it waits)."""
    batch.failures += 1
    if batch.failures >= MAX_TRIES:
        return {"email": email, "outcome": code}
    batch.retry_at = now + RETRY_AFTER[batch.failures - 1]
    return None


def _record(batch: InvitationBatch, result: dict[str, Any] | None, *, now: datetime) -> None:
    if result is None:
        return
    batch.results = [*batch.results, result]
    batch.failures, batch.retry_at = 0, None
    if len(batch.results) >= len(batch.emails):
        batch.status, batch.finished_at = InvitationBatchStatus.finished, now


def _lost_try(factory: sessionmaker[Session], batch_id: uuid.UUID, *, now: datetime) -> str | None:
    """Counts a try whose transaction was lost, in a transaction of its own."""
    with factory() as session:
        batch = _locked(session, batch_id, now)
        if batch is None:
            return None
        email = batch.emails[len(batch.results)]
        result = _failed_try(batch, email, FAILED, now=now)
        _record(batch, result, now=now)
        session.commit()
    return result["outcome"] if result else DEFERRED


def _invite(
    session: Session, outreach: Outreach, batch: InvitationBatch, email: str, *, now: datetime
) -> dict[str, Any]:
    """The address's outcome; DomainError when an outside part failed (a status of 500 or
    more: the identity provider, the mail server), after which nothing of it is kept."""
    if is_erased_address(email):
        return {"email": email, "outcome": ERASED}  # the gym erased the person meanwhile
    if any(r["outcome"] == RATE_LIMITED for r in batch.results):
        return {"email": email, "outcome": RATE_LIMITED}
    organization = session.get(Organization, batch.organization_id)
    if (
        organization is None
        or organization.deleted_at is not None
        or organization.status is not OrganizationStatus.active
    ):
        return {"email": email, "outcome": codes.ORGANIZATION_NOT_FOUND}  # deleted, inactive
    asker = batch.actor_membership_id
    actor = session.get(Membership, asker) if asker else None
    try:
        if actor is None or not _still_staff(session, actor):
            raise forbidden(
                codes.PERMISSION_DENIED, "whoever asked for the bulk invite is no longer staff here"
            )
        enforce(batch.organization_id, actor.role, Module.invitations, Action.manage)
        with session.begin_nested():
            invitation = create_invitation(
                session,
                outreach,
                organization=organization,
                actor=actor,
                actor_user_id=actor.user_id,
                email=email,
                role=batch.role,
                now=now,
            )
    except DomainError as error:
        if error.status >= 500:
            raise
        return {"email": email, "outcome": error.code}
    except SQLAlchemyError:
        raise  # the database's trouble, not the address's: a lost try (work_batches)
    except Exception:
        # A defect met by this address alone must not hold the batch's others back for ever.
        logger.exception("bulk invite %s: inviting address %d failed", batch.id, len(batch.results))
        return {"email": email, "outcome": FAILED}
    return {"email": email, "outcome": INVITED, "id": str(invitation.id)}


def _still_staff(session: Session, actor: Membership) -> bool:
    """The asker's membership is active and their account not deleted (what the route's
    resolve_membership required of them when they asked)."""
    user = session.get(User, actor.user_id)
    return actor.status is MembershipStatus.active and user is not None and user.deleted_at is None
