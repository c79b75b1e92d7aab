"""What each op does at the external system, and how a retry stays idempotent there.

The external system has no idempotency keys. So a create that may already have happened (any
attempt after the first: a timeout, a 5xx after the write, a dispatcher that died mid-call)
looks for its entity first, a booking refused as it is first sent looks for the member's
registration there, and a cancel of something already gone (404) is done. Each
external effect goes to the entity map in the session at once, and is written with the
outcomes of its batch (see the dispatcher): an effect lost with its dispatcher belongs to an op
still in flight, whose next attempt searches before it sends.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from gymctl.bridge import classes, entity_map, queue
from gymctl.bridge.client import CallFailure, ExternalCallError, ExternalGymClient, external_id_of
from gymctl.bridge.connection import Disconnected, connected_calls
from gymctl.bridge.payloads import (
    BookingPayload,
    CoachPayload,
    MemberPayload,
    MembershipPayload,
    parse_payload,
)
from gymctl.bridge.polling import timezone_of, window
from gymctl.errors import DomainError
from gymctl.ids import new_id
from gymctl.models.bridge import (
    EntityLink,
    EntityType,
    IntegrationConnection,
    OpType,
    Origin,
    SyncOp,
)


class Park(Exception):
    """Retrying cannot help: the op goes to the issues inbox with this code."""

    def __init__(self, issue: str, message: str) -> None:
        self.issue = issue
        super().__init__(message)


class Retry(Exception):
    """Not possible yet (a class the poll has not mapped): back off on the ladder."""


class Defer(Exception):
    """Not possible before `until` (a class not yet in the poll window): wait, uncharged."""

    def __init__(self, until: datetime, message: str) -> None:
        self.until = until
        super().__init__(message)


class Erased(Exception):
    """The member of the op about to call was erased after its claim (mirror.member_erased
    scrubbed the stored op, `payload`): the worker's copy still names them, and never leaves."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload
        super().__init__(queue.ERASED)


ACTIVE_BRIDGE = "active_bridge_membership"  # cache key: a member's live bridge membership

_LINKS = EntityLink.__table__
_COLUMNS = (_LINKS.c.id, _LINKS.c.entity_type, _LINKS.c.platform_id, _LINKS.c.external_id,
            _LINKS.c.origin, _LINKS.c.metadata.label("data"))  # fmt: skip
# Built once: composing a statement costs more CPU than running it (measured).
_NAMED_LINKS = select(*_COLUMNS).where(
    _LINKS.c.organization_id == bindparam("organization_id"),
    _LINKS.c.entity_type.in_(bindparam("types", expanding=True)),
    _LINKS.c.platform_id.in_(bindparam("platform_ids", expanding=True)),
)
_LIVE_BRIDGE_MEMBERSHIPS = select(*_COLUMNS).where(
    _LINKS.c.organization_id == bindparam("organization_id"),
    _LINKS.c.entity_type == EntityType.membership,
    _LINKS.c.metadata["memberId"].as_string().in_(bindparam("members", expanding=True)),
    _LINKS.c.metadata["status"].as_string() == "active",
)
_UPDATE_LINK = update(_LINKS).where(_LINKS.c.id == bindparam("link_id"))
# The ops an erasure scrubs in flight (queue.erased): read again before each of their calls.
_PERSONAL = (OpType.user_create, OpType.user_update)


@dataclass
class Known:
    """A link as a batch knows it: read for the batch, or made by an earlier op of it."""

    id: uuid.UUID
    external_id: str
    origin: Origin
    data: dict[str, Any]

    @classmethod
    def of(cls, row: Any) -> Known:
        """From a row of _COLUMNS or an EntityLink."""
        return cls(row.id, row.external_id, Origin(row.origin), dict(row.data or {}))


@dataclass
class OpContext:
    """What an op runs with. Links are read for a whole claimed batch at once (the holder of
    the organization's lock is the only writer of its mirror links), and later ops of the batch
    see earlier ones' links here. The links ops make or change are held as rows and written by
    `write_links`, with the batch's outcomes. A read the batch did not foresee opens a
    transaction, which is committed before the next external call (`calling`, the client's
    `around_call`): never a transaction open across an HTTP call."""

    session: Session
    client: ExternalGymClient
    connection: IntegrationConnection
    now: Callable[[], datetime]
    key: str | None  # the credentials' ciphertext the client was opened from
    account: str | None  # the external account its answers come from (connection.on_account)
    links: dict[tuple[str, str], Known | None] = field(default_factory=dict)
    disconnected: bool = False
    sending: SyncOp | None = None  # the op whose calls go out now (the dispatcher's _run_op)
    inserts: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    updates: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)

    @property
    def organization_id(self) -> uuid.UUID:
        return self.connection.organization_id

    @contextmanager
    def calling(self) -> Iterator[None]:
        """Around each call (the client's `around_call`): connection.connected_calls, so no
        call leaves once a disconnect has committed (the batch's links merely held wait for
        its write). And a user op's stored payload, read with the connection: the batch's copy
        was claimed before the ops ahead of it ran, and an erasure committed since has
        scrubbed the stored one (Erased)."""
        op = self.sending
        personal = op if op is not None and op.op_type in _PERSONAL else None
        try:
            with connected_calls(
                self.session, self.connection, self.key, payload_of=personal and personal.id
            ) as stored:
                if (
                    personal is not None
                    and stored is not None
                    and queue.erased(personal.op_type, stored)
                ):
                    raise Erased(stored)
                yield
        except Disconnected:
            self.disconnected = True
            raise

    def prefetch(self, ops: list[SyncOp]) -> None:
        """Two reads for the batch: the links its ops name, and their members' live bridge
        memberships."""
        wanted: dict[EntityType, set[str]] = {}
        for op in ops:
            for field_name, entity_type in PAYLOAD_LINKS.items():
                if field_name in op.payload:
                    wanted.setdefault(entity_type, set()).add(str(op.payload[field_name]))
        self.links = {
            (entity_type.value, platform_id): None
            for entity_type, ids in wanted.items()
            for platform_id in ids
        }
        params = {"organization_id": self.organization_id}
        if wanted:
            named = {
                **params,
                "types": list(wanted),
                "platform_ids": list(set().union(*wanted.values())),
            }
            rows = self.session.execute(_NAMED_LINKS, named)
            for row in rows:
                key = (row.entity_type.value, row.platform_id)
                if key in self.links:  # the query's cross product may bring others
                    self.links[key] = Known.of(row)
        members = wanted.get(EntityType.member, set())
        for member in members:
            self.links[(ACTIVE_BRIDGE, member)] = None
        if members:
            for row in self.session.execute(
                _LIVE_BRIDGE_MEMBERSHIPS, {**params, "members": list(members)}
            ):
                known = self.links.get((EntityType.membership.value, row.platform_id))
                known = known or Known.of(row)
                self.links[(ACTIVE_BRIDGE, known.data["memberId"])] = known
        self.session.commit()

    def lookup(self, entity_type: EntityType | str, platform_id: Any) -> Known | None:
        key = (str(entity_type), str(platform_id))
        if key not in self.links:
            row = (
                entity_map.find(self.session, self.organization_id, EntityType(key[0]), key[1])
                if key[0] != ACTIVE_BRIDGE
                else None
            )
            self.links[key] = Known.of(row) if row is not None else None
        return self.links[key]

    def link(
        self,
        entity_type: EntityType,
        platform_id: Any,
        external_id: str,
        data: dict[str, Any],
        *,
        fresh: bool = False,
    ) -> None:
        """Record an external effect; written with the batch's outcomes. `fresh`: the external
        system just made this id, so no other link can hold it and the uniqueness checks are
        skipped; a status change of the known link needs none either."""
        current = self.lookup(entity_type, platform_id)
        now = self.now()
        if current is not None and (fresh or current.external_id == external_id):
            if current.external_id != external_id:
                current.external_id, current.origin = external_id, Origin.mirror
            current.data = {**current.data, **data}
            row = current
            changed = {"external_id": row.external_id, "origin": row.origin,
                       "metadata": row.data, "updated_at": now}  # fmt: skip
            if row.id in self.inserts:
                self.inserts[row.id].update(changed)
            else:
                self.updates[row.id] = {"link_id": row.id, **changed}
        elif fresh:
            row = Known(new_id(), external_id, Origin.mirror, dict(data))
            self.inserts[row.id] = {
                "id": row.id, "organization_id": self.organization_id,
                "entity_type": entity_type, "platform_id": str(platform_id),
                "external_id": external_id, "origin": row.origin, "metadata": row.data,
                "created_at": now, "updated_at": now,
            }  # fmt: skip
        else:
            self.write_links()  # the uniqueness checks must see what the batch linked
            try:
                row = Known.of(
                    entity_map.link(
                        self.session,
                        self.organization_id,
                        entity_type,
                        platform_id=platform_id,
                        external_id=external_id,
                        origin=Origin.mirror,
                        now=now,
                        data=data,
                    )
                )
            except DomainError as error:  # refused before anything was written
                if error.code == "bridge_link_conflict":
                    raise Park("identity_conflict", error.message) from None
                raise
        self.links[(entity_type.value, str(platform_id))] = row
        if entity_type is EntityType.membership and "memberId" in row.data:
            live = row.data.get("status") == "active"
            current = self.links.get((ACTIVE_BRIDGE, row.data["memberId"]))
            if live or current is row:
                self.links[(ACTIVE_BRIDGE, row.data["memberId"])] = row if live else None

    def write_links(self) -> None:
        """The links held, in the session's transaction: one executemany for the new ones, one
        for the changed ones."""
        if self.inserts:
            self.session.execute(insert(_LINKS), list(self.inserts.values()))
        if self.updates:
            self.session.execute(_UPDATE_LINK, list(self.updates.values()))
        self.forget_writes()

    def forget_writes(self) -> None:
        """After a rollback: the ops that made these links are rescued (they search first)."""
        self.inserts.clear()
        self.updates.clear()

    def nudge_reconcile(self) -> None:
        """Spec B 8: a booking reconcile after each booking change."""
        self.connection.reconcile_due_at = self.now()


PAYLOAD_LINKS = {
    "memberId": EntityType.member,
    "subscriptionId": EntityType.membership,
    "bookingId": EntityType.booking,
    "sessionId": EntityType.schedule,
    "coachId": EntityType.staff,
}


def _member(ctx: OpContext, member_id: uuid.UUID) -> Known:
    row = ctx.lookup(EntityType.member, member_id)
    if row is None:
        raise Park("member_unmapped", "the member has no external user (its create was not sent)")
    return row


def identify(ctx: OpContext, payload: MemberPayload) -> str | None:
    """Spec B 8: email first, then phone; exactly one native hit links, several park."""
    for kind in ("email", "phone"):
        value = getattr(payload, kind)
        if not value:
            continue
        native = [hit for hit in ctx.client.search_user(**{kind: value}) if hit.native]
        if len(native) > 1:
            listed = ", ".join(hit.external_id for hit in native[:10])
            raise Park(
                "identity_conflict",
                f"{len(native)} external users match the {kind}; candidates: {listed}",
            )
        if native:
            return native[0].external_id
    return None


def user_create(ctx: OpContext, op: SyncOp, payload: MemberPayload) -> str:
    if ctx.lookup(EntityType.member, payload.member_id) is not None:
        return "already_linked"
    if op.attempts > 1 and not (payload.email or payload.phone):
        raise Park(
            "identity_unsearchable",
            "an earlier attempt may have created the user, and with no email or phone there is "
            "nothing to search by: an operator checks, then retries or dismisses",
        )
    found = identify(ctx, payload)
    if found is not None:
        ctx.link(EntityType.member, payload.member_id, found, {"via": "search"})
        return "linked"
    created = ctx.client.create_user(payload.fields())
    ctx.link(EntityType.member, payload.member_id, created, {"via": "create"}, fresh=True)
    return "created"


def user_update(ctx: OpContext, op: SyncOp, payload: MemberPayload) -> str:
    if payload.active is False:
        user = ctx.lookup(EntityType.member, payload.member_id)
        found = identify(ctx, payload) if user is None and payload.email else None
        if found is not None:  # an erased member's create withdrawn after it may have gone
            ctx.link(EntityType.member, payload.member_id, found, {"via": "search"})
            user = ctx.lookup(EntityType.member, payload.member_id)
        if user is None:  # its create was withdrawn or given up: nothing there to deactivate
            return "not_mirrored"
        return _deactivate(ctx, payload, user)
    user = _member(ctx, payload.member_id)
    ctx.client.update_user(user.external_id, payload.fields())
    if payload.active and user.data.get("status") == "deactivated":
        ctx.link(EntityType.member, payload.member_id, user.external_id, {"status": "active"})
        return "reactivated"
    return "updated"


def _deactivate(ctx: OpContext, payload: MemberPayload, user: Known) -> str:
    """The external user of a member whose membership ended (mirror.member_retired) is
    deactivated, once the plans and seats its member held were given up there (earlier ops of
    its aggregate). Not while memberships still live on it: the gym's own (priced ones the
    bridge never writes) would be cut off; the owner ends them there (or, after a fold, merges
    the person's two users there), then retries or dismisses. The link stays, marked: a member
    who comes back is made active again on it."""
    live = [held for held in ctx.client.user_memberships(user.external_id) if held.get("active")]
    if live:
        raise Park(
            "external_user_in_use",
            f"the ended member's external user still holds {len(live)} live membership(s) "
            "there: end them there (after a fold: merge it with the kept member's user), "
            "then retry or dismiss",
        )
    ctx.client.update_user(user.external_id, payload.fields())
    ctx.link(EntityType.member, payload.member_id, user.external_id, {"status": "deactivated"})
    return "deactivated"


def _assign(ctx: OpContext, op: SyncOp, payload: MembershipPayload, *, retried: bool) -> str:
    user = _member(ctx, payload.member_id)
    type_id = ctx.connection.bridge_membership_type_id
    if type_id is None:
        raise Park("membership_type_missing", "the connection names no bridge membership type")
    data = {
        "memberId": str(payload.member_id),
        "status": "active",
        "startDate": payload.start_date.isoformat(),
        "endDate": payload.end_date.isoformat() if payload.end_date else None,
    }
    if retried:
        ctx.write_links()  # the owner check below must see what the batch linked
        for held in ctx.client.user_memberships(user.external_id):
            external = external_id_of("GET /users/memberships", held)
            if str(held.get("membership_type_id")) != type_id or not held.get("active"):
                continue
            owner = entity_map.find_external(
                ctx.session, ctx.organization_id, EntityType.membership, external
            )
            if owner is not None:
                if owner.platform_id == str(payload.subscription_id):
                    ctx.link(EntityType.membership, payload.subscription_id, external, data)
                    return "found"
                continue  # another subscription's
            # Unlinked: ours only if it is what an earlier attempt of this op sent (its link
            # was lost with that attempt); one the gym's desk made there is never taken over.
            if (held.get("start_date"), held.get("end_date")) == (data["startDate"],
                                                                  data["endDate"]):  # fmt: skip
                ctx.link(EntityType.membership, payload.subscription_id, external, data)
                return "found"
    created = ctx.client.assign_membership(
        user.external_id, type_id, payload.start_date, payload.end_date
    )
    ctx.link(EntityType.membership, payload.subscription_id, created, data, fresh=True)
    return "assigned"


def _others(current: Known, member_id: uuid.UUID) -> bool:
    """The link stands at another member's external user: a fold moved its platform row to
    the member this op is about (access.folding; mirror.holdings_moved)."""
    return current.data.get("memberId", str(member_id)) != str(member_id)


def membership_assign(ctx: OpContext, op: SyncOp, payload: MembershipPayload) -> str:
    current = ctx.lookup(EntityType.membership, payload.subscription_id)
    if current is not None and current.data.get("status") == "active":
        if not _others(current, payload.member_id):
            return "already_assigned"
        _end(ctx, payload, "cancelled", anyone=True)  # left at the folded member's user
    return _assign(ctx, op, payload, retried=op.attempts > 1)


def _end(ctx: OpContext, payload: MembershipPayload, status: str, *, anyone: bool = False) -> bool:
    """Cancel the subscription's bridge membership if it is live at this member's user (or at
    `anyone`'s); False if none was."""
    current = ctx.lookup(EntityType.membership, payload.subscription_id)
    if current is None or current.data.get("status") != "active":
        return False
    if not anyone and _others(current, payload.member_id):
        return False  # moved to the member a fold kept, whose ops follow it
    try:
        ctx.client.cancel_membership(current.external_id)
    except ExternalCallError as error:
        if error.kind != CallFailure.not_found:
            raise
    ctx.link(
        EntityType.membership, payload.subscription_id, current.external_id, {"status": status}
    )
    return True


def membership_cancel(ctx: OpContext, op: SyncOp, payload: MembershipPayload) -> str:
    return "cancelled" if _end(ctx, payload, "cancelled") else "nothing_to_cancel"


def membership_hold(ctx: OpContext, op: SyncOp, payload: MembershipPayload) -> str:
    """A frozen subscription: the free membership ends (no booking there while frozen); the
    resume assigns a fresh one. The public API has no hold call."""
    return "held" if _end(ctx, payload, "held") else "nothing_to_hold"


def membership_update(ctx: OpContext, op: SyncOp, payload: MembershipPayload) -> str:
    """New dates: the non-recurring membership is re-issued (cancel, then assign). Only a
    membership the entity map says is ours and live is re-issued: after a cancel or a hold
    there is nothing to update (the next assign carries the dates)."""
    current = ctx.lookup(EntityType.membership, payload.subscription_id)
    status = current.data.get("status") if current is not None else None
    if (
        status == "active"
        and current.data.get("startDate") == payload.start_date.isoformat()
        and (
            current.data.get("endDate")
            == (payload.end_date.isoformat() if payload.end_date else None)
        )
    ):
        return "already_updated"
    if status not in ("active", "replaced") or _others(current, payload.member_id):
        return "not_live"
    _end(ctx, payload, "replaced")
    return _assign(ctx, op, payload, retried=op.attempts > 1 or status == "replaced")


def _schedule(ctx: OpContext, session_id: uuid.UUID) -> Known:
    """The session's external class: linked, or matched now (see classes); never hours of
    retries for a class no one can match."""
    row = ctx.lookup(EntityType.schedule, session_id)
    if row is not None:
        return row
    found = classes.match(ctx.session, ctx.connection, session_id, now=ctx.now())
    if found.found is not None:
        ctx.link(EntityType.schedule, session_id, found.found.external_id, {})
        return ctx.lookup(EntityType.schedule, session_id)
    if found.reason == "beyond_window":
        raise Defer(found.wait_until, "the class is not in the poll window yet")
    if found.reason == "not_polled":
        ctx.connection.schedule_poll_due_at = ctx.now()
        raise Defer(ctx.now() + timedelta(minutes=1), "waiting for a schedule poll")
    if found.reason == "no_session":
        raise Park("session_missing", "the class session no longer exists")
    listed = ", ".join(found.candidates[:10]) or "none"
    raise Park(
        classes.UNMATCHED,
        f"no single external class matches ({found.reason}); candidates: {listed}",
    )


def _registration(ctx: OpContext, schedule: Known, user_id: str) -> str | None:
    """The member's registration in the external class, if there is one (the class's day when
    the poll recorded it, else the whole poll window)."""
    if "date" in schedule.data:
        first = last = date.fromisoformat(schedule.data["date"])
    else:
        first, last = window(ctx.now(), timezone_of(ctx.session, ctx.organization_id))
    for item in ctx.client.schedule(first, last):
        if str(item["id"]) != schedule.external_id:
            continue
        for registration in item.get("registrations", []):
            if str(registration.get("user_id")) == user_id:
                return external_id_of("GET /schedule", registration)
    return None


def booking_create(ctx: OpContext, op: SyncOp, payload: BookingPayload) -> str:
    """A retry looks for the member's registration before it books. So does a refused first
    attempt: the member may be registered there already (booked there directly, or by an
    earlier op whose answer was lost), which the external system refuses as a second booking;
    that registration is linked, not parked. The refusal's reason is never read (its body may
    echo personal data), so any 4xx asks; one with no registration behind it still parks.

    A seat left at a class the session no longer books into (classes.link_class) moves by
    booking the new class first: the old registration is cancelled only once the new one
    stands, so a refused booking (a full class) parks with the member still registered there,
    not nowhere. Its link names the old registration until then: a retry finds the new one
    and cancels the old."""
    current = ctx.lookup(EntityType.booking, payload.booking_id)
    left: Known | None = None  # the registration a relinked seat moves from
    if current is not None and current.data.get("status") == "booked":
        if _others(current, payload.member_id):
            # Left at the folded member's user: cancelled first, its seat in this very class
            # may be the one the kept member needs.
            _cancel_registration(ctx, payload, current)
        elif _class_moved(ctx, current, payload):
            left = current
        else:
            return "already_booked"  # a cancelled link is a booking revived: booked again
    user = _member(ctx, payload.member_id)
    bridge = ctx.lookup(ACTIVE_BRIDGE, payload.member_id)
    if bridge is None:
        raise Park("membership_unmapped", "the member holds no bridge membership")
    schedule = _schedule(ctx, payload.session_id)
    data = {
        "memberId": str(payload.member_id),
        "scheduleId": schedule.external_id,
        "status": "booked",
    }
    if op.attempts > 1:
        found = _registration(ctx, schedule, user.external_id)
        if found is not None:
            _leave(ctx, left)
            ctx.link(EntityType.booking, payload.booking_id, found, data)
            return "found"
    try:
        booked = ctx.client.book_session(user.external_id, schedule.external_id, bridge.external_id)
    except ExternalCallError as error:
        if error.kind != CallFailure.rejected:
            raise
        found = _registration(ctx, schedule, user.external_id)
        if found is None:
            raise
        _leave(ctx, left)
        ctx.link(EntityType.booking, payload.booking_id, found, data)
        return "already_registered"
    _leave(ctx, left)
    ctx.link(EntityType.booking, payload.booking_id, booked, data, fresh=True)
    ctx.nudge_reconcile()
    return "booked"


def _leave(ctx: OpContext, left: Known | None) -> None:
    """Cancel the registration a relinked seat moved from, once its new one stands (see
    booking_create). Its link is then moved to the new registration by the caller."""
    if left is not None:
        _cancel_at_external(ctx, left.external_id)
        ctx.nudge_reconcile()


def _class_moved(ctx: OpContext, current: Known, payload: BookingPayload) -> bool:
    """The registration stands at an external class the session no longer books into: the
    owner linked the session to another one (classes.link_class)."""
    schedule = ctx.lookup(EntityType.schedule, payload.session_id)
    booked_at = current.data.get("scheduleId")
    return schedule is not None and booked_at is not None and booked_at != schedule.external_id


def booking_cancel(ctx: OpContext, op: SyncOp, payload: BookingPayload) -> str:
    current = ctx.lookup(EntityType.booking, payload.booking_id)
    if current is None or current.data.get("status") != "booked":
        return "nothing_to_cancel"
    if _others(current, payload.member_id):
        return "nothing_to_cancel"  # moved to the member a fold kept, whose ops follow it
    _cancel_registration(ctx, payload, current)
    return "cancelled"


def _cancel_at_external(ctx: OpContext, registration_id: str) -> None:
    """Cancel a registration there; one already gone (404) is done."""
    try:
        ctx.client.cancel_booking(registration_id)
    except ExternalCallError as error:
        if error.kind != CallFailure.not_found:
            raise


def _cancel_registration(ctx: OpContext, payload: BookingPayload, current: Known) -> None:
    _cancel_at_external(ctx, current.external_id)
    ctx.link(EntityType.booking, payload.booking_id, current.external_id, {"status": "cancelled"})
    ctx.nudge_reconcile()


def schedule_coach(ctx: OpContext, op: SyncOp, payload: CoachPayload) -> str:
    schedule = _schedule(ctx, payload.session_id)
    coach = ctx.lookup(EntityType.staff, payload.coach_id)
    if coach is None:
        raise Park("staff_unmapped", "the coach is not linked to an external staff member")
    ctx.client.change_coach(schedule.external_id, coach.external_id)
    return "coach_changed"


HANDLERS: dict[OpType, Callable[[OpContext, SyncOp, Any], str]] = {
    OpType.user_create: user_create,
    OpType.user_update: user_update,
    OpType.membership_assign: membership_assign,
    OpType.membership_update: membership_update,
    OpType.membership_cancel: membership_cancel,
    OpType.membership_hold: membership_hold,
    OpType.booking_create: booking_create,
    OpType.booking_cancel: booking_cancel,
    OpType.schedule_coach: schedule_coach,
}


def perform(ctx: OpContext, op: SyncOp) -> str:
    """Run one op; raises Park, Retry or ExternalCallError when it did not go through."""
    payload = parse_payload(op.op_type, op.payload)
    return HANDLERS[op.op_type](ctx, op, payload)
