"""Settings: typed, from the environment; production refuses to start with one missing."""

from __future__ import annotations

import pytest

from gymctl.config import ConfigError, Settings


def production(**overrides):
    values = {
        "GYMCTL_ENV": "production",
        "GYMCTL_DATABASE_URL": "postgresql+psycopg://app@db/gymctl",
        "IDENTITY_JWT_KEY": "-----BEGIN PUBLIC KEY-----...",
        "IDENTITY_WEBHOOK_SECRET": "whsec_c2VjcmV0",
        "INVITE_SECRET": "invite-secret-for-tests-0123456789abcdef",
        "GYMCTL_BILLING_ENCRYPTION_KEY": "k1:" + "A" * 43 + "=",
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
        ("GYMCTL_DATABASE_URL", "GYMCTL_DATABASE_URL"),
        ("INVITE_SECRET", "INVITE_SECRET"),
        ("GYMCTL_BILLING_ENCRYPTION_KEY", "GYMCTL_BILLING_ENCRYPTION_KEY"),
    ],
)
def test_production_names_each_missing_setting(missing, named):
    with pytest.raises(ConfigError, match=named):
        production(**{missing: None}).check()


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
