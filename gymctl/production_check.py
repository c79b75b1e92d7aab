"""The one production check: every setting production needs, present and well formed, so a
start refuses what would otherwise fail later (at worker boot, on every billing tick, on the
first national id). `Settings.check()` runs it; `serve`, `daemons run`, `db upgrade`, the API's
app factory and `gymctl config check` call that.

Each rule reuses the parser that later reads the setting (the keyring, the storage and event
sink URLs, the SMTP URL, the PEM key, the identity webhook's secret), so the check and the use
cannot disagree. Problems name the setting and never echo a secret's value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gymctl.errors import ConfigError

if TYPE_CHECKING:
    from gymctl.config import Settings

MIN_SECRET_CHARS = 32  # HS256/HMAC keys: at least 256 bits of url-safe text


def production_problems(settings: Settings) -> list[str]:
    """Every problem found, in the order an operator reads a settings file."""
    problems: list[str] = []
    _required(settings, problems)
    _formats(settings, problems)
    return problems


def _required(settings: Settings, problems: list[str]) -> None:
    def need(present: object, message: str) -> None:
        if not present:
            problems.append(message)

    need(settings.database_url, "GYMCTL_DATABASE_URL is not set (PostgreSQL)")
    need(
        settings.identity_secret_key or settings.identity_jwt_key,
        "IDENTITY_SECRET_KEY or IDENTITY_JWT_KEY is not set",
    )
    need(
        settings.identity_jwt_key or settings.identity_api_url,
        "IDENTITY_API_URL is not set (the key set is fetched there without IDENTITY_JWT_KEY)",
    )
    need(settings.identity_publishable_key, "IDENTITY_PUBLISHABLE_KEY is not set (spec A 5.4)")
    need(settings.identity_webhook_secret, "IDENTITY_WEBHOOK_SECRET is not set")
    need(settings.invite_secret, "INVITE_SECRET is not set")
    need(settings.billing_encryption_key, "GYMCTL_BILLING_ENCRYPTION_KEY is not set")
    need(
        settings.card_provider_url,
        "GYMCTL_CARD_PROVIDER_URL is not set (production takes no sandbox; billing jobs need it)",
    )
    signs_links = not settings.resolved_storage_url.startswith("s3:") or bool(
        settings.public_images_storage_url
    )
    need(
        settings.storage_signing_secret or not signs_links,
        "GYMCTL_STORAGE_SIGNING_SECRET is not set (the folder store signs its links with it)",
    )
    need(
        settings.bridge_credentials_key or not settings.bridge_api_url,
        "GYMCTL_BRIDGE_CREDENTIALS_KEY is not set (GYMCTL_BRIDGE_API_URL enables the bridge)",
    )
    if settings.test_auth_bypass:
        problems.append("TEST_AUTH_BYPASS is not allowed in production")


def _formats(settings: Settings, problems: list[str]) -> None:
    from gymctl.crypto import Keyring
    from gymctl.providers.event_sink import sink_from_url
    from gymctl.providers.mail import SmtpMailer
    from gymctl.providers.storage import storage_from_url

    def secret(value: object) -> str | None:
        return value.get_secret_value() if value is not None else None  # type: ignore[attr-defined]

    def parsed(check: Callable[[], object]) -> None:
        try:
            check()
        except ConfigError as error:
            problems.extend(error.problems)

    if settings.database_url and not settings.database_url.startswith("postgresql"):
        problems.append("GYMCTL_DATABASE_URL must be PostgreSQL (postgresql+psycopg://...)")
    for name, value in (
        ("INVITE_SECRET", secret(settings.invite_secret)),
        ("GYMCTL_STORAGE_SIGNING_SECRET", secret(settings.storage_signing_secret)),
    ):
        if value is not None and len(value) < MIN_SECRET_CHARS:
            problems.append(
                f"{name} must be at least {MIN_SECRET_CHARS} characters "
                f"(`gymctl keys generate` makes one)"
            )
    for name, value in (
        ("GYMCTL_BILLING_ENCRYPTION_KEY", secret(settings.billing_encryption_key)),
        ("NATIONAL_ID_ENCRYPTION_KEY", secret(settings.national_id_encryption_key)),
        ("GYMCTL_BRIDGE_CREDENTIALS_KEY", secret(settings.bridge_credentials_key)),
    ):
        if value is not None:
            parsed(lambda value=value, name=name: Keyring.parse(value, setting=name))
    for name, url in (
        ("GYMCTL_CARD_PROVIDER_URL", settings.card_provider_url),
        ("IDENTITY_API_URL", settings.identity_api_url),
        ("GYMCTL_BRIDGE_API_URL", settings.bridge_api_url),
        ("GYMCTL_PUBLIC_URL", settings.public_url),
        ("FRONTEND_URL", settings.frontend_url),
    ):
        if url and not _is_http_url(url):
            problems.append(f"{name} must be an http(s) URL with a host")
    webhook_secret = secret(settings.identity_webhook_secret)
    if webhook_secret is not None and not _is_webhook_secret(webhook_secret):
        # The webhook's own parse: since s48 such a secret answers 503 to every delivery.
        problems.append("IDENTITY_WEBHOOK_SECRET is not whsec_ followed by base64")
    jwt_key = secret(settings.identity_jwt_key)
    if jwt_key is not None and not _is_public_key(jwt_key):
        problems.append("IDENTITY_JWT_KEY is not a PEM public key (-----BEGIN PUBLIC KEY-----)")
    parsed(
        lambda: storage_from_url(
            settings.resolved_storage_url, url_base=settings.public_url, secret=b"check"
        )
    )
    parsed(lambda: sink_from_url(settings.resolved_event_sink))
    smtp = secret(settings.smtp_url)
    if smtp:
        parsed(lambda: SmtpMailer(smtp, settings.mail_from))
    if settings.identity_admin.strip().lower() not in ("http", "local", "auto"):
        problems.append("GYMCTL_IDENTITY_ADMIN must be http, local or auto")


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _is_webhook_secret(value: str) -> bool:
    from gymctl.identity.webhook_secret import decode_secret

    try:
        decode_secret(value)
    except ValueError:
        return False
    return True


def _is_public_key(pem: str) -> bool:
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        load_pem_public_key(pem.encode())
    except ValueError:
        return False
    return True
