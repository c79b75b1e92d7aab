"""Bulk invites: the request queues the addresses, the daemons invite them one at a time.

Answered in the request, a bulk invite of 500 addresses (an identity-provider lookup, often a
provider invitation, and an email each) ran past gunicorn's 30 s; it held the invitations
counter's lock (on the embedded default, the database's one write lock) from its first
provider invitation to its end, and a worker killed at 30 s rolled back invitations whose emails
had gone out, so their links led nowhere. Queued, the request takes milliseconds and locks
nothing of anyone else's; the `invitation_batches` daemon job invites each address with the
same steps as a single invite (gymctl.access.invitations: checks, the provider asked with no
write lock held, the invitation stored, its email sent after its commit), the invitation stored
in a transaction that also records the address's outcome, so an outcome is stored exactly when
its invitation is; a refused email withdraws both.

Each address is invited with the rights its asker has when its turn comes: staff removed or
demoted meanwhile invite no one more (permission_denied); a person the gym erased meanwhile is
not invited (erased). After the first rate_limited answer
(the identity provider's 429, or our own per-instance window) every remaining address reports
rate_limited and the provider is not called again (spec A 7).

Each address's email counts against the address's budget in the gym, as a single invite's and
a resend's do (invitations.count_email): a revoke and a bulk invite again mailed past it. It is
counted with the invitation it mails, under the batch's lock (a count committed before the
provider call would free that lock, and on the embedded default a count written before it would
hold the write lock through it); an address over its budget reports address_rate_limited (with
retryAfter), nothing of it stored, and the batch's other addresses go on.
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
from gymctl.access import codes, staff_queue
from gymctl.access.erased import is_erased_address
from gymctl.access.grants import require_grant
from gymctl.access.invitations import (
    Outreach,
    ask_provider,
    check_new,
    count_email,
    deliver,
    normalize_email,
    store_new,
    withdraw,
)
from gymctl.access.permissions import Action, Module
from gymctl.db import advisory_lock, organization_row
from gymctl.errors import DomainError, not_found, too_many_requests
from gymctl.models import (
    InvitationBatch,
    InvitationBatchStatus,
    Membership,
    Organization,
    Role,
)
from gymctl.providers.identity_admin import RATE_LIMITED
from gymctl.providers.mail import MailError

logger = logging.getLogger(__name__)

MAX_ADDRESSES = 500
UNFINISHED_PER_ORGANIZATION = 3  # queued batches of one gym: a fourth waits for one to finish
INVITED = "invited"
FAILED = "failed"
ERASED = "erased"
# The address's own email budget in the gym is spent (invitations.count_email): this address
# waits, the others go on. Not rate_limited, which stops every later address (spec A 7).
ADDRESS_RATE_LIMITED = "address_rate_limited"
DEFERRED = staff_queue.DEFERRED


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
    budget_seconds: float = staff_queue.PASS_BUDGET_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """One pass: the batches due take turns, an address each (gymctl.access.staff_queue)."""
    done = staff_queue.run_pass(
        factory,
        InvitationBatch,
        lambda batch_id: invite_next(factory, outreach, batch_id, now=now),
        lambda batch_id: _lost_try(factory, batch_id, now=now),
        now=now,
        budget_seconds=budget_seconds,
        monotonic=monotonic,
    )
    addresses = sum(n for outcome, n in done.done.items() if outcome != DEFERRED)
    return done.summary("batches", addresses=addresses)


def invite_next(
    factory: sessionmaker[Session], outreach: Outreach, batch_id: uuid.UUID, *, now: datetime
) -> Counter[str] | None:
    """Invite the batch's next address (a step of gymctl.access.staff_queue): its checks, the
    identity provider asked with no write lock held, then the invitation and the address's
    outcome stored in one transaction, then its email, whose refusal withdraws both."""
    with factory() as session:
        batch = _locked(session, batch_id, now)
        if batch is None:
            return None
        position = len(batch.results)
        email = batch.emails[position]
        failures = batch.failures
        try:
            result, failure = _invite(session, outreach, batch, email, now=now), None
        except DomainError as error:
            # The identity provider failed: not the address's fault.
            result, failure = None, error.code
        batch = _same_step(session, batch_id, position, email)
        if batch is None:
            session.rollback()  # another worker, or an erasure, moved the batch meanwhile
            return Counter()
        if failure is not None:
            result = _failed_try(batch, email, failure, now=now)
        _record(batch, result, now=now)
        session.commit()
        if result is None or result["outcome"] != INVITED:
            return Counter([result["outcome"] if result else DEFERRED])
        return _mail(session, outreach, batch_id, result, failures, now=now)


def _same_step(
    session: Session, batch_id: uuid.UUID, position: int, email: str
) -> InvitationBatch | None:
    """The batch under its lock again after the outside calls, if its next address is still
    the one just invited (on the embedded default no lock was held meanwhile)."""
    batch = _lock_batch(session, batch_id)
    if batch is None or batch.status != InvitationBatchStatus.queued:
        return None
    if len(batch.results) != position or batch.emails[position] != email:
        return None
    return batch


def _mail(
    session: Session,
    outreach: Outreach,
    batch_id: uuid.UUID,
    result: dict[str, Any],
    failures: int,
    *,
    now: datetime,
) -> Counter[str]:
    """The stored invitation's email, sent after its commit. A refusal withdraws the invitation
    and its outcome: the address is tried again later, as before (its try counted)."""
    invitation_id = uuid.UUID(result["id"])
    try:
        deliver(session, outreach, invitation_id, now=now, erased=is_erased_address)
    except MailError:
        # The batch before the invitation, in erasure's order (batches, then invitations).
        _lock_batch(session, batch_id)
        withdraw(session, invitation_id)
        outcome = _unrecord(session, batch_id, result, failures, now=now)
        session.commit()
        return Counter([outcome])
    except Exception:
        # Stored and its outcome recorded: a resend sends it (the list shows sendCount 0).
        logger.exception(
            "bulk invite %s: the email of invitation %s failed", batch_id, result["id"]
        )
        return Counter([INVITED])
    session.commit()
    return Counter([INVITED])


def _unrecord(
    session: Session,
    batch_id: uuid.UUID,
    result: dict[str, Any],
    failures: int,
    *,
    now: datetime,
) -> str:
    """The address's invited outcome taken back after its email was refused: a failed try of
    the step when it is still the batch's last one, else (the batch went on meanwhile) the
    failure in its place."""
    batch = _lock_batch(session, batch_id)
    results = list(batch.results) if batch is not None else []
    mine = next((i for i, r in enumerate(results) if r.get("id") == result["id"]), None)
    if mine is None:
        return codes.MAIL_FAILED  # the batch is gone (forgotten)
    email = results[mine]["email"]
    if mine < len(results) - 1:
        results[mine] = {"email": email, "outcome": codes.MAIL_FAILED}
        batch.results = results
        return codes.MAIL_FAILED
    batch.results = results[:mine]
    batch.status, batch.finished_at, batch.failures = InvitationBatchStatus.queued, None, failures
    failed = _failed_try(batch, email, codes.MAIL_FAILED, now=now)
    _record(batch, failed, now=now)
    return failed["outcome"] if failed else DEFERRED


def _locked(session: Session, batch_id: uuid.UUID, now: datetime) -> InvitationBatch | None:
    """The batch under its lock, if it has an address to invite now."""
    batch = _lock_batch(session, batch_id)
    if batch is None or batch.status != InvitationBatchStatus.queued:
        return None
    if batch.retry_at is not None and batch.retry_at > now:
        return None
    if len(batch.results) >= len(batch.emails):  # an empty remainder: finish it
        batch.status, batch.finished_at = InvitationBatchStatus.finished, now
        session.commit()
        return None
    return batch


def _lock_batch(session: Session, batch_id: uuid.UUID) -> InvitationBatch | None:
    """The batch under its row lock, read afresh: every step's lock, taken before the rows it
    writes (erasure's order: batches, memberships, invitations)."""
    return session.scalar(
        select(InvitationBatch)
        .where(InvitationBatch.id == batch_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def _failed_try(
    batch: InvitationBatch, email: str, code: str, *, now: datetime
) -> dict[str, Any] | None:
    """The failure as the address's outcome after its last try; None while it waits."""
    return {"email": email, "outcome": code} if staff_queue.failed_try(batch, now=now) else None


def _record(batch: InvitationBatch, result: dict[str, Any] | None, *, now: datetime) -> None:
    if result is None:
        return
    batch.results = [*batch.results, result]
    staff_queue.stepped(batch)
    if len(batch.results) >= len(batch.emails):
        batch.status, batch.finished_at = InvitationBatchStatus.finished, now


def _lost_try(
    factory: sessionmaker[Session], batch_id: uuid.UUID, *, now: datetime
) -> Counter[str] | None:
    """Counts a try whose transaction was lost, in a transaction of its own."""
    with factory() as session:
        batch = _locked(session, batch_id, now)
        if batch is None:
            return None
        email = batch.emails[len(batch.results)]
        result = _failed_try(batch, email, FAILED, now=now)
        _record(batch, result, now=now)
        session.commit()
    return Counter([result["outcome"] if result else DEFERRED])


def _invite(
    session: Session, outreach: Outreach, batch: InvitationBatch, email: str, *, now: datetime
) -> dict[str, Any]:
    """The address's outcome, its invitation stored and its email counted (not committed, not
    sent); DomainError when the identity provider failed (a status of 500 or more), after which
    nothing of it is kept."""
    if is_erased_address(email):
        return {"email": email, "outcome": ERASED}  # the gym erased the person meanwhile
    if any(r["outcome"] == RATE_LIMITED for r in batch.results):
        return {"email": email, "outcome": RATE_LIMITED}
    # Read before the provider is asked: the batch's rows expire when the transaction ends.
    batch_id, org_id, asker_id = batch.id, batch.organization_id, batch.actor_membership_id
    role = batch.role
    try:
        _organization, actor = _asker(session, org_id, asker_id)
        address = normalize_email(email)
        check_new(session, organization_id=org_id, actor=actor, email=address, role=role)
        asked = ask_provider(session, outreach, address, now=now)
        session.expire_all()  # read again, as they are now: the asker's rights too
        # The batch is locked first again, before the rows this address writes (its login,
        # its invitation), in erasure's order: written first, a login the erasure then wrote
        # waited on the worker while the worker waited on the batch (a deadlock).
        _lock_batch(session, batch_id)
        try:
            with session.begin_nested():
                _organization, actor = _asker(session, org_id, asker_id)
                invitation = store_new(
                    session,
                    asked,
                    organization_id=org_id,
                    actor=actor,
                    actor_user_id=actor.user_id,
                    email=address,
                    role=role,
                    now=now,
                )
                count_email(session, org_id, address, now=now)
        except DomainError as error:
            if error.code != RATE_LIMITED:
                raise
            # The address's own budget, not the provider's 429: the others go on.
            return {"email": email, "outcome": ADDRESS_RATE_LIMITED, **error.details}
    except DomainError as error:
        if error.status >= 500:
            raise
        return {"email": email, "outcome": error.code}
    except SQLAlchemyError:
        raise  # the database's trouble, not the address's: a lost try (staff_queue)
    except Exception:
        # A defect met by this address alone must not hold the batch's others back for ever.
        logger.exception("bulk invite %s: inviting an address failed", batch_id)
        return {"email": email, "outcome": FAILED}
    return {"email": email, "outcome": INVITED, "id": str(invitation.id)}


def _asker(
    session: Session, org_id: uuid.UUID, asker_id: uuid.UUID | None
) -> tuple[Organization, Membership]:
    return staff_queue.check_asker(session, org_id, asker_id, Module.invitations, Action.manage)
