"""Standard Webhooks signature check for the identity provider's deliveries (spec A 6.1).

Written here rather than taken from the `standardwebhooks` package because that package reads
the wall clock (we verify against an injectable one), decodes the body as text before checking it,
and lets ValueError or binascii.Error escape on a malformed header: every refusal here is a
DomainError with a code and status 400, never a 500.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gymctl.db import storable_text
from gymctl.errors import DomainError, invalid
from gymctl.identity import codes
from gymctl.identity.webhook_secret import decode_secret
from gymctl.models import IdentityWebhookDelivery

TOLERANCE = timedelta(minutes=5)
# The id is the replay key we store (identity_webhook_deliveries.id): a longer one cannot be kept.
MAX_ID_CHARS = IdentityWebhookDelivery.__table__.c.id.type.length
MAX_TIMESTAMP_CHARS = 20  # seconds since the epoch; a longer number is no date we accept
MAX_SIGNATURES_CHARS = 2048  # a v1 signature is 47 characters: room for a key rotation's few


@dataclass(frozen=True)
class VerifiedDelivery:
    id: str
    timestamp: datetime


def _refuse(code: str, message: str) -> DomainError:
    return invalid(code, message)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """svix-<name> (what the provider sends) or webhook-<name> (the standard's own names)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    return lowered.get(f"svix-{name}") or lowered.get(f"webhook-{name}")


def sign(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The `v1,<base64>` signature of a delivery; used by tests and by anyone replaying one."""
    digest = hmac.new(
        decode_secret(secret), f"{delivery_id}.{timestamp}.".encode() + body, hashlib.sha256
    ).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(
    secret: str, headers: Mapping[str, str], body: bytes, *, now: datetime
) -> VerifiedDelivery:
    """Check id, timestamp and signature headers against the raw body (never re-serialised)."""
    delivery_id = _header(headers, "id")
    timestamp_text = _header(headers, "timestamp")
    signatures = _header(headers, "signature")
    if not delivery_id or not timestamp_text or not signatures:
        raise _refuse(codes.WEBHOOK_HEADERS_MISSING, "id, timestamp and signature headers required")
    if len(delivery_id) > MAX_ID_CHARS or not storable_text(delivery_id):
        raise _refuse(
            codes.WEBHOOK_HEADERS_MISSING,
            f"the id header must be text of at most {MAX_ID_CHARS} characters",
        )
    if len(timestamp_text) > MAX_TIMESTAMP_CHARS:
        raise _refuse(codes.WEBHOOK_TIMESTAMP_INVALID, "the timestamp header is not a number")
    if len(signatures) > MAX_SIGNATURES_CHARS:
        raise _refuse(codes.WEBHOOK_SIGNATURE_INVALID, "the signature header is too long")
    try:
        timestamp = int(timestamp_text)
        sent_at = datetime.fromtimestamp(timestamp, UTC)
    except (ValueError, OverflowError, OSError):
        raise _refuse(
            codes.WEBHOOK_TIMESTAMP_INVALID, "the timestamp header is not a number"
        ) from None
    if abs(now - sent_at) > TOLERANCE:
        raise _refuse(
            codes.WEBHOOK_TIMESTAMP_STALE, "the timestamp is outside the 5-minute tolerance"
        )

    expected = base64.b64decode(sign(secret, delivery_id, timestamp, body).split(",", 1)[1])
    for candidate in signatures.split():
        version, _, encoded = candidate.partition(",")
        if version != "v1" or not encoded:
            continue
        try:
            given = base64.b64decode(encoded, validate=True)
        except ValueError:  # binascii.Error, or a character outside ASCII (a 500 before)
            continue
        if hmac.compare_digest(expected, given):
            return VerifiedDelivery(id=delivery_id, timestamp=sent_at)
    raise _refuse(codes.WEBHOOK_SIGNATURE_INVALID, "no signature matches the body")
