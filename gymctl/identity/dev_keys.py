"""The embedded default's local identity signing key: lets a fresh checkout sign in without the
real provider. Refused in production, where only the provider mints tokens."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gymctl.config import Settings
from gymctl.errors import invalid
from gymctl.identity import codes
from gymctl.identity.tokens import MAX_ID_LENGTH, is_identifier

DEV_KID = "gymctl-dev"
SESSION_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def ensure_signing_key(settings: Settings) -> bool:
    """Create the key pair under GYMCTL_HOME/identity once; True when it was created now."""
    if settings.is_production:
        raise invalid(codes.DEV_KEYS_REFUSED, "local signing keys are not used in production")
    path = settings.dev_signing_key_path
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    path.with_name("public_key.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return True


def mint_dev_token(
    settings: Settings,
    identity_id: str,
    *,
    now: datetime,
    lifetime: timedelta = timedelta(hours=12),
    session_id: str | None = None,
) -> str:
    """A session token for `identity_id`, signed with the local key. Real tokens live 60 s; a dev
    token lives longer so a person can paste it into curl. `session_id` reuses a session (its
    sid), so the ownership trail shows one session, not one per minted token."""
    if not is_identifier(identity_id):  # the API refuses such a sub (token_claims)
        raise invalid(
            codes.IDENTITY_ID_INVALID,
            f"an identity subject is 1 to {MAX_ID_LENGTH} printable characters",
        )
    if session_id is not None and not SESSION_ID.fullmatch(session_id):
        raise invalid(codes.SESSION_ID_INVALID, "a session id is 1 to 128 of A-Z a-z 0-9 _ . -")
    if settings.is_production:
        raise invalid(codes.DEV_KEYS_REFUSED, "local signing keys are not used in production")
    if not settings.dev_signing_key_path.exists():
        raise invalid(codes.DEV_KEY_MISSING, "run `gymctl quickstart` first to create the key")
    private = settings.dev_signing_key_path.read_bytes()
    issued = int(now.timestamp())
    claims = {
        "sub": identity_id,
        "sid": session_id or f"sess_dev_{issued}",
        "iat": issued,
        "nbf": issued,
        "exp": issued + int(lifetime.total_seconds()),
        "iss": "gymctl-dev",
    }
    return jwt.encode(claims, private, algorithm="RS256", headers={"kid": DEV_KID})
