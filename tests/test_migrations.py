"""The migration journal is authoritative: it upgrades from empty and matches the models."""

from __future__ import annotations

import pytest

from gymctl import migrate


@pytest.mark.embedded
def test_upgrade_from_empty_reaches_head_and_alembic_check_finds_no_drift(engine):
    url = engine.url.render_as_string(hide_password=False)
    assert migrate.current(url) == migrate.head()
    migrate.check(url)


def test_history_lists_the_foundation_revision():
    revisions = [rev for rev, _down, _doc in migrate.history()]
    assert "0001" in revisions


def test_access_revision_upgrades_a_populated_database(tmp_path):
    """0002 adds NOT NULL columns with server defaults and marks already-linked logins proven."""
    from sqlalchemy import text

    from gymctl.db import get_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0001")
    with get_engine(url).begin() as connection:
        connection.execute(
            text(
                "INSERT INTO users (id, identity_id, email, created_at, updated_at) VALUES "
                "('00000000000000000000000000000001', 'user_old', 'old@example.test', "
                "'2026-01-01 00:00:00', '2026-01-01 00:00:00'),"
                "('00000000000000000000000000000002', NULL, 'gym@example.test', "
                "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO organizations (id, name, slug, status, created_at) VALUES "
                "('00000000000000000000000000000003', 'Old Gym', 'old-gym', 'active', "
                "'2026-01-01 00:00:00')"
            )
        )
    migrate.upgrade(url)
    with get_engine(url).connect() as connection:
        users = connection.execute(
            text(
                "SELECT identity_id, email_verified_at IS NOT NULL, signup_origin FROM users "
                "ORDER BY id"
            )
        ).all()
        gym = connection.execute(text("SELECT tier, join_enabled FROM organizations")).one()
    assert users == [("user_old", 1, "self"), (None, 0, "self")]
    assert tuple(gym) == ("starter", 1)


def test_h20a_moves_each_national_id_to_the_membership_of_the_organization_that_stored_it(
    tmp_path, monkeypatch
):
    """Issue 20: the id leaves the shared user row. It is re-encrypted for the membership of the
    organization of the newest user.national_id_set audit row; one no audit row attributes is
    dropped rather than handed to a guessed organization."""
    from sqlalchemy import text

    from gymctl.config import get_settings
    from gymctl.crypto import generate_key_setting, national_id_cipher
    from gymctl.db import get_engine

    monkeypatch.setenv("NATIONAL_ID_ENCRYPTION_KEY", generate_key_setting())
    get_settings.cache_clear()
    cipher = national_id_cipher(get_settings())
    person, stray, gym_a, gym_b = (f"{n:032x}" for n in (1, 2, 3, 4))
    at = "'2026-01-01 00:00:00'"
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0010")
    with get_engine(url).begin() as connection:
        for user_id in (person, stray):
            ciphertext = cipher.encrypt(
                "PT-1234-5678", table="users", column="national_id", row_id=str(uuid(user_id))
            )
            connection.execute(
                text(
                    "INSERT INTO users (id, email, national_id_ciphertext, created_at, updated_at)"
                    f" VALUES (:id, :id || '@example.test', :c, {at}, {at})"
                ),
                {"id": user_id, "c": ciphertext},
            )
        for n, gym in enumerate((gym_a, gym_b)):
            connection.execute(
                text(
                    "INSERT INTO organizations (id, name, slug, status, created_at) VALUES "
                    f"(:id, :id, :id, 'active', {at})"
                ),
                {"id": gym},
            )
            connection.execute(
                text(
                    "INSERT INTO memberships (id, organization_id, user_id, role, status, "
                    f"invitation_held, created_at, updated_at) VALUES (:id, :gym, :user, "
                    f"'member', 'active', 0, {at}, {at})"
                ),
                {"id": f"{10 + n:032x}", "gym": gym, "user": person},
            )
        connection.execute(
            text(
                "INSERT INTO audit_log (id, at, action, organization_id, target_type, target_id, "
                f"data) VALUES (:id, {at}, 'user.national_id_set', :gym, 'user', :target, '{{}}')"
            ),
            {"id": f"{20:032x}", "gym": gym_b, "target": str(uuid(person))},
        )

    migrate.upgrade(url)

    with get_engine(url).connect() as connection:
        held = dict(
            connection.execute(
                text("SELECT organization_id, national_id_ciphertext FROM memberships")
            ).all()
        )
        user_columns = [row[1] for row in connection.execute(text("PRAGMA table_info(users)"))]
    held = {key.replace("-", ""): value for key, value in held.items()}
    assert held[gym_a] is None
    assert (
        cipher.decrypt(
            held[gym_b], table="memberships", column="national_id", row_id=str(uuid(f"{11:032x}"))
        )
        == "PT-1234-5678"
    )
    assert "national_id_ciphertext" not in user_columns


def uuid(hex32: str):
    import uuid as uuid_module

    return uuid_module.UUID(hex32)


def test_s30_keeps_the_first_gym_active_on_a_shared_external_account_and_errs_the_later(
    tmp_path,
):
    """Two gyms active on one external account (the same key pasted twice) before the rule:
    the upgrade keeps the one connected first, errs the later one with the cause, leaves a
    gym on another account alone, and the index then refuses a second active gym."""
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    from gymctl.db import get_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0013_s30_subscriptions_by_user")
    gyms = [f"{n:032x}" for n in (1, 2, 3)]
    rows = [  # (gym, its connection, account, connected at)
        (gyms[0], f"{11:032x}", "777", "2026-02-01 00:00:00.000000"),
        (gyms[1], f"{12:032x}", "777", "2026-01-01 00:00:00.000000"),  # connected first
        (gyms[2], f"{13:032x}", "888", "2026-03-01 00:00:00.000000"),
    ]
    with get_engine(url).begin() as connection:
        for gym, connection_id, account, at in rows:
            connection.execute(
                text(
                    "INSERT INTO organizations (id, name, slug, status, created_at) VALUES "
                    "(:id, :id, :id, 'active', :at)"
                ),
                {"id": gym, "at": at},
            )
            connection.execute(
                text(
                    "INSERT INTO integration_connections (id, organization_id, provider, status, "
                    "external_account_id, connected_at, last_run, created_at, updated_at) VALUES "
                    "(:id, :gym, 'external_gym', 'active', :account, :at, '{}', :at, :at)"
                ),
                {"id": connection_id, "gym": gym, "account": account, "at": at},
            )

    migrate.upgrade(url)

    engine = get_engine(url)
    with engine.connect() as connection:
        states = dict(
            connection.execute(
                text(
                    "SELECT organization_id, status || ':' || coalesce(last_error, '') "
                    "FROM integration_connections"
                )
            ).all()
        )
    assert states[gyms[1]] == "active:"
    assert states[gyms[2]] == "active:"
    assert states[gyms[0]].startswith("error:that external account is connected to another gym")
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(text("UPDATE integration_connections SET status = 'active'"))
