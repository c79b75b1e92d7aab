"""Standard Webhooks signatures (spec A 6.1): the reference vector, then every refusal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gymctl.errors import DomainError
from gymctl.identity.webhook_signature import sign, verify

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = 1614265330
BODY = b'{"test": 2432232314}'
SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
AT = datetime.fromtimestamp(TIMESTAMP, UTC)


def headers(prefix="svix", *, msg_id=MSG_ID, timestamp=TIMESTAMP, signature=SIGNATURE):
    return {
        f"{prefix}-id": msg_id,
        f"{prefix}-timestamp": str(timestamp),
        f"{prefix}-signature": signature,
    }


def refused(code, *args, **kwargs):
    with pytest.raises(DomainError) as caught:
        verify(*args, **kwargs)
    assert (caught.value.code, caught.value.status) == (code, 400)


@pytest.mark.parametrize("prefix", ["svix", "webhook", "Svix", "WEBHOOK"])
def test_reference_vector_verifies_under_either_header_family(prefix):
    assert sign(SECRET, MSG_ID, TIMESTAMP, BODY) == SIGNATURE
    delivery = verify(SECRET, headers(prefix), BODY, now=AT)
    assert delivery.id == MSG_ID


def test_one_matching_signature_among_several_is_enough():
    several = f"v1,bm9wZQ== v2,{SIGNATURE[3:]} {SIGNATURE}"
    assert verify(SECRET, headers(signature=several), BODY, now=AT).id == MSG_ID


def test_tampered_body_is_refused():
    refused("webhook_signature_invalid", SECRET, headers(), b'{"test": 2432232315}', now=AT)


def test_body_is_never_reserialised_whitespace_matters():
    refused("webhook_signature_invalid", SECRET, headers(), b'{"test":2432232314}', now=AT)


def test_wrong_secret_is_refused():
    refused("webhook_signature_invalid", "whsec_" + "A" * 32, headers(), BODY, now=AT)


@pytest.mark.parametrize(
    "drift", [timedelta(minutes=5, seconds=1), -timedelta(minutes=5, seconds=1)]
)
def test_stale_or_future_timestamp_is_refused(drift):
    refused("webhook_timestamp_stale", SECRET, headers(), BODY, now=AT + drift)


def test_timestamp_within_five_minutes_either_way_passes():
    for drift in (timedelta(minutes=5), -timedelta(minutes=5)):
        assert verify(SECRET, headers(), BODY, now=AT + drift).id == MSG_ID


@pytest.mark.parametrize(
    "garbage",
    # "v1,\u00e9": a byte outside ASCII (WSGI hands headers over latin-1 decoded), which base64
    # refuses with ValueError rather than binascii.Error (a 500 before).
    [
        "garbage",
        "v1,",
        "v1,!!!not-base64!!!",
        ",,,",
        "v1 g0hM9SsE",
        "v1,abc,def",
        "\x00",
        "v1,\u00e9",
    ],
)
def test_garbage_signature_header_is_a_400_never_an_exception(garbage):
    refused("webhook_signature_invalid", SECRET, headers(signature=garbage), BODY, now=AT)


@pytest.mark.parametrize("missing", ["id", "timestamp", "signature"])
def test_missing_header_is_refused(missing):
    partial = {k: v for k, v in headers().items() if not k.endswith(missing)}
    refused("webhook_headers_missing", SECRET, partial, BODY, now=AT)


@pytest.mark.parametrize("timestamp", ["soon", "1.5e9", "-", "99999999999999999999"])
def test_malformed_timestamp_is_refused(timestamp):
    refused("webhook_timestamp_invalid", SECRET, headers(timestamp=timestamp), BODY, now=AT)


def test_non_utf8_body_is_checked_as_bytes():
    body = b"\xff\xfe not text"
    signature = sign(SECRET, MSG_ID, TIMESTAMP, body)
    assert verify(SECRET, headers(signature=signature), body, now=AT).id == MSG_ID


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ({"msg_id": "m" * 129}, "webhook_headers_missing"),  # over identity_webhook_deliveries.id
        ({"msg_id": "msg_\x00"}, "webhook_headers_missing"),
        ({"timestamp": "1" * 21}, "webhook_timestamp_invalid"),
        ({"signature": f"{SIGNATURE} " + "v1,AAAA " * 300}, "webhook_signature_invalid"),
    ],
)
def test_an_oversized_or_unstorable_header_is_refused(header, code):
    refused(code, SECRET, headers(**header), BODY, now=AT)
