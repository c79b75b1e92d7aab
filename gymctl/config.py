"""Every setting, read once from the environment (and an optional `.env`).

Names follow the specs where they give one (IDENTITY_*, INVITE_SECRET, ...); the toolkit's own
settings start with GYMCTL_. Defaults make up the embedded default: SQLite and files under
GYMCTL_HOME, so `gymctl quickstart` needs no configuration at all.
"""

from __future__ import annotations

import base64
import functools
import re
import secrets
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gymctl.errors import ConfigError

PUBLISHABLE_KEY = re.compile(r"pk_(test|live)_([A-Za-z0-9+/]+={0,2})")
HOST = re.compile(r"[A-Za-z0-9.-]+(?::[0-9]{1,5})?")
VIDEO_SCORE_THRESHOLD = 0.6  # a candidate scored below it is never shown


class Environment(StrEnum):
    production = "production"
    development = "development"
    test = "test"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    env: Environment = Field(Environment.development, alias="GYMCTL_ENV")
    home: Path = Field(Path(".gymctl"), alias="GYMCTL_HOME")
    database_url: str | None = Field(None, alias="GYMCTL_DATABASE_URL")
    event_sink: str | None = Field(
        None,
        alias="GYMCTL_EVENT_SINK",
        description="file:///events.jsonl or an http(s) capture endpoint; default: GYMCTL_HOME",
    )
    log_level: str = Field("INFO", alias="GYMCTL_LOG_LEVEL")

    identity_secret_key: SecretStr | None = Field(None, alias="IDENTITY_SECRET_KEY")
    identity_jwt_key: SecretStr | None = Field(None, alias="IDENTITY_JWT_KEY")
    identity_publishable_key: str | None = Field(None, alias="IDENTITY_PUBLISHABLE_KEY")
    identity_webhook_secret: SecretStr | None = Field(None, alias="IDENTITY_WEBHOOK_SECRET")
    identity_api_url: str | None = Field(None, alias="IDENTITY_API_URL")
    identity_authorized_parties: Annotated[list[str], NoDecode] = Field(
        default_factory=list, alias="IDENTITY_AUTHORIZED_PARTIES"
    )
    identity_issuer: str | None = Field(
        None, alias="IDENTITY_ISSUER", description="when set, a session token's iss must equal it"
    )
    identity_audiences: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="IDENTITY_AUDIENCE",
        description="comma-separated; when set, a session token's aud must name one of them",
    )

    invite_secret: SecretStr | None = Field(None, alias="INVITE_SECRET")
    national_id_encryption_key: SecretStr | None = Field(None, alias="NATIONAL_ID_ENCRYPTION_KEY")
    test_auth_bypass: bool = Field(False, alias="TEST_AUTH_BYPASS")
    test_seed_secret: SecretStr | None = Field(None, alias="TEST_SEED_SECRET")
    frontend_url: str | None = Field(None, alias="FRONTEND_URL")
    minisite_preview_server_secret: SecretStr | None = Field(
        None, alias="MINISITE_PREVIEW_SERVER_SECRET"
    )
    minisite_domain: str = Field(
        "sites.localhost",
        alias="GYMCTL_MINISITE_DOMAIN",
        description="a gym's minisite answers at <slug>.<this domain> (GET /minisites/resolve)",
    )
    sentry_dsn: SecretStr | None = Field(None, alias="SENTRY_DSN")

    smtp_url: SecretStr | None = Field(
        None, alias="GYMCTL_SMTP_URL", description="smtp://user:pass@host:port?starttls=true"
    )
    mail_from: str = Field("gymctl <no-reply@gymctl.localhost>", alias="GYMCTL_MAIL_FROM")
    identity_admin: str = Field(
        "auto",
        alias="GYMCTL_IDENTITY_ADMIN",
        description="provider admin API: http (IDENTITY_API_URL), local, or auto",
    )
    platform_admins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="GYMCTL_PLATFORM_ADMINS",
        description="local identity admin only: identity ids whose platformRole is admin",
    )
    invitation_ttl_days: int = Field(14, alias="GYMCTL_INVITATION_TTL_DAYS")

    storage_url: str | None = Field(
        None, alias="GYMCTL_STORAGE_URL", description="s3://bucket?endpoint_url=... or file:///dir"
    )
    storage_signing_secret: SecretStr | None = Field(None, alias="GYMCTL_STORAGE_SIGNING_SECRET")
    public_url: str = Field("http://127.0.0.1:8000", alias="GYMCTL_PUBLIC_URL")
    proxy_hops: int = Field(
        0,
        ge=0,
        le=5,
        alias="GYMCTL_PROXY_HOPS",
        description="proxies in front of the API whose X-Forwarded-For is trusted (0: none)",
    )
    forecast_request_seconds: float = Field(
        20.0,
        ge=0,
        le=25,
        alias="GYMCTL_FORECAST_REQUEST_SECONDS",
        description="how long the synchronous forecast route may run before it refers to the "
        "queued one (below gunicorn's 30 s worker timeout)",
    )
    max_brand_asset_bytes: int = Field(16 * 1024 * 1024, alias="MAX_BRAND_ASSET_BYTES")
    card_provider_url: str | None = Field(
        None,
        alias="GYMCTL_CARD_PROVIDER_URL",
        description="the card provider's API base URL; unset: the in-process sandbox",
    )
    card_provider_timeout: float = Field(30.0, alias="GYMCTL_CARD_PROVIDER_TIMEOUT")

    # Bridge to the external gym system (spec B 4.6, 5, 8). Unset URL: the bridge is disabled.
    bridge_api_url: str | None = Field(
        None, alias="GYMCTL_BRIDGE_API_URL", description="public API base, e.g. .../api/public"
    )
    bridge_credentials_key: SecretStr | None = Field(
        None,
        alias="GYMCTL_BRIDGE_CREDENTIALS_KEY",
        description="kid:base64key[,kid:key...]: encrypts the organizations' api-keys",
    )
    bridge_rate: float = Field(
        2.0, gt=0, alias="GYMCTL_BRIDGE_RATE", description="requests per second per organization"
    )

    # Billing (spec B 1, 6, 8).
    billing_encryption_key: SecretStr | None = Field(
        None,
        alias="GYMCTL_BILLING_ENCRYPTION_KEY",
        description="kid:base64key[,kid:key...]: saved cards and provider credentials",
    )
    heartbeat_member_billing_catchup_url: str | None = Field(
        None, alias="GYMCTL_HEARTBEAT_MEMBER_BILLING_CATCHUP_URL"
    )
    heartbeat_member_recurring_charge_url: str | None = Field(
        None, alias="GYMCTL_HEARTBEAT_MEMBER_RECURRING_CHARGE_URL"
    )

    # Movement library (spec B 4.5, 8). Unset keys leave the embedded default's local model,
    # and make video search, the LLM and image generation answer "disabled".
    embeddings_url: str | None = Field(
        None, alias="GYMCTL_EMBEDDINGS_URL", description="OpenAI-compatible base URL (.../v1)"
    )
    embeddings_key: SecretStr | None = Field(None, alias="GYMCTL_EMBEDDINGS_KEY")
    embeddings_model: str = Field("text-embedding-3-small", alias="GYMCTL_EMBEDDINGS_MODEL")
    duplicate_embedding_threshold: float = Field(0.92, alias="DUPLICATE_EMBEDDING_THRESHOLD")
    duplicate_thresholds: dict[str, float] = Field(
        default_factory=dict,
        alias="GYMCTL_DUPLICATE_THRESHOLDS",
        description='per embedding model, JSON: {"model": 0.9}',
    )
    video_search_url: str = Field(
        "https://www.googleapis.com/youtube/v3", alias="GYMCTL_VIDEO_SEARCH_URL"
    )
    video_search_key: SecretStr | None = Field(None, alias="GYMCTL_VIDEO_SEARCH_KEY")
    video_daily_quota: int = Field(10_000, alias="GYMCTL_VIDEO_DAILY_QUOTA")
    video_max_searches: int = Field(90, alias="GYMCTL_VIDEO_MAX_SEARCHES")
    video_queries_per_movement: int = Field(1, ge=1, le=3, alias="GYMCTL_VIDEO_QUERIES")
    video_trusted_channels: Annotated[list[str], NoDecode] = Field(
        default_factory=list, alias="GYMCTL_VIDEO_TRUSTED_CHANNELS"
    )
    video_score_threshold: float = Field(
        VIDEO_SCORE_THRESHOLD, alias="GYMCTL_VIDEO_SCORE_THRESHOLD"
    )
    llm_url: str = Field("https://api.openai.com/v1", alias="GYMCTL_LLM_URL")
    llm_key: SecretStr | None = Field(None, alias="GYMCTL_LLM_KEY")
    llm_model: str = Field("gpt-4o-mini", alias="GYMCTL_LLM_MODEL")
    llm_usd_per_mtok_in: float = Field(0.15, alias="GYMCTL_LLM_USD_PER_MTOK_IN")
    llm_usd_per_mtok_out: float = Field(0.60, alias="GYMCTL_LLM_USD_PER_MTOK_OUT")
    image_gen_url: str = Field("https://api.openai.com/v1", alias="GYMCTL_IMAGE_GEN_URL")
    image_gen_key: SecretStr | None = Field(None, alias="GYMCTL_IMAGE_GEN_KEY")
    image_gen_model: str = Field("gpt-image-1", alias="GYMCTL_IMAGE_GEN_MODEL")
    public_images_storage_url: str | None = Field(
        None,
        alias="GYMCTL_PUBLIC_IMAGES_STORAGE_URL",
        description="the public images bucket; default: GYMCTL_STORAGE_URL",
    )
    public_images_base_url: str | None = Field(None, alias="GYMCTL_PUBLIC_IMAGES_BASE_URL")

    # Branded apps and their release pipeline (spec A 2.12-2.14, 5.5).
    multi_org_app_id: str = Field(
        "com.gymctl.app",
        alias="GYMCTL_MULTI_ORG_APP_ID",
        description="the one native application ID that acts as a multi-organization container",
    )
    branded_app_id_prefix: str = Field(
        "com.gymctl.gym",
        alias="GYMCTL_BRANDED_APP_ID_PREFIX",
        description="generated bundle IDs / package names are <prefix>.<link slug>",
    )
    branded_app_scheme_brand: str = Field(
        "gymctl",
        alias="GYMCTL_BRANDED_APP_SCHEME_BRAND",
        description="dedicated binaries register only the URL scheme <brand>-<slug>://",
    )
    release_ci_issuer: str = Field(
        "https://token.actions.githubusercontent.com", alias="GYMCTL_RELEASE_CI_ISSUER"
    )
    release_ci_jwks_url: str = Field(
        "https://token.actions.githubusercontent.com/.well-known/jwks",
        alias="GYMCTL_RELEASE_CI_JWKS_URL",
    )
    release_ci_audience: str = Field("gymctl-releases", alias="GYMCTL_RELEASE_CI_AUDIENCE")
    release_ci_repository: str | None = Field(
        None, alias="GYMCTL_RELEASE_CI_REPOSITORY", description="owner/name of the mobile repo"
    )
    release_ci_repository_id: str | None = Field(None, alias="GYMCTL_RELEASE_CI_REPOSITORY_ID")
    release_ci_workflow: str | None = Field(None, alias="GYMCTL_RELEASE_CI_WORKFLOW")
    release_ci_workflow_ref: str | None = Field(
        None,
        alias="GYMCTL_RELEASE_CI_WORKFLOW_REF",
        description="owner/name/.github/workflows/<file>@<ref>, matched exactly",
    )
    release_ci_ref: str = Field("refs/heads/main", alias="GYMCTL_RELEASE_CI_REF")
    release_ci_event: str = Field("workflow_dispatch", alias="GYMCTL_RELEASE_CI_EVENT")

    @field_validator(
        "identity_authorized_parties",
        "identity_audiences",
        "platform_admins",
        "video_trusted_channels",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @property
    def is_production(self) -> bool:
        return self.env is Environment.production

    @property
    def resolved_database_url(self) -> str:
        """The configured URL, or the embedded default's SQLite file under GYMCTL_HOME."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'gymctl.db').resolve()}"

    @property
    def resolved_storage_url(self) -> str:
        """GYMCTL_STORAGE_URL, or the embedded default's folder under GYMCTL_HOME."""
        return self.storage_url or (self.home / "objects").resolve().as_uri()

    @property
    def mailbox_path(self) -> Path:
        """Where the embedded default delivers email: one .eml file per message."""
        return self.home / "mailbox"

    @property
    def dev_signing_key_path(self) -> Path:
        """Where `gymctl quickstart` keeps the local identity signing key (embedded default)."""
        return self.home / "identity" / "signing_key.pem"

    @property
    def identity_public_key_pem(self) -> str | None:
        """IDENTITY_JWT_KEY, or outside production the quick start's local public key."""
        if self.identity_jwt_key is not None:
            return self.identity_jwt_key.get_secret_value()
        public = self.dev_signing_key_path.with_name("public_key.pem")
        if not self.is_production and public.exists():
            return public.read_text()
        return None

    @property
    def resolved_event_sink(self) -> str:
        return self.event_sink or (self.home / "events.jsonl").resolve().as_uri()

    def home_secret(self, name: str, configured: SecretStr | None) -> bytes:
        """`configured`, or outside production a random secret made once under GYMCTL_HOME, so
        a fresh checkout runs; production refuses (the caller names the setting)."""
        if configured is not None:
            return configured.get_secret_value().encode()
        if self.is_production:
            raise ConfigError(f"{name} is not set")
        path = self.home / "secrets" / name.lower()
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(48))
            path.chmod(0o600)
        return path.read_text().strip().encode()

    @property
    def identity_frontend_api(self) -> str | None:
        """The provider's frontend API host named by IDENTITY_PUBLISHABLE_KEY
        (`pk_test_`/`pk_live_` + base64 of `<host>$`); None when the key is unset."""
        key = self.identity_publishable_key
        if not key:
            return None
        match = PUBLISHABLE_KEY.fullmatch(key)
        try:
            decoded = (
                base64.b64decode(match.group(2) + "==", validate=True).decode() if match else ""
            )
        except (ValueError, UnicodeDecodeError):
            decoded = ""
        if not decoded.endswith("$") or not HOST.fullmatch(decoded[:-1]):
            raise ConfigError(
                "IDENTITY_PUBLISHABLE_KEY must be pk_test_ or pk_live_ followed by the base64 of "
                "the provider's frontend API host and '$'"
            )
        return decoded[:-1]

    def _check_identity_keys(self) -> None:
        """A malformed publishable key, or keys of two instances (live and test), never start."""
        self.identity_frontend_api  # noqa: B018 (raises ConfigError when malformed)
        secret = self.identity_secret_key.get_secret_value() if self.identity_secret_key else ""
        publishable = self.identity_publishable_key or ""
        instances = secret.startswith(("sk_live_", "sk_test_")) and publishable
        if instances and secret[3:7] != publishable[3:7]:
            raise ConfigError(
                "IDENTITY_PUBLISHABLE_KEY and IDENTITY_SECRET_KEY belong to different "
                "instances (live and test)"
            )

    def check(self) -> None:
        """Refuse to start production with any setting missing or malformed, listing them all
        (gymctl/production_check.py)."""
        self._check_identity_keys()
        if not self.is_production:
            return
        from gymctl.production_check import production_problems

        problems = production_problems(self)
        if problems:
            raise ConfigError(
                f"{len(problems)} production setting problem(s): " + "; ".join(problems), problems
            )

    def redacted(self) -> dict[str, Any]:
        """Every setting by its environment name, secrets shown only as set or unset."""
        shown: dict[str, Any] = {}
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = "********"
            elif isinstance(value, StrEnum | Path):
                value = str(value)
            shown[field.alias or name] = value
        return shown


@functools.cache
def get_settings() -> Settings:
    """The settings of this process, read once. A value that does not parse is a ConfigError
    naming each setting (never echoing a value: it may be a secret)."""
    try:
        return Settings()
    except ValidationError as error:
        problems = [
            f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"
            for item in error.errors(include_url=False, include_input=False)
        ]
        raise ConfigError("invalid setting(s): " + "; ".join(problems), problems) from None
