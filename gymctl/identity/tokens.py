"""Session-token verification (spec A 5.1 step 4), importable by any service.

RS256 only, never an algorithm taken from the token. The signature is checked first, then the
required claims (exp, iat, sub, sid), then time with a few seconds of leeway, then the optional
allow-list of authorized parties (azp). With IDENTITY_JWT_KEY the check is in-process; otherwise,
and whenever that key cannot verify a signature, the provider's key set is used: cached per process
for five minutes, refetched once on an unknown kid (rate-limited), and the last good set is kept
when a fetch fails. A PEM key that fails is reported once per process.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
import jwt
from jwt import PyJWK, PyJWKSet
from jwt.algorithms import RSAAlgorithm

from gymctl import clock as default_clock
from gymctl.clock import Clock
from gymctl.config import Settings, get_settings
from gymctl.errors import DomainError, unauthorized

log = logging.getLogger("gymctl.identity")

ALGORITHM = "RS256"
REQUIRED_CLAIMS = ("exp", "iat", "sub", "sid")
LEEWAY = timedelta(seconds=5)
KEY_SET_LIFETIME = timedelta(minutes=5)
UNKNOWN_KID_REFETCH_INTERVAL = timedelta(seconds=10)


@dataclass(frozen=True)
class SessionClaims:
    sub: str
    sid: str
    azp: str | None
    exp: int
    iat: int
    raw: dict[str, Any] = field(repr=False)


class KeySetUnavailable(Exception):
    """The provider's key set could not be fetched and none was fetched before."""


class KeySet:
    """The provider's JWKS, cached with a lifetime; a failed fetch keeps the last good set."""

    def __init__(
        self, url: str, secret_key: str | None, clock: Clock, client: httpx.Client
    ) -> None:
        self._url = url
        self._secret_key = secret_key
        self._clock = clock
        self._client = client
        self._keys: dict[str, PyJWK] = {}
        self._fetched_at: datetime | None = None
        self._last_forced: datetime | None = None
        self._lock = threading.Lock()

    def _fetch(self) -> None:
        headers = {"Authorization": f"Bearer {self._secret_key}"} if self._secret_key else {}
        try:
            response = self._client.get(self._url, headers=headers, timeout=5.0)
            response.raise_for_status()
            key_set = PyJWKSet.from_dict(response.json())
        except (httpx.HTTPError, ValueError, jwt.PyJWTError) as error:
            log.warning("identity key set fetch failed: %s", type(error).__name__)
            if not self._keys:
                raise KeySetUnavailable(str(type(error).__name__)) from error
            return
        self._keys = {key.key_id: key for key in key_set.keys if key.key_id}
        self._fetched_at = self._clock.now()

    def get(self, kid: str | None) -> PyJWK | None:
        now = self._clock.now()
        with self._lock:
            if self._fetched_at is None or now - self._fetched_at >= KEY_SET_LIFETIME:
                self._fetch()
            if kid not in self._keys and (
                self._last_forced is None or now - self._last_forced >= UNKNOWN_KID_REFETCH_INTERVAL
            ):
                self._last_forced = now
                self._fetch()
            return self._keys.get(kid) if kid else None


def _parse_header(token: str) -> dict[str, Any]:
    """The JOSE header, read without trusting it (only to refuse a wrong alg and find the kid)."""
    head, dot, _rest = token.partition(".")
    try:
        if not dot or _rest.count(".") != 1:
            raise ValueError("a JWT has three segments")
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, binascii.Error) as error:
        raise unauthorized("token_malformed", "the session token is not a JWT") from error
    if not isinstance(header, dict):
        raise unauthorized("token_malformed", "the session token is not a JWT")
    return header


def _load_pem(pem: str) -> Any | None:
    try:
        return RSAAlgorithm(RSAAlgorithm.SHA256).prepare_key(pem)
    except (jwt.PyJWTError, ValueError, TypeError):
        return None


class TokenVerifier:
    def __init__(
        self,
        *,
        public_key_pem: str | None,
        key_set: KeySet | None,
        authorized_parties: list[str] | tuple[str, ...] = (),
        clock: Clock = default_clock,
    ) -> None:
        if public_key_pem is None and key_set is None:
            raise ValueError("a PEM key or a key set URL is required to verify session tokens")
        self._pem = public_key_pem
        # Parsed once, not per request; an unusable PEM behaves like a key that cannot verify.
        self._pem_key = _load_pem(public_key_pem) if public_key_pem is not None else None
        self._key_set = key_set
        self._authorized_parties = tuple(authorized_parties)
        self._clock = clock
        self._pem_failure_reported = False

    def verify(self, token: str) -> SessionClaims:
        header = _parse_header(token)
        if header.get("alg") != ALGORITHM:
            raise unauthorized("token_algorithm", "session tokens must be signed with RS256")

        claims = None
        if self._pem is not None:
            try:
                if self._pem_key is None:
                    raise unauthorized("token_signature", "IDENTITY_JWT_KEY is not a usable key")
                claims = self._decode(token, self._pem_key)
            except DomainError as error:
                if error.code != "token_signature" or self._key_set is None:
                    raise
                self._report_pem_failure()
        if claims is None:
            claims = self._decode(token, self._key_from_set(header.get("kid")))
        return self._check_claims(claims)

    def _decode(self, token: str, key: Any) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                options={
                    "require": list(REQUIRED_CLAIMS),
                    # Time is checked below against the injectable clock.
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_aud": False,
                },
            )
        except (jwt.InvalidSignatureError, jwt.InvalidKeyError) as error:
            raise unauthorized("token_signature", "the token signature is invalid") from error
        except jwt.MissingRequiredClaimError as error:
            raise unauthorized("token_claims", f"the token lacks the {error.claim} claim") from None
        except jwt.PyJWTError as error:
            raise unauthorized("token_invalid", "the session token is invalid") from error

    def _key_from_set(self, kid: str | None) -> PyJWK:
        assert self._key_set is not None
        try:
            key = self._key_set.get(kid)
        except KeySetUnavailable:
            raise unauthorized(
                "token_keys_unavailable", "the identity key set cannot be fetched"
            ) from None
        if key is None:
            raise unauthorized("token_unknown_key", "the token's key is not in the key set")
        return key

    def _check_claims(self, claims: dict[str, Any]) -> SessionClaims:
        sub, sid, azp = claims.get("sub"), claims.get("sid"), claims.get("azp")
        if not isinstance(sub, str) or not sub or not isinstance(sid, str) or not sid:
            raise unauthorized("token_claims", "sub and sid must be non-empty strings")
        try:
            exp, iat = int(claims["exp"]), int(claims["iat"])
            nbf = int(claims["nbf"]) if "nbf" in claims else None
        except (TypeError, ValueError):
            raise unauthorized("token_claims", "exp, iat and nbf must be numbers") from None
        now = self._clock.now().timestamp()
        leeway = LEEWAY.total_seconds()
        if now >= exp + leeway:
            raise unauthorized("token_expired", "the session token has expired")
        if iat > now + leeway or (nbf is not None and nbf > now + leeway):
            raise unauthorized("token_not_yet_valid", "the session token is not valid yet")
        if self._authorized_parties and azp not in self._authorized_parties:
            raise unauthorized("token_unauthorized_party", "the token's azp is not allowed")
        return SessionClaims(sub=sub, sid=sid, azp=azp, exp=exp, iat=iat, raw=claims)

    def _report_pem_failure(self) -> None:
        if not self._pem_failure_reported:
            self._pem_failure_reported = True
            # Error level reaches error tracking through its logging integration.
            log.error("IDENTITY_JWT_KEY cannot verify a token signature; using the key set")


def build_verifier(
    settings: Settings, *, clock: Clock = default_clock, client: httpx.Client | None = None
) -> TokenVerifier:
    key_set = None
    if settings.identity_api_url:
        secret = settings.identity_secret_key
        key_set = KeySet(
            settings.identity_api_url.rstrip("/") + "/v1/jwks",
            secret.get_secret_value() if secret else None,
            clock,
            client or httpx.Client(),
        )
    return TokenVerifier(
        public_key_pem=settings.identity_public_key_pem,
        key_set=key_set,
        authorized_parties=settings.identity_authorized_parties,
        clock=clock,
    )


@functools.cache
def _process_verifier() -> TokenVerifier:
    return build_verifier(get_settings())


def verify_session_token(token: str) -> SessionClaims:
    """Verify a session token with this process's settings; DomainError(401) on refusal."""
    try:
        verifier = _process_verifier()
    except ValueError as error:
        raise DomainError("identity_not_configured", str(error), status=500) from error
    return verifier.verify(token)
