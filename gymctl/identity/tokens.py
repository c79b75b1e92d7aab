"""Session-token verification (spec A 5.1 step 4), importable by any service.

RS256 only, never an algorithm taken from the token. The signature is checked first, then the
required claims (exp, iat, sub, sid, each of a shape our columns hold), then time with a few
seconds of leeway, then what the deployment configures: authorized parties (azp), issuer (iss),
audience (aud). With IDENTITY_JWT_KEY the check is in-process; otherwise, and whenever that key
cannot verify a signature, the provider's key set is used (KeySet). A PEM key that fails is
reported once per process.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import threading
import time
from collections import OrderedDict
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
from gymctl.errors import DomainError, internal_error, unauthorized
from gymctl.identity import codes
from gymctl.jsondepth import MAX_DEPTH, depth
from gymctl.providers import http_client
from gymctl.ratelimit import Backoff, LocalWindow

log = logging.getLogger("gymctl.identity")

ALGORITHM = "RS256"
REQUIRED_CLAIMS = ("exp", "iat", "sub", "sid")
LEEWAY = timedelta(seconds=5)
KEY_SET_LIFETIME = timedelta(minutes=5)
UNKNOWN_KID_REFETCH_INTERVAL = timedelta(seconds=10)
# A fetch of the key set ends within this, however the server answers (slow, trickling).
FETCH_DEADLINE = 2.0
# After a failed fetch none is tried for 1 s, then 2, 4 ... up to a minute (the negative cache).
FAILURE_BACKOFF = timedelta(seconds=1)
FAILURE_BACKOFF_CAP = timedelta(minutes=1)
MAX_KEY_SET_BYTES = 256 * 1024
VERIFIED_TOKENS = 4096
VERIFIED_LIFETIME = timedelta(minutes=1)
# users.identity_id and user_sessions.session_id hold 128 characters.
MAX_ID_LENGTH = 128


@dataclass(frozen=True)
class SessionClaims:
    sub: str
    sid: str
    azp: str | None
    exp: int
    iat: int
    raw: dict[str, Any] = field(repr=False)
    nbf: int | None = None


class KeySetUnavailable(Exception):
    """The provider's key set could not be fetched and none was fetched before."""


def is_identifier(value: Any) -> bool:
    """A provider id we store (sub, sid, act.sub): a non-empty printable string that fits."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_ID_LENGTH
        and value.isprintable()
        and not value.isspace()
    )


class KeySet:
    """The provider's JWKS, cached per process for five minutes, fetched so that an outage of the
    provider costs the API nothing it can avoid:

    - one fetch at a time (single flight): concurrent callers that need it wait for the same one;
    - a total deadline per fetch (FETCH_DEADLINE), not per read, and nobody waits longer;
    - after a failure no fetch before a backoff (1 s doubling to 1 min): the negative cache;
    - stale keys are kept and used: a known kid is answered at once from the cached set while a
      refresh runs in the background, so a down or slow provider delays no request;
    - only an unknown kid (or an empty cache) waits for a fetch, and an unknown kid forces one
      at most every ten seconds.
    """

    def __init__(
        self,
        url: str,
        secret_key: str | None,
        clock: Clock,
        client: httpx.Client,
        *,
        deadline: float = FETCH_DEADLINE,
    ) -> None:
        self._url = url
        self._secret_key = secret_key
        self._clock = clock
        self._client = client
        self._deadline = deadline
        self._keys: dict[str, PyJWK] = {}
        self._fetched_at: datetime | None = None
        # Per process by nature (each process caches its own set): the in-memory pieces of the
        # one rate limiter, gymctl.ratelimit.
        self._forced = LocalWindow(1, UNKNOWN_KID_REFETCH_INTERVAL)
        self._backoff = Backoff(FAILURE_BACKOFF, FAILURE_BACKOFF_CAP)
        self._in_flight: threading.Event | None = None
        self._lock = threading.Lock()

    def get(self, kid: Any) -> PyJWK | None:
        if not isinstance(kid, str):
            return None
        now = self._clock.now()
        keys, fetched_at = self._keys, self._fetched_at
        fresh = fetched_at is not None and now - fetched_at < KEY_SET_LIFETIME
        if kid in keys:
            if not fresh:
                self._start_fetch(now)  # stale while revalidating: this request does not wait
            return keys[kid]
        if fresh and not self._may_force(now):
            return None
        fetch = self._start_fetch(now)
        if fetch is not None:
            fetch.wait(self._deadline)
        if not self._keys:
            raise KeySetUnavailable("the key set has never been fetched")
        return self._keys.get(kid)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the fetch under way, if any; True when none is (left) running."""
        fetch = self._in_flight
        return fetch is None or fetch.wait(self._deadline if timeout is None else timeout)

    def _may_force(self, now: datetime) -> bool:
        return self._forced.take(now) is None

    def _start_fetch(self, now: datetime) -> threading.Event | None:
        """The fetch to wait for: the one under way, a new one, or None while backing off."""
        with self._lock:
            if self._in_flight is not None:
                return self._in_flight
            if not self._backoff.ready(now):
                return None
            self._in_flight = done = threading.Event()
        threading.Thread(target=self._fetch, args=(done,), name="jwks-fetch", daemon=True).start()
        return done

    def _fetch(self, done: threading.Event) -> None:
        try:
            keys = self._download()
        except Exception as error:  # any failure is a failed fetch (a malformed set too)
            log.warning("identity key set fetch failed: %s", type(error).__name__)
            self._backoff.failed(self._clock.now())
        else:
            with self._lock:
                self._keys, self._fetched_at = keys, self._clock.now()
            self._backoff.succeeded()
        finally:
            with self._lock:
                self._in_flight = None
            done.set()

    def _download(self) -> dict[str, PyJWK]:
        """GET the set: a server that trickles bytes is dropped at the first read past the
        deadline (a read itself waits at most the deadline); callers never wait past it."""
        deadline = time.monotonic() + self._deadline
        headers = {"Authorization": f"Bearer {self._secret_key}"} if self._secret_key else {}
        body = bytearray()
        with self._client.stream(
            "GET", self._url, headers=headers, timeout=self._deadline
        ) as response:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_KEY_SET_BYTES:
                    raise ValueError("the key set is too large")
                if time.monotonic() > deadline:
                    raise TimeoutError("the key set fetch passed its deadline")
        key_set = PyJWKSet.from_dict(json.loads(body))
        return {key.key_id: key for key in key_set.keys if isinstance(key.key_id, str)}


class VerifiedTokens:
    """Tokens this process verified in the last minute (bounded, least recently used out).

    Clients send one token many times (tokens live 60 s; the mobile app reuses one for 10 s, the
    web its cookie until refresh): a repeat skips the signature and claim checks, never the time
    checks. An entry lives at most a minute, so a key withdrawn from the key set stops verifying
    within a minute, sooner than the five-minute key-set cache lets it."""

    def __init__(self, *, size: int = VERIFIED_TOKENS, lifetime: timedelta = VERIFIED_LIFETIME):
        self._size = size
        self._lifetime = lifetime
        self._entries: OrderedDict[str, tuple[datetime, SessionClaims]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str, now: datetime) -> SessionClaims | None:
        with self._lock:
            entry = self._entries.get(token)
            if entry is None:
                return None
            if now - entry[0] >= self._lifetime or now < entry[0]:
                del self._entries[token]
                return None
            self._entries.move_to_end(token)
            return entry[1]

    def put(self, token: str, claims: SessionClaims, now: datetime) -> None:
        with self._lock:
            self._entries[token] = (now, claims)
            self._entries.move_to_end(token)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


def _parse_header(token: str) -> dict[str, Any]:
    """The JOSE header, read without trusting it (only to refuse a wrong alg and find the kid)."""
    head, dot, _rest = token.partition(".")
    try:
        if not dot or _rest.count(".") != 1:
            raise ValueError("a JWT has three segments")
        raw = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
        if depth(raw) > MAX_DEPTH:  # json.loads would recurse out of the stack (a 500)
            raise ValueError("the JOSE header nests too deep")
        header = json.loads(raw)
    except (ValueError, binascii.Error) as error:
        raise unauthorized(codes.TOKEN_MALFORMED, "the session token is not a JWT") from error
    if not isinstance(header, dict):
        raise unauthorized(codes.TOKEN_MALFORMED, "the session token is not a JWT")
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
        issuer: str | None = None,
        audiences: list[str] | tuple[str, ...] = (),
        clock: Clock = default_clock,
    ) -> None:
        if public_key_pem is None and key_set is None:
            raise ValueError("a PEM key or a key set URL is required to verify session tokens")
        self._pem = public_key_pem
        # Parsed once, not per request; an unusable PEM behaves like a key that cannot verify.
        self._pem_key = _load_pem(public_key_pem) if public_key_pem is not None else None
        self._key_set = key_set
        self._authorized_parties = tuple(authorized_parties)
        self._issuer = issuer
        self._audiences = tuple(audiences)
        self._clock = clock
        self._verified = VerifiedTokens()
        self._pem_failure_reported = False

    def verify(self, token: str) -> SessionClaims:
        now = self._clock.now()
        verified = self._verified.get(token, now)
        if verified is not None:
            self._check_time(verified.exp, verified.iat, verified.nbf, now)
            return verified
        header = _parse_header(token)
        if header.get("alg") != ALGORITHM:
            raise unauthorized(codes.TOKEN_ALGORITHM, "session tokens must be signed with RS256")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise unauthorized(codes.TOKEN_MALFORMED, "the token's kid is not a string")

        claims = None
        if self._pem is not None:
            try:
                if self._pem_key is None:
                    raise unauthorized(
                        codes.TOKEN_SIGNATURE, "IDENTITY_JWT_KEY is not a usable key"
                    )
                claims = self._decode(token, self._pem_key)
            except DomainError as error:
                if error.code != "token_signature" or self._key_set is None:
                    raise
                self._report_pem_failure()
        if claims is None:
            claims = self._decode(token, self._key_from_set(kid))
        checked = self._check_claims(claims, now)
        self._verified.put(token, checked, now)
        return checked

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
            raise unauthorized(codes.TOKEN_SIGNATURE, "the token signature is invalid") from error
        except jwt.MissingRequiredClaimError as error:
            raise unauthorized(
                codes.TOKEN_CLAIMS, f"the token lacks the {error.claim} claim"
            ) from None
        except jwt.PyJWTError as error:
            raise unauthorized(codes.TOKEN_INVALID, "the session token is invalid") from error

    def _key_from_set(self, kid: str | None) -> PyJWK:
        assert self._key_set is not None
        try:
            key = self._key_set.get(kid)
        except KeySetUnavailable:
            raise unauthorized(
                codes.TOKEN_KEYS_UNAVAILABLE, "the identity key set cannot be fetched"
            ) from None
        if key is None:
            raise unauthorized(codes.TOKEN_UNKNOWN_KEY, "the token's key is not in the key set")
        return key

    def _check_claims(self, claims: dict[str, Any], now: datetime) -> SessionClaims:
        sub, sid, azp = claims.get("sub"), claims.get("sid"), claims.get("azp")
        if not is_identifier(sub) or not is_identifier(sid):
            raise unauthorized(
                codes.TOKEN_CLAIMS,
                f"sub and sid must be printable strings of 1 to {MAX_ID_LENGTH} characters",
            )
        act = claims.get("act")
        if act is not None and not (isinstance(act, dict) and is_identifier(act.get("sub"))):
            # The impersonating operator goes to the ownership trail: never drop or cut it.
            raise unauthorized(codes.TOKEN_CLAIMS, "act must name the impersonating operator")
        try:
            exp, iat = int(claims["exp"]), int(claims["iat"])
            nbf = int(claims["nbf"]) if "nbf" in claims else None
        except (TypeError, ValueError, OverflowError):  # OverflowError: 1e400 parses to infinity
            raise unauthorized(codes.TOKEN_CLAIMS, "exp, iat and nbf must be numbers") from None
        self._check_time(exp, iat, nbf, now)
        if self._authorized_parties and azp not in self._authorized_parties:
            raise unauthorized(codes.TOKEN_UNAUTHORIZED_PARTY, "the token's azp is not allowed")
        if self._issuer is not None and claims.get("iss") != self._issuer:
            raise unauthorized(codes.TOKEN_ISSUER, "the token was issued by another issuer")
        self._check_audience(claims.get("aud"))
        return SessionClaims(sub=sub, sid=sid, azp=azp, exp=exp, iat=iat, raw=claims, nbf=nbf)

    @staticmethod
    def _check_time(exp: int, iat: int, nbf: int | None, now: datetime) -> None:
        at, leeway = now.timestamp(), LEEWAY.total_seconds()
        if at >= exp + leeway:
            raise unauthorized(codes.TOKEN_EXPIRED, "the session token has expired")
        if iat > at + leeway or (nbf is not None and nbf > at + leeway):
            raise unauthorized(codes.TOKEN_NOT_YET_VALID, "the session token is not valid yet")

    def _check_audience(self, aud: Any) -> None:
        """A token that names an audience is for that service: it must name a configured one;
        with none configured, only a token naming no audience passes (as PyJWT does)."""
        if aud is None:
            if self._audiences:
                raise unauthorized(codes.TOKEN_AUDIENCE, "the token names no audience")
            return
        named = [aud] if isinstance(aud, str) else aud
        if not isinstance(named, list) or not any(
            isinstance(a, str) and a in self._audiences for a in named
        ):
            raise unauthorized(codes.TOKEN_AUDIENCE, "the token is meant for another audience")

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
            client or http_client.new_client(),
        )
    return TokenVerifier(
        public_key_pem=settings.identity_public_key_pem,
        key_set=key_set,
        authorized_parties=settings.identity_authorized_parties,
        issuer=settings.identity_issuer,
        audiences=settings.identity_audiences,
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
        raise internal_error(codes.IDENTITY_NOT_CONFIGURED, str(error)) from error
    return verifier.verify(token)
