"""Payment provider webhooks (spec B 5, 6).

The card provider's webhooks are not signed: each is verified by reading the page back on the
organization's terminal, and only that read-back is acted on. Its HTTP answers: 200 processed
(success or payment.failed), 503 deal_not_finalized / provider_unreachable so it redelivers,
400 for every rejection (deal_not_found, unverified, malformed).

Other providers sign their webhooks; the per-organization flag
payment-webhook-signature-enforcement chooses between a 400 and a logged 200 whose reason ends
in _unenforced. The flag is read per request and fails open (unset: not enforced). A verified
delivery is kept by the digest of its body, so a replay (or the provider's redelivery) answers
200 duplicate and records nothing again.

Both routes are public, so neither writes anything for an organization that does not exist (or
was deleted): the answer is organization_not_found, 400 for the card provider (every rejection
of that provider is a 400, spec B 6), 404 for the others. The one exception is money: a card
webhook naming a page one of a deleted organization's checkouts opened is read back and
settled like a live one's (`_card_webhook_served`). For a real organization, what anyone
can trigger (a card-provider webhook, another provider's delivery that is not verified) is
counted per organization before its event row is written; past the budget the answer is 429 and
only the count is kept.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from gymctl import ratelimit
from gymctl.billing import codes
from gymctl.billing.accounts import CARD_PROVIDER, active_config, credentials_of
from gymctl.billing.checkout import checkout_by_page, verify_and_apply
from gymctl.crypto import FieldCipher
from gymctl.db import upsert_for
from gymctl.events import EventKind, emit
from gymctl.models import Checkout, Organization, PaymentWebhookDelivery
from gymctl.providers.card import CardProvider

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "x-webhook-signature"
PAGE_ID = re.compile(r"[A-Za-z0-9-]{1,128}")
WEBHOOKS_PER_WINDOW = 10  # per checkout, and per organization for pages that are not ours
WEBHOOK_WINDOW = timedelta(minutes=1)


@dataclass(frozen=True)
class Answer:
    """What the HTTP door sends back; `commit` says whether the work is kept."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    commit: bool = True


def card_provider_webhook(
    session: Session,
    provider: CardProvider,
    *,
    organization_id: uuid.UUID,
    body: dict[str, Any],
    now: datetime,
    cipher: FieldCipher,
) -> Answer:
    page_id = body.get("LowProfileId") or body.get("lowProfileId")
    if not isinstance(page_id, str) or not PAGE_ID.fullmatch(page_id):
        page_id = None
    opened = checkout_by_page(session, organization_id, page_id) if page_id else None
    if not _card_webhook_served(session, organization_id, opened):
        return _unknown_organization(400)  # every rejection of this provider is a 400
    refused = _throttled(session, organization_id, opened, now)
    if refused is not None:
        return refused
    if page_id is None:
        return _rejected(session, organization_id, "webhook_malformed", None, now)
    # The attempt counted is kept whatever follows (as a refusal's is), and it is committed
    # here: the read-back below is a provider call, and on the embedded default a transaction
    # that wrote would hold every writer for it.
    session.commit()
    outcome, checkout = verify_and_apply(
        session, provider, organization_id=organization_id, page_id=page_id, now=now, cipher=cipher
    )
    if outcome in ("completed", "already_completed"):
        return Answer(200, {"outcome": "processed", "checkoutId": str(checkout.id)})
    if outcome == "billing_contradiction":  # recorded: nothing to redeliver
        return Answer(200, {"outcome": outcome, "checkoutId": str(checkout.id)})
    if outcome in ("failed", "already_failed"):
        return Answer(200, {"outcome": "payment.failed", "checkoutId": str(checkout.id)})
    if outcome in ("deal_not_finalized", "provider_unreachable"):
        # Transient: nothing is kept and the provider redelivers (1, 2, 2, 16, 60 min, 12 h).
        return Answer(503, {"code": outcome, "message": _MESSAGES[outcome]}, commit=False)
    if outcome == "unverified":
        _record(
            session,
            "payment.webhook_ignored",
            organization_id,
            now,
            reason="unverified",
            pageId=page_id,
        )
        return _rejected(session, organization_id, "webhook_unverified", page_id, now)
    return _rejected(session, organization_id, outcome, page_id, now)


def _throttled(
    session: Session, organization_id: uuid.UUID, opened: Checkout | None, now: datetime
) -> Answer | None:
    """Anyone can post this webhook, and each one costs a provider read-back and an event row.
    A checkout's own page is limited per checkout; everything else (malformed, a page we never
    opened) shares one budget per organization. Counted in the database, so it holds across
    workers; the provider redelivers minutes apart, far below the limit."""
    key = f"card-webhook:checkout:{opened.id}" if opened else f"card-webhook:{organization_id}"
    return _spend(session, key, now)


def _spend(session: Session, key: str, now: datetime) -> Answer | None:
    """One attempt counted under `key`; the 429 past WEBHOOKS_PER_WINDOW (the door commits the
    count, and nothing else has been written yet)."""
    spent = ratelimit.spend(session, key, window=WEBHOOK_WINDOW, now=now)
    if spent.count <= WEBHOOKS_PER_WINDOW:
        return None
    return Answer(429, ratelimit.refused(spent).to_json())


def _card_webhook_served(
    session: Session, organization_id: uuid.UUID, opened: Checkout | None
) -> bool:
    """A live or inactive organization; a deleted one only for a page one of its own checkouts
    names. A member can still pay a page after the gym was deleted (one the abandoned sweep
    marked abandoned, or one open at the deletion): the provider took the money, so the page is
    read back on the terminal that opened it and the payment recorded on its ended plan for a
    refund (checkout.apply_page: not revived, billing_contradiction, urgent follow-up). Its
    throttle budget is the checkout's, so no one makes new budgets; a page the deleted gym
    never opened, like an organization that never existed, writes nothing. Read only.
    `opened`: the organization's checkout that opened the page, if any (none in an organization
    that does not exist)."""
    return opened is not None or _organization_exists(session, organization_id)


def _organization_exists(session: Session, organization_id: uuid.UUID) -> bool:
    """A live or inactive organization (a payment made before it went inactive still settles);
    not one that never existed or was deleted. Read only: the routes are public."""
    organization = session.get(Organization, organization_id)
    return organization is not None and organization.deleted_at is None


def _unknown_organization(status: int) -> Answer:
    """Nothing is written for an organization that does not exist: no event, no rate window
    (a new made-up id each time would otherwise get a fresh budget and rows of its own)."""
    body = {"code": codes.ORGANIZATION_NOT_FOUND, "message": "no such organization"}
    return Answer(status, body, commit=False)


def other_provider_webhook(
    session: Session,
    *,
    organization_id: uuid.UUID,
    provider_name: str,
    raw_body: bytes,
    signature: str | None,
    now: datetime,
    cipher: FieldCipher,
) -> Answer:
    """Signed webhooks of other providers: HMAC-SHA256 of the body under the configured
    webhook secret. Their collection is provider-direct: a verified event is recorded once.

    An unknown organization is a 404 with nothing written. A delivery that is not verified
    (wrong provider, unsigned, bad signature) is counted against the organization's budget
    first; a verified one is not (only the secret's holder can send one, and its replays are
    answered as duplicates without a write)."""
    if not _organization_exists(session, organization_id):
        return _unknown_organization(404)
    config = active_config(session, organization_id)
    if config is None or config.provider == CARD_PROVIDER or config.provider != provider_name:
        refused = _spend(session, f"payment-webhook:{organization_id}", now)
        if refused is not None:
            return refused
        return _rejected(session, organization_id, "webhook_provider_mismatch", None, now)
    secret = credentials_of(config, cipher).get("webhookSecret")
    expected = hmac.new(secret.encode(), raw_body, hashlib.sha256).hexdigest() if secret else None
    if not _signature_matches(expected, signature):
        refused = _spend(session, f"payment-webhook:{organization_id}", now)
        if refused is not None:
            return refused
        reason = "signature_missing" if not signature else "signature_invalid"
        if config.webhook_signature_enforcement:
            return _rejected(session, organization_id, reason, None, now)
        reason = f"{reason}_unenforced"
        logger.warning("payment webhook accepted unverified: %s", reason)
        _record(
            session,
            "payment.webhook_ignored",
            organization_id,
            now,
            reason=reason,
            provider=provider_name,
        )
        return Answer(200, {"outcome": "ignored", "reason": reason})
    digest = hashlib.sha256(raw_body).hexdigest()
    if not _first_delivery(session, organization_id, provider_name, digest, now):
        return Answer(200, {"outcome": "duplicate"})
    _record(
        session,
        "payment.webhook_received",
        organization_id,
        now,
        kind=EventKind.domain,
        provider=provider_name,
        bytes=len(raw_body),
    )
    return Answer(200, {"outcome": "processed"})


def _signature_matches(expected: str | None, signature: str | None) -> bool:
    """The header against the hex digest. compare_digest refuses a str holding non-ASCII
    characters (TypeError), and a header may carry any latin-1 byte: such a value cannot be a
    hex digest, so it does not match."""
    if not expected or not signature:
        return False
    given = signature.strip()
    return given.isascii() and hmac.compare_digest(expected, given)


# A provider redelivers within days. A replay of a body older than this is recorded again:
# an event only (these organizations collect provider-direct; nothing moves money on it).
DELIVERIES_KEPT = timedelta(days=90)


def forget_deliveries(session: Session, *, now: datetime) -> int:
    """Delete the digests of verified deliveries past DELIVERIES_KEPT: one row per delivery a
    provider ever sent otherwise stays for good."""
    cutoff = now - DELIVERIES_KEPT
    statement = delete(PaymentWebhookDelivery).where(PaymentWebhookDelivery.received_at < cutoff)
    return session.execute(statement).rowcount


def _first_delivery(
    session: Session, organization_id: uuid.UUID, provider: str, digest: str, now: datetime
) -> bool:
    """Keep the delivery's digest; False when it was already kept (a replay, or the provider's
    redelivery of an event we answered). One atomic insert: a concurrent duplicate waits on the
    key (PostgreSQL) or the write lock (SQLite), then finds it taken; if this transaction rolls
    back, the row goes with it and a redelivery is recorded."""
    insert = upsert_for(session)
    statement = (
        insert(PaymentWebhookDelivery)
        .values(
            organization_id=organization_id,
            provider=provider,
            body_sha256=digest,
            received_at=now,
        )
        .on_conflict_do_nothing(index_elements=["organization_id", "provider", "body_sha256"])
        .returning(PaymentWebhookDelivery.body_sha256)
    )
    return session.execute(statement).scalar_one_or_none() is not None


_MESSAGES = {
    "deal_not_finalized": "the payment page has not settled yet",
    "provider_unreachable": "the card provider could not be reached",
    "deal_not_found": "the provider does not know this payment page",
    "webhook_unverified": "the payment page is not one of this organization's checkouts",
    "webhook_malformed": "the webhook names no payment page",
    "webhook_provider_mismatch": "this organization does not use that provider",
    "signature_missing": "the webhook is not signed",
    "signature_invalid": "the webhook signature does not match",
}


def _rejected(
    session: Session, organization_id: uuid.UUID, code: str, page_id: str | None, now: datetime
) -> Answer:
    """Rejections are always 400 for the card provider (spec B 6). The rejection event is
    kept; nothing else was written."""
    _record(
        session,
        "payment.webhook_rejected",
        organization_id,
        now,
        code=code,
        outcome="failure",
        pageId=page_id,
    )
    return Answer(400, {"code": code, "message": _MESSAGES.get(code, code)})


def _record(
    session: Session,
    name: str,
    organization_id: uuid.UUID,
    now: datetime,
    *,
    kind: EventKind = EventKind.analytics,
    **payload: Any,
) -> None:
    """A webhook's event, filed on its organization."""
    emit(
        session,
        kind,
        name,
        at=now,
        aggregate_type="organization",
        aggregate_id=organization_id,
        organization_id=organization_id,
        payload=payload,
    )
