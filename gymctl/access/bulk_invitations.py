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
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
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
    Role,
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
    """One pass: the queued batches, oldest first, an address at a time, until the budget is
    spent (the rest waits for the next tick)."""
    started = monotonic()
    with factory() as session:
        session.connection(execution_options=READ_ONLY)
        queued = list(
            session.scalars(
                select(InvitationBatch.id)
                .where(InvitationBatch.status == InvitationBatchStatus.queued)
                .order_by(InvitationBatch.created_at, InvitationBatch.id)
            )
        )
    outcomes: Counter[str] = Counter()
    for batch_id in queued:
        while monotonic() - started < budget_seconds:
            outcome = invite_next(factory, outreach, batch_id, now=now)
            if outcome is None:
                break
            outcomes[outcome] += 1
    return {"batches": len(queued), "addresses": sum(outcomes.values()), **outcomes}


def invite_next(
    factory: sessionmaker[Session], outreach: Outreach, batch_id: uuid.UUID, *, now: datetime
) -> str | None:
    """Invite the batch's next address and record its outcome, in one transaction; None when
    no address is left (the batch is finished)."""
    with factory() as session:
        batch = session.scalar(
            select(InvitationBatch)
            .where(InvitationBatch.id == batch_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        if batch is None or batch.status != InvitationBatchStatus.queued:
            return None
        done = len(batch.results)
        result = None
        if done < len(batch.emails):
            result = _invite(session, outreach, batch, batch.emails[done], now=now)
            batch.results = [*batch.results, result]
        if len(batch.results) >= len(batch.emails):
            batch.status, batch.finished_at = InvitationBatchStatus.finished, now
        session.commit()
    return result["outcome"] if result else None


def _invite(
    session: Session, outreach: Outreach, batch: InvitationBatch, email: str, *, now: datetime
) -> dict[str, Any]:
    if is_erased_address(email):
        return {"email": email, "outcome": ERASED}  # the gym erased the person meanwhile
    if any(r["outcome"] == RATE_LIMITED for r in batch.results):
        return {"email": email, "outcome": RATE_LIMITED}
    asker = batch.actor_membership_id
    actor = session.get(Membership, asker) if asker else None
    try:
        if actor is None or actor.status is not MembershipStatus.active:
            raise forbidden(
                codes.PERMISSION_DENIED, "whoever asked for the bulk invite is no longer staff here"
            )
        enforce(batch.organization_id, actor.role, Module.invitations, Action.manage)
        with session.begin_nested():
            invitation = create_invitation(
                session,
                outreach,
                organization=session.get(Organization, batch.organization_id),
                actor=actor,
                actor_user_id=actor.user_id,
                email=email,
                role=batch.role,
                now=now,
            )
    except DomainError as error:
        return {"email": email, "outcome": error.code}
    except SQLAlchemyError:
        raise  # the database's trouble, not the address's: the next pass tries it again
    except Exception:
        # A defect met by this address alone must not hold the batch's others back for ever.
        logger.exception("bulk invite %s: inviting address %d failed", batch.id, len(batch.results))
        return {"email": email, "outcome": FAILED}
    return {"email": email, "outcome": INVITED, "id": str(invitation.id)}
