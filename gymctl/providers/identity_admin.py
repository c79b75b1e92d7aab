"""The identity provider's admin API: does an address already have an account, create the
provider's invitation, read a user's private metadata (the platform-admin guard, spec A 5.2).

Two implementations behind one interface: HTTP against IDENTITY_API_URL with IDENTITY_SECRET_KEY,
and the embedded default where the users table stands in for the provider's accounts. Emails are
personal data: no message, log line or error here carries one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote
from uuid import uuid4

import httpx
from sqlalchemy import select

from gymctl import clock as default_clock
from gymctl import ratelimit
from gymctl.clock import Clock
from gymctl.config import ConfigError
from gymctl.db import READ_ONLY, storable_text
from gymctl.errors import DomainError
from gymctl.models import User
from gymctl.models.identity import same_address
from gymctl.numerals import is_decimal, whole_number
from gymctl.providers import http_client

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from gymctl.config import Settings

# identity.users.address_keys bound to the caller's session: the one address rule, which this
# module cannot import (identity.users imports it).
AddressKeys = Callable[[Iterable[str]], Mapping[str, str]]
RATE_LIMITED = "rate_limited"
PROVIDER_ERROR = "identity_provider_error"
INVITATIONS_PER_WINDOW = 100  # spec A 8: identity invitations, 100 per hour per instance
INVITATION_WINDOW = timedelta(hours=1)
INVITATION_KEY = "identity:invitations"  # one provider instance per deployment
# Reads of a login's user object by GET /users/me before the webhook arrived: the provider's
# smallest instances allow 100 backend calls per 10 s, so one process never asks more often.
USER_READS_PER_WINDOW = 100
USER_READ_WINDOW = timedelta(seconds=10)
TIMEOUT = 5.0


class IdentityAdminError(DomainError):
    """The provider did not answer usefully (network, timeout, unexpected status or body).
    The message names the call and the cause only: never an email or the secret key."""

    def __init__(
        self, message: str, *, code: str = PROVIDER_ERROR, status: int = 502, **details: Any
    ) -> None:
        super().__init__(code, message, status=status, **details)


class RateLimited(IdentityAdminError):
    """Refused for rate: by our own per-instance window (no call made) or by a provider 429.
    `retry_after` is in seconds when known."""

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        details = {"retryAfter": retry_after} if retry_after is not None else {}
        super().__init__(message, code=RATE_LIMITED, status=429, **details)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Account:
    identity_id: str
    email: str
    email_verified: bool


class IdentityAdmin(Protocol):
    def find_account(self, email: str, keys: AddressKeys) -> Account | None:
        """The provider account holding this address by the one address rule (`keys`), or
        None."""
        ...

    def create_invitation(
        self, session: Session, email: str, *, redirect_url: str, metadata: dict[str, Any]
    ) -> str:
        """Create the provider's invitation; returns its id. The per-instance limit is counted
        in the database, so that every process shares it: on PostgreSQL in a transaction of
        its own (the caller's `session` names the database), so no invitation waits for
        another's call, and a slot stays spent once the provider created its invitation."""
        ...

    def private_metadata(self, identity_id: str) -> dict[str, Any]:
        """The user's private metadata; {} for an unknown user."""
        ...

    def user_record(self, identity_id: str) -> dict[str, Any] | None:
        """The provider's user object (the webhook's shape), None when unknown; counted against
        the user-read window (RateLimited past it)."""
        ...


def _span(per: timedelta) -> str:
    seconds = int(per.total_seconds())
    return "hour" if seconds == 3600 else f"{seconds} s"


class _RedactQueries(logging.Filter):
    """httpx logs each request's full URL at INFO; the account lookup carries the email in its
    query string, so strip query strings from httpx's records."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, httpx.URL) for a in record.args):
            record.args = tuple(
                a.copy_with(query=None) if isinstance(a, httpx.URL) else a for a in record.args
            )
        return True


_REDACT_QUERIES = _RedactQueries()


class HttpIdentityAdmin:
    """The provider's backend API over httpx, bearer secret key, 5 s timeout.

    Invitations go through the provider instance's sliding window (spec A 8: 100 per hour),
    counted in the database by gymctl.ratelimit.take_apart so that every process shares it and
    no invitation waits for another's round trip (a failed call gives its slot back); past it,
    RateLimited is raised without calling. Lookups are not counted: the platform-admin guard
    reads metadata on every admin request and must not run dry after 100 clicks. User reads (GET
    /users/me's fallback) are paced per process in memory. A provider 429 on any call is
    RateLimited too, with Retry-After when the provider gave one.
    """

    def __init__(
        self,
        api_url: str,
        secret_key: str,
        client: httpx.Client | None = None,
        clock: Clock = default_clock,
        limit: int = INVITATIONS_PER_WINDOW,
        per: timedelta = INVITATION_WINDOW,
        timeout: float = TIMEOUT,
    ) -> None:
        self._api = api_url.rstrip("/")
        self._secret_key = secret_key
        self._client = client or http_client.new_client()
        self._clock = clock
        self._timeout = timeout
        self._limit = limit
        self._per = per
        self._user_reads = ratelimit.LocalWindow(USER_READS_PER_WINDOW, USER_READ_WINDOW)
        httpx_logger = logging.getLogger("httpx")
        if _REDACT_QUERIES not in httpx_logger.filters:
            httpx_logger.addFilter(_REDACT_QUERIES)

    def find_account(self, email: str, keys: AddressKeys) -> Account | None:
        response = self._call("GET", "/v1/users", "account lookup", params={"email_address": email})
        users = _json(response, "account lookup")
        if not isinstance(users, list):
            raise IdentityAdminError("account lookup: the provider's answer is not a list")
        held = [
            (user["id"], address["email_address"], _verified(address))
            for user in users
            for address in _addresses(user)
            if isinstance(address.get("email_address"), str)
            and storable_text(address["email_address"])
        ]
        # Folded as every lookup folds: str.lower() took 'i\u0307pek@' for 'İpek@' and missed
        # 'ipek@', which PostgreSQL's sign-up reads as that address.
        folded = keys([email, *(held_email for _, held_email, _ in held)])
        found = [
            Account(
                identity_id=identity_id,
                email=held_email,
                email_verified=verified,
            )
            for identity_id, held_email, verified in held
            if folded[held_email] == folded[email]
        ]
        # A verified holder of the address wins over a login that never proved it.
        found.sort(key=lambda account: not account.email_verified)
        return found[0] if found else None

    def create_invitation(
        self, session: Session, email: str, *, redirect_url: str, metadata: dict[str, Any]
    ) -> str:
        now = self._clock.now()
        refused = ratelimit.take_apart(
            session, INVITATION_KEY, limit=self._limit, window=self._per, now=now
        )
        if refused is not None:
            raise RateLimited(
                f"at most {self._limit} identity invitations per {_span(self._per)}",
                retry_after=refused.retry_after,
            )
        body = {
            "email_address": email,
            "redirect_url": redirect_url,
            "public_metadata": metadata,
            "notify": False,  # we send our own email, with our signed ticket
        }
        try:
            response = self._call("POST", "/v1/invitations", "invitation", json=body)
        except IdentityAdminError:
            # No invitation was made (down, refused, a 429 of its own): the budget counts the
            # invitations the provider created.
            ratelimit.give_back_apart(session, INVITATION_KEY, now=now)
            raise
        invitation = _json(response, "invitation")
        if not isinstance(invitation, dict) or not isinstance(invitation.get("id"), str):
            raise IdentityAdminError("invitation: the provider's answer has no id")
        return invitation["id"]

    def private_metadata(self, identity_id: str) -> dict[str, Any]:
        user = self._read_user(identity_id)
        metadata = user.get("private_metadata") if isinstance(user, dict) else None
        return metadata if isinstance(metadata, dict) else {}

    def user_record(self, identity_id: str) -> dict[str, Any] | None:
        wait = self._user_reads.take(self._clock.now())
        if wait is not None:
            raise RateLimited(
                f"at most {USER_READS_PER_WINDOW} user reads per {_span(USER_READ_WINDOW)}",
                retry_after=wait,
            )
        user = self._read_user(identity_id)
        if user is not None and not isinstance(user, dict):
            raise IdentityAdminError("user read: the provider's answer is not an object")
        return user

    def _read_user(self, identity_id: str) -> Any:
        """The decoded body of GET /v1/users/:id; None for an unknown user."""
        path = f"/v1/users/{quote(identity_id, safe='')}"
        response = self._call("GET", path, "user read", allow_404=True)
        if response.status_code == 404:
            return None
        return _json(response, "user read")

    def _call(
        self, method: str, path: str, what: str, *, allow_404: bool = False, **kwargs: Any
    ) -> httpx.Response:
        try:
            response = self._client.request(
                method,
                self._api + path,
                headers={"Authorization": f"Bearer {self._secret_key}"},
                timeout=self._timeout,
                **kwargs,
            )
        except httpx.HTTPError as error:
            # Not chained: the request inside the error carries the URL, and so the email.
            raise IdentityAdminError(f"{what} failed: {type(error).__name__}") from None
        if response.status_code == 429:
            raise RateLimited(
                f"{what}: the identity provider answered 429",
                retry_after=_retry_after(response.headers.get("Retry-After"), self._clock.now()),
            )
        if response.is_success or (allow_404 and response.status_code == 404):
            return response
        raise IdentityAdminError(f"{what}: the identity provider answered {response.status_code}")

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"HttpIdentityAdmin({self._api!r})"


def _json(response: httpx.Response, what: str) -> Any:
    try:
        return response.json()
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's stack
        raise IdentityAdminError(f"{what}: the identity provider's answer is not JSON") from None


def _addresses(user: Any) -> list[dict[str, Any]]:
    """The address objects of a user with a string id. A field of another type reads as
    absent, here and in `_verified`: its .get() or iteration was an AttributeError or
    TypeError, a 500 where the lookup meant "no such account"."""
    if not isinstance(user, dict) or not isinstance(user.get("id"), str) or not user["id"]:
        return []
    addresses = user.get("email_addresses")
    if not isinstance(addresses, list):
        return []
    return [a for a in addresses if isinstance(a, dict)]


def _verified(address: dict[str, Any]) -> bool:
    verification = address.get("verification")
    return isinstance(verification, dict) and verification.get("status") == "verified"


def _retry_after(value: str | None, now: datetime) -> int | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if is_decimal(value):
        return whole_number(value)  # None past a BIGINT: no delay anyone meant
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0, math.ceil((when - now).total_seconds()))


class LocalIdentityAdmin:
    """The embedded default: accounts are the users rows linked to a login (identity_id set, not
    deleted), proven when email_verified_at is set. There is no provider to invite through, and
    platform admins come from the setting GYMCTL_PLATFORM_ADMINS."""

    def __init__(
        self, session_factory: sessionmaker[Session], platform_admins: Iterable[str]
    ) -> None:
        self._session_factory = session_factory
        self._platform_admins = frozenset(platform_admins)

    def find_account(self, email: str, keys: AddressKeys) -> Account | None:
        """`same_address` in SQL: the fold `keys` names, asked of the rows themselves."""
        with self._session_factory() as session:
            # Read-only: on SQLite it must not wait for the caller's own write transaction.
            session.connection(execution_options=READ_ONLY)
            row = session.scalars(
                select(User)
                .where(
                    User.identity_id.is_not(None),
                    User.deleted_at.is_(None),
                    same_address(User.email, email),
                )
                .order_by(User.created_at, User.id)
                .limit(1)
            ).first()
            if row is None or row.identity_id is None or row.email is None:
                return None
            return Account(
                identity_id=row.identity_id,
                email=row.email,
                email_verified=row.email_verified_at is not None,
            )

    def create_invitation(
        self, session: Session, email: str, *, redirect_url: str, metadata: dict[str, Any]
    ) -> str:
        return f"inv_local_{uuid4().hex}"

    def private_metadata(self, identity_id: str) -> dict[str, Any]:
        return {"platformRole": "admin"} if identity_id in self._platform_admins else {}

    def user_record(self, identity_id: str) -> dict[str, Any] | None:
        """No provider to ask: a login's row is made by its first request."""
        return None

    def __repr__(self) -> str:
        return "LocalIdentityAdmin()"


def identity_admin_from_settings(
    settings: Settings,
    session_factory: sessionmaker[Session],
    *,
    clock: Clock = default_clock,
    client: httpx.Client | None = None,
) -> IdentityAdmin:
    """GYMCTL_IDENTITY_ADMIN: http (needs IDENTITY_API_URL and IDENTITY_SECRET_KEY), local, or
    auto (http when both are set, else local)."""
    mode = settings.identity_admin.strip().lower()
    if mode not in ("http", "local", "auto"):
        raise ConfigError(
            f"GYMCTL_IDENTITY_ADMIN: {settings.identity_admin!r} is not http, local or auto"
        )
    secret = settings.identity_secret_key.get_secret_value() if settings.identity_secret_key else ""
    configured = bool(settings.identity_api_url) and bool(secret)
    if mode == "http" and not configured:
        raise ConfigError(
            "GYMCTL_IDENTITY_ADMIN=http needs IDENTITY_API_URL and IDENTITY_SECRET_KEY"
        )
    if mode == "http" or (mode == "auto" and configured):
        assert settings.identity_api_url is not None
        return HttpIdentityAdmin(settings.identity_api_url, secret, client=client, clock=clock)
    return LocalIdentityAdmin(session_factory, settings.platform_admins)
