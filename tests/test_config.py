"""Settings: typed, from the environment; production refuses to start with one missing."""

from __future__ import annotations

import base64
import functools

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gymctl.config import ConfigError, Settings

LIVE_PK = "pk_live_" + base64.b64encode(b"clerk.gym.example$").decode()


@functools.cache
def public_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def production(**overrides):
    values = {
        "GYMCTL_ENV": "production",
        "GYMCTL_DATABASE_URL": "postgresql+psycopg://app@db/gymctl",
        "IDENTITY_JWT_KEY": public_key_pem(),
        "IDENTITY_WEBHOOK_SECRET": "whsec_c2VjcmV0",
        "IDENTITY_PUBLISHABLE_KEY": LIVE_PK,
        "INVITE_SECRET": "invite-secret-for-tests-0123456789abcdef",
        "GYMCTL_BILLING_ENCRYPTION_KEY": "k1:" + "A" * 43 + "=",
        "GYMCTL_CARD_PROVIDER_URL": "https://cards.example.test/api",
        "GYMCTL_STORAGE_SIGNING_SECRET": "storage-signing-secret-0123456789abcdef",
    }
    values.update(overrides)
    return Settings(**{k: v for k, v in values.items() if v is not None})


def test_a_complete_production_configuration_starts():
    production().check()


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        ("IDENTITY_JWT_KEY", "IDENTITY_SECRET_KEY or IDENTITY_JWT_KEY"),
        ("IDENTITY_WEBHOOK_SECRET", "IDENTITY_WEBHOOK_SECRET"),
        ("IDENTITY_PUBLISHABLE_KEY", "IDENTITY_PUBLISHABLE_KEY"),
        ("GYMCTL_DATABASE_URL", "GYMCTL_DATABASE_URL"),
        ("INVITE_SECRET", "INVITE_SECRET"),
        ("GYMCTL_BILLING_ENCRYPTION_KEY", "GYMCTL_BILLING_ENCRYPTION_KEY"),
        ("GYMCTL_CARD_PROVIDER_URL", "GYMCTL_CARD_PROVIDER_URL"),
        ("GYMCTL_STORAGE_SIGNING_SECRET", "GYMCTL_STORAGE_SIGNING_SECRET"),
    ],
)
def test_production_names_each_missing_setting(missing, named):
    with pytest.raises(ConfigError, match=named):
        production(**{missing: None}).check()


def test_production_check_lists_every_malformed_setting_at_once():
    """Issue 21: one check validates presence and format and lists all problems at once (a
    garbage key passed before and failed on first use)."""
    with pytest.raises(ConfigError) as refused:
        production(
            GYMCTL_BILLING_ENCRYPTION_KEY="garbage",
            NATIONAL_ID_ENCRYPTION_KEY="k1:c2hvcnQ=",
            IDENTITY_JWT_KEY="-----BEGIN PUBLIC KEY-----...",
            GYMCTL_CARD_PROVIDER_URL="cards.example.test",
            GYMCTL_STORAGE_URL="s3://",
            GYMCTL_STORAGE_SIGNING_SECRET="short",
            GYMCTL_SMTP_URL="mail.example.test:25",
            GYMCTL_BRIDGE_API_URL="https://gym-system.example.test/api/public",
        ).check()
    problems = refused.value.problems
    for named in (
        "GYMCTL_BILLING_ENCRYPTION_KEY: entry 1 is not of the form kid:base64key",
        "NATIONAL_ID_ENCRYPTION_KEY: key 'k1' must be 32 bytes",
        "IDENTITY_JWT_KEY is not a PEM public key",
        "GYMCTL_CARD_PROVIDER_URL must be an http(s) URL",
        "GYMCTL_STORAGE_URL: no bucket",
        "GYMCTL_STORAGE_SIGNING_SECRET must be at least 32 characters",
        "GYMCTL_SMTP_URL: unsupported scheme",
        "GYMCTL_BRIDGE_CREDENTIALS_KEY is not set",
    ):
        assert any(problem.startswith(named) for problem in problems), (named, problems)
    assert len(problems) == 8
    assert "garbage" not in str(refused.value)


def test_s3_storage_needs_no_signing_secret_in_production():
    production(
        GYMCTL_STORAGE_URL="s3://gymctl-objects?region=eu-west-1",
        GYMCTL_STORAGE_SIGNING_SECRET=None,
    ).check()


def test_a_value_that_does_not_parse_is_a_configuration_error_naming_the_setting(monkeypatch):
    from gymctl.config import get_settings

    monkeypatch.setenv("GYMCTL_ENV", "prod")
    get_settings.cache_clear()
    try:
        with pytest.raises(ConfigError, match="GYMCTL_ENV: Input should be 'production'"):
            get_settings()
    finally:
        get_settings.cache_clear()


def test_production_without_a_pem_key_needs_the_key_set_url():
    settings = production(IDENTITY_JWT_KEY=None, IDENTITY_SECRET_KEY="sk_live_x")
    with pytest.raises(ConfigError, match="IDENTITY_API_URL"):
        settings.check()
    production(
        IDENTITY_JWT_KEY=None,
        IDENTITY_SECRET_KEY="sk_live_x",
        IDENTITY_API_URL="https://identity.example",
    ).check()


def test_production_refuses_sqlite_and_the_test_auth_bypass():
    with pytest.raises(ConfigError, match="PostgreSQL"):
        production(GYMCTL_DATABASE_URL="sqlite:///x.db").check()
    with pytest.raises(ConfigError, match="TEST_AUTH_BYPASS"):
        production(TEST_AUTH_BYPASS="true").check()


def test_the_app_does_not_start_in_production_with_a_setting_missing():
    from webhooks.app import create_app

    with pytest.raises(ConfigError, match="IDENTITY_WEBHOOK_SECRET"):
        create_app(production(IDENTITY_WEBHOOK_SECRET=None))


def test_development_defaults_to_the_embedded_sqlite_under_home(tmp_path):
    settings = Settings(GYMCTL_ENV="development", GYMCTL_HOME=str(tmp_path))
    settings.check()
    assert settings.resolved_database_url == f"sqlite:///{tmp_path / 'gymctl.db'}"
    assert settings.resolved_event_sink == (tmp_path / "events.jsonl").as_uri()


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("IDENTITY_AUTHORIZED_PARTIES", "https://a.example, https://b.example")
    monkeypatch.setenv("TEST_AUTH_BYPASS", "1")
    settings = Settings()
    assert settings.identity_authorized_parties == ["https://a.example", "https://b.example"]
    assert settings.test_auth_bypass is True


def test_redacted_settings_never_show_a_secret():
    settings = production(IDENTITY_SECRET_KEY="sk_live_supersecret", INVITE_SECRET="invite-s3cret")
    shown = settings.redacted()
    assert shown["IDENTITY_SECRET_KEY"] == "********"
    assert shown["GYMCTL_ENV"] == "production"
    assert "supersecret" not in repr(shown)
    assert "s3cret" not in repr(shown)
    assert shown["IDENTITY_JWT_KEY"] == "********"


def test_the_publishable_key_names_the_frontend_api():
    assert production().identity_frontend_api == "clerk.gym.example"


@pytest.mark.parametrize(
    "key",
    [
        "pk_live_",
        "sk_live_" + base64.b64encode(b"clerk.gym.example$").decode(),
        "pk_live_" + base64.b64encode(b"clerk.gym.example").decode(),  # no trailing $
        "pk_prod_" + base64.b64encode(b"clerk.gym.example$").decode(),
        "pk_live_" + base64.b64encode(b"bad host/$").decode(),
        "pk_live_***",
    ],
)
def test_a_malformed_publishable_key_refuses_to_start_in_any_environment(key):
    """Spec A 5.4: IDENTITY_PUBLISHABLE_KEY is required on the API; a malformed one is a
    configuration error, also outside production."""
    with pytest.raises(ConfigError, match="IDENTITY_PUBLISHABLE_KEY"):
        production(IDENTITY_PUBLISHABLE_KEY=key).check()
    with pytest.raises(ConfigError, match="IDENTITY_PUBLISHABLE_KEY"):
        Settings(GYMCTL_ENV="development", IDENTITY_PUBLISHABLE_KEY=key).check()


def test_publishable_and_secret_keys_of_different_instances_refuse_to_start():
    with pytest.raises(ConfigError, match="different instances"):
        production(IDENTITY_SECRET_KEY="sk_test_abc").check()
    production(IDENTITY_SECRET_KEY="sk_live_abc").check()
