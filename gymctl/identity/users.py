"""Local user rows mirrored from the identity provider (spec A 2.1, 6.1)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, TypeAdapter, ValidationError
from sqlalchemy import delete, func, literal, select
from sqlalchemy.orm import Session

from gymctl.bridge import mirror
from gymctl.config import Settings
from gymctl.db import release_for_outside_call, storable_text
from gymctl.errors import DomainError, invalid
from gymctl.events import EventKind, emit
from gymctl.identity import codes
from gymctl.identity.auth import user_by_identity
from gymctl.identity.signup import read_sign_up, record_sign_up
from gymctl.models import IdentityWebhookDelivery, User
from gymctl.models.identity import same_address
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.providers.identity_admin import IdentityAdmin, IdentityAdminError

log = logging.getLogger("gymctl.identity")

KEYS_PER_STATEMENT = 500


def address_keys(session: Session, addresses: Iterable[str]) -> dict[str, str]:
    """Each address (surrounding whitespace aside) as `same_address` folds it, asked of the
    database (500 a statement): two addresses are one exactly when their keys are equal, in
    Python as in every lookup. str.lower() folds otherwise than either engine's lower() ('İ'
    becomes 'i' and a combining dot; SQLite folds ASCII alone), so erasure, a roster's
    duplicates and a changed address each disagreed with sign-up (decisions s48)."""
    given = sorted(set(addresses))
    keys: dict[str, str] = {}
    for start in range(0, len(given), KEYS_PER_STATEMENT):
        chunk = given[start : start + KEYS_PER_STATEMENT]
        folded = session.execute(select(*(func.lower(literal(a.strip())) for a in chunk))).one()
        keys.update(zip(chunk, folded, strict=True))
    return keys


def is_same_address(session: Session, one: str, other: str) -> bool:
    """`one` and `other` are one address by `address_keys`' rule."""
    keys = address_keys(session, (one, other))
    return keys[one] == keys[other]


MAX_SYNCED_AT = 2**63 - 1  # users.identity_synced_at is a BIGINT


def updated_at_of(data: dict[str, Any]) -> int | None:
    """The provider's updated_at (milliseconds) of this user object: what orders snapshots.
    Absent or null reads as unknown (applied as sent); any other non-integer is refused, as a
    malformed field is, rather than trusted for ordering."""
    value = data.get("updated_at")
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_SYNCED_AT:
        raise invalid(codes.WEBHOOK_PAYLOAD_INVALID, "the user's updated_at is not milliseconds")
    return value


def find_or_create(
    session: Session,
    identity_id: str,
    *,
    now: datetime,
    email: str | None = None,
    image_url: str | None = None,
    link_email: bool = False,
) -> tuple[User, bool]:
    """The row of a login, creating it when missing; (user, created).

    With `link_email` (the provider says the address is verified) an unlinked gym-created row
    under that address is linked instead of creating a second person. An unproven address never
    links (spec A 5.3). Concurrent callers for one login end with one row: the unique
    identity_id decides, and the loser reads the winner's row.
    """
    existing = user_by_identity(session, identity_id)
    if existing is not None:
        return existing, False
    if link_email and email:
        unlinked = session.scalar(
            select(User)
            .where(same_address(User.email, email), User.identity_id.is_(None))
            .where(User.deleted_at.is_(None))
            .order_by(User.created_at)
            .limit(1)
        )
        if unlinked is not None:

            def link() -> None:
                unlinked.identity_id = identity_id
                unlinked.image_url = image_url or unlinked.image_url
                unlinked.updated_at = now

            return _claim(session, identity_id, link, unlinked, created=False)
    user = User(
        identity_id=identity_id, email=email, image_url=image_url, created_at=now, updated_at=now
    )
    return _claim(session, identity_id, lambda: session.add(user), user, created=True)


def _claim(
    session: Session, identity_id: str, write: Callable[[], None], row: User, *, created: bool
) -> tuple[User, bool]:
    """`write` gives the login to `row` in a savepoint: a concurrent caller that gave it to
    its own row first (the webhook and the login's first request) wins, and its row is read.
    A link lost that race answered the webhook 500."""
    try:
        with unique_violation("uq_users_identity_id"), session.begin_nested():
            write()
    except UniqueViolation:
        winner = user_by_identity(session, identity_id)
        if winner is None:
            raise
        return winner, False
    return row, created


def _storable(text: str) -> str:
    if not storable_text(text):
        raise ValueError("text PostgreSQL cannot store (NUL or a lone surrogate)")
    return text


Text = Annotated[str, AfterValidator(_storable)]
ImageUrl = Annotated[Text, Field(max_length=2048)]
_IMAGE_URL = TypeAdapter(ImageUrl | None)


class _Verification(BaseModel):
    status: Text | None = Field(None, max_length=64)


class _Address(BaseModel):
    id: Text | None = Field(None, max_length=128)
    email_address: Text | None = Field(None, max_length=320)
    verification: _Verification | None = None


class ProviderUser(BaseModel):
    """The fields of the provider's user object that we keep, typed and sized to their columns:
    an event with an integer email or an object image_url is refused (400), never a 500."""

    id: Text = Field(min_length=1, max_length=128)
    email_addresses: list[_Address] = Field(default_factory=list, max_length=100)
    primary_email_address_id: Text | None = Field(None, max_length=128)
    image_url: ImageUrl | None = None


def first_request(
    session: Session,
    identity_id: str,
    *,
    identity_admin: IdentityAdmin,
    settings: Settings,
    now: datetime,
) -> User:
    """GET /users/me's find-or-create before user.created arrived: the row takes the address
    (and the sign-up's origin) from the provider, so the ownership check can fire at once.

    Fallback: when the provider cannot answer (down, rate-limited here or there, unknown user)
    the row starts from the token alone, without an address; nothing can be linked or claimed
    through it until the webhook brings the address (logged, never the address itself).
    """
    existing = user_by_identity(session, identity_id)
    if existing is not None:
        return existing
    # Only read so far: no write lock while the provider answers (on the embedded default the
    # read began SQLite's one write transaction, held through the provider's round trip).
    release_for_outside_call(session)
    try:
        data = identity_admin.user_record(identity_id)
    except IdentityAdminError as error:
        log.warning(
            "find-or-create without the provider's user (%s): row waits for the webhook", error.code
        )
        data = None
    if data is None:
        return find_or_create(session, identity_id, now=now)[0]
    sign_up = read_sign_up(settings, data, now=now)
    # No linking here: the next step of /users/me settles ownership with the proven address.
    user, created = find_or_create(
        session, identity_id, now=now, email=sign_up.email, image_url=_image_url(data)
    )
    if created:
        record_sign_up(user, sign_up, now=now)
        # The webhooks' order (s48): an older user object delivered after this one writes
        # nothing. A malformed updated_at orders nothing (the webhook refuses it; this is a read).
        with contextlib.suppress(DomainError):
            user.identity_synced_at = updated_at_of(data)
    return user


def _image_url(data: dict[str, Any]) -> str | None:
    """The provider read's image_url by the webhook's rule (ProviderUser); unlike a webhook's
    malformed one (400), one of the wrong type or size reads as absent: /users/me goes on."""
    try:
        return _IMAGE_URL.validate_python(data.get("image_url"))
    except ValidationError:
        return None


def _subject(data: dict[str, Any]) -> str:
    subject = data.get("id")
    if not isinstance(subject, str) or not subject:
        raise invalid(codes.WEBHOOK_PAYLOAD_INVALID, "the event has no user id")
    return subject


def user_created(
    session: Session, data: dict[str, Any], *, now: datetime, settings: Settings
) -> tuple[User, str]:
    """The login and its outcome; accepting the invitations sent to it is access's rule,
    composed above both (gymctl/access/identity_events.py). A deleted login stays deleted
    (`_gone`): its outcome is "ignored" and nothing is accepted for it."""
    gone = _gone(session, data)
    if gone is not None:
        return gone, IGNORED
    sign_up = read_sign_up(settings, data, now=now)
    user, created = find_or_create(
        session,
        _subject(data),
        now=now,
        email=sign_up.email,
        image_url=data.get("image_url"),
        link_email=sign_up.proven,
    )
    if not created:
        previous = user.email
        if not is_same_address(session, previous or "", sign_up.email or previous or ""):
            # As user.updated: a new address is unproven until the provider says so (the row
            # may have been made for another address, one an invitation found proven).
            user.email_verified_at = None
            user.email_verified_by = None
        user.email = sign_up.email or user.email
        user.image_url = data.get("image_url") or user.image_url
        user.updated_at = now
        if user.email != previous:
            # As user.updated does: the gyms that mirror the person send the address there
            # (the exact string: the external system keeps what it was sent).
            mirror.member_updated(session, user, now=now)
    record_sign_up(user, sign_up, now=now)
    emit(
        session,
        EventKind.analytics,
        "user_signed_up",
        at=now,
        aggregate_type="user",
        aggregate_id=user.id,
        payload={"linked": not created},
    )
    return user, "created" if created else "linked"


def user_updated(
    session: Session, data: dict[str, Any], *, now: datetime, settings: Settings
) -> str:
    if _gone(session, data) is not None:
        return IGNORED
    sign_up = read_sign_up(settings, data, now=now)
    email = sign_up.email
    user, created = find_or_create(
        session, _subject(data), now=now, email=email, image_url=data.get("image_url")
    )
    if not is_same_address(session, user.email or "", email or ""):
        user.email_verified_at = None  # a new address is unproven until the provider says so
        user.email_verified_by = None
    if user.email_verified_at is None:
        # Read as user.created reads it: deliveries are not ordered, and a join ticket in the
        # user object makes the provider's flag count for nothing (spec A 5.3), also when this
        # event comes first (it proved a join-ticket login that user.created then left proven).
        record_sign_up(user, sign_up, now=now)
    user.email = email
    user.image_url = data.get("image_url")
    user.updated_at = now
    mirror.member_updated(session, user, now=now)
    return "created" if created else "mirrored"


def user_deleted(
    session: Session, data: dict[str, Any], *, now: datetime, settings: Settings
) -> str:
    """Soft-delete without calling the provider again (it is the one that deleted the login).
    A login without a row yet gets one, deleted (a tombstone): a user.created retried after
    this delivery would otherwise make a live row for it and accept its invitations."""
    user = find_or_create(session, _subject(data), now=now)[0]
    if user.deleted_at is None:
        user.deleted_at = now
        user.updated_at = now
        emit(
            session,
            EventKind.domain,
            "user.deleted",
            at=now,
            aggregate_type="user",
            aggregate_id=user.id,
        )
    return "deleted"


def _gone(session: Session, data: dict[str, Any]) -> User | None:
    """The login's row when user.deleted soft-deleted it. Deliveries are not ordered (one that
    failed is retried after those that followed it): a late user.created or user.updated of a
    deleted login wrote its address back, and user.created accepted its invitations."""
    user = user_by_identity(session, _subject(data))
    return user if user is not None and user.deleted_at is not None else None


IGNORED = "ignored"  # the outcome of an event that changes nothing

Handler = Callable[..., str]  # (session, data, *, now, settings) -> outcome

# user.created is not here: its handler needs access's rule (gymctl/access/identity_events.py).
HANDLERS: dict[str, Handler] = {
    "user.updated": user_updated,
    "user.deleted": user_deleted,
}


# A delivery whose signed timestamp is past webhook_signature.TOLERANCE (5 minutes) is refused
# before its id is looked up, so an old id never comes back; its row is kept a month for what
# it did (its outcome).
DELIVERIES_KEPT = timedelta(days=30)


def forget_deliveries(session: Session, *, now: datetime) -> int:
    """Delete the delivery ids past DELIVERIES_KEPT (a row per delivery stayed for good)."""
    cutoff = now - DELIVERIES_KEPT
    statement = delete(IdentityWebhookDelivery).where(IdentityWebhookDelivery.received_at < cutoff)
    return session.execute(statement).rowcount


def apply_identity_event(
    session: Session,
    delivery_id: str,
    event: Any,
    *,
    handlers: Mapping[str, Handler],
    now: datetime,
    settings: Settings,
) -> str:
    """Apply one verified delivery once: a replayed delivery id is acknowledged, not re-applied.

    Returns the outcome (created, linked, mirrored, deleted, ignored, duplicate).
    """
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise invalid(codes.WEBHOOK_PAYLOAD_INVALID, "the body is not a provider event")
    event_type = event["type"]
    if not storable_text(event_type):
        raise invalid(
            codes.WEBHOOK_PAYLOAD_INVALID, "the event type holds a NUL or a lone surrogate"
        )
    handler = handlers.get(event_type)
    data = event.get("data")
    if handler is not None:
        # The fields we keep, typed and sized to their columns; the handlers read the rest of
        # the object (the sign-up's metadata) as the provider sent it.
        try:
            ProviderUser.model_validate(data)
        except ValidationError:
            raise invalid(
                codes.WEBHOOK_PAYLOAD_INVALID, "the event's user object is malformed"
            ) from None
    if session.get(IdentityWebhookDelivery, delivery_id) is not None:
        return "duplicate"
    # The delivery row goes in first: a concurrent delivery of the same id waits on its key and
    # then finds it taken; if this transaction fails, the row goes with it and a retry applies.
    delivery = IdentityWebhookDelivery(
        id=delivery_id, event_type=event_type[:64], received_at=now, outcome="applying"
    )
    try:
        with unique_violation("pk_identity_webhook_deliveries"), session.begin_nested():
            session.add(delivery)
    except UniqueViolation:
        return "duplicate"
    outcome = handler(session, data, now=now, settings=settings) if handler else IGNORED
    delivery.outcome = outcome
    log.info("identity event %s applied: %s", event_type, outcome)
    return outcome
