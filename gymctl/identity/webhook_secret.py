"""The identity webhook's secret, parsed one way for the signature check and the production
check (a module of its own: the production check runs inside gymctl.config, which the signature
check's imports reach)."""

from __future__ import annotations

import base64
import binascii

SECRET_PREFIX = "whsec_"  # noqa: S105 (a format prefix, not a secret)


def decode_secret(secret: str) -> bytes:
    raw = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except binascii.Error as error:
        raise ValueError("the webhook secret is not base64 after its whsec_ prefix") from error
    if not key:
        raise ValueError("the webhook secret is empty")
    return key
