"""Operators' access commands on the embedded default, end to end in a subprocess."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)


def test_members_import_then_mark_email_verified_and_invitations(home_env, tmp_path):  # noqa: F811
    gymctl(home_env, "quickstart", "--json")
    csv = tmp_path / "members.csv"
    csv.write_text("email,name\nnew.one@example.test,New One\ndana@demo-gym.example,Dana\n")
    imported = json.loads(
        gymctl(home_env, "members", "import", "demo-gym", str(csv), "--json").stdout
    )
    assert imported["members"]["created"] == ["new.one@example.test"]
    assert imported["members"]["existing"] == ["dana@demo-gym.example"]

    marked = json.loads(
        gymctl(
            home_env,
            "users",
            "mark-email-verified",
            "user_demo_member_1",
            "--operator",
            "user_demo_owner",
            "--json",
        ).stdout
    )
    assert marked["changed"] is False  # seeded people are proven already
    trail = json.loads(
        gymctl(home_env, "users", "ownership-trail", "user_demo_member_1", "--json").stdout
    )
    assert trail["user"]["email"] == "dana@demo-gym.example"

    granted = json.loads(
        gymctl(home_env, "invitations", "owner-grant", "founder@example.test", "--json").stdout
    )
    assert (granted["role"], granted["status"]) == ("owner", "pending")
    listed = json.loads(gymctl(home_env, "invitations", "list", "demo-gym", "--json").stdout)
    assert [i["email"] for i in listed] == ["new.coach@demo-gym.example"]


def test_unknown_organization_is_a_coded_refusal(home_env, tmp_path):  # noqa: F811
    csv = tmp_path / "members.csv"
    csv.write_text("email\nx@example.test\n")
    gymctl(home_env, "db", "upgrade")
    result = gymctl(home_env, "members", "import", "nowhere", str(csv), check=False)
    assert result.returncode == 1
    assert "organization_not_found" in result.stderr


def test_an_unreadable_roster_is_import_invalid_not_a_crash(home_env, tmp_path):  # noqa: F811
    """As over HTTP: not UTF-8, or a field past the csv module's limit, refuses the file."""
    gymctl(home_env, "db", "upgrade")
    for name, content in [
        ("latin1.csv", b"email\n\xe9@example.test\n"),
        ("huge.csv", b"email,name\na@example.test," + b"n" * 131_073 + b"\n"),
    ]:
        csv = tmp_path / name
        csv.write_bytes(content)
        result = gymctl(home_env, "members", "import", "demo-gym", str(csv), check=False)
        assert (result.returncode, "import_invalid" in result.stderr) == (1, True), result.stderr


def test_join_enabled_switch_from_the_cli_holds_staff_to_the_matrix(home_env):  # noqa: F811
    gymctl(home_env, "quickstart", "--json")
    off = json.loads(
        gymctl(home_env, "members", "join-enabled", "demo-gym", "off", "--json").stdout
    )
    assert off == {"organization": "demo-gym", "joinEnabled": False}
    refused = gymctl(
        home_env,
        "members",
        "join-enabled",
        "demo-gym",
        "on",
        "--staff",
        "user_demo_coach",
        check=False,
    )
    assert refused.returncode == 1
    assert "permission_denied" in refused.stderr
    on = json.loads(gymctl(home_env, "members", "join-enabled", "demo-gym", "on", "--json").stdout)
    assert on["joinEnabled"] is True


def audit_rows(home_env, action: str) -> list[tuple]:  # noqa: F811
    """(actor identity subject, data) of each audit row of `action`, from the SQLite database."""
    database = Path(home_env["GYMCTL_HOME"]) / "gymctl.db"
    with sqlite3.connect(database) as connection:
        return connection.execute(
            "SELECT u.identity_id, a.data FROM audit_log a LEFT JOIN users u"
            " ON u.id = a.actor_user_id WHERE a.action = ?",
            (action,),
        ).fetchall()


def other_gym_owner(home_env) -> str:  # noqa: F811
    """A second gym and its owner, written straight into the quick start's SQLite database: an
    owner, but of no membership in demo-gym. Returns the owner's identity subject."""
    user, gym = uuid.uuid4().hex, uuid.uuid4().hex
    at = "2026-01-01 00:00:00"
    database = Path(home_env["GYMCTL_HOME"]) / "gymctl.db"
    with sqlite3.connect(database) as connection:
        connection.execute(
            "INSERT INTO users (id, identity_id, email, created_at, updated_at)"
            " VALUES (?, 'user_other_owner', 'owner@other-gym.example', ?, ?)",
            (user, at, at),
        )
        connection.execute(
            "INSERT INTO organizations (id, name, slug, status, created_at)"
            " VALUES (?, 'Other Gym', 'other-gym', 'active', ?)",
            (gym, at),
        )
        connection.execute(
            "INSERT INTO memberships (id, organization_id, user_id, role, status,"
            " invitation_held, created_at, updated_at)"
            " VALUES (?, ?, ?, 'owner', 'active', 0, ?, ?)",
            (uuid.uuid4().hex, gym, user, at, at),
        )
    return "user_other_owner"


def test_members_import_holds_the_staff_to_the_matrix_as_join_enabled_does(home_env, tmp_path):  # noqa: F811
    """--staff is the acting staff, checked as `members join-enabled --staff` checks it: a
    member or coach may not manage members (permission_denied), the owner of another gym has no
    membership here (organization_not_found); refused before any work, nothing imported."""
    gymctl(home_env, "quickstart", "--json")
    outsider = other_gym_owner(home_env)
    csv = tmp_path / "members.csv"
    csv.write_text("email,name\nnew.one@example.test,New One\n")
    for staff, code in [
        ("user_demo_member_1", "permission_denied"),
        ("user_demo_coach", "permission_denied"),
        (outsider, "organization_not_found"),
    ]:
        refused = gymctl(
            home_env, "members", "import", "demo-gym", str(csv), "--staff", staff, "--json",
            check=False,
        )  # fmt: skip
        assert (refused.returncode, json.loads(refused.stdout)["code"]) == (1, code), staff
    database = Path(home_env["GYMCTL_HOME"]) / "gymctl.db"
    with sqlite3.connect(database) as connection:
        [(count,)] = connection.execute(
            "SELECT count(*) FROM users WHERE email = 'new.one@example.test'"
        ).fetchall()
    assert count == 0
    imported = gymctl(
        home_env, "members", "import", "demo-gym", str(csv), "--staff", "user_demo_owner",
        "--json",
    )  # fmt: skip
    assert json.loads(imported.stdout)["members"]["created"] == ["new.one@example.test"]


def test_mark_email_verified_refuses_an_operator_who_is_no_user_before_any_work(home_env):  # noqa: F811
    gymctl(home_env, "quickstart", "--json")
    refused = gymctl(
        home_env,
        "users",
        "mark-email-verified",
        "user_demo_member_1",
        "--operator",
        "nobody_at_all",
        "--json",
        check=False,
    )
    assert (refused.returncode, json.loads(refused.stdout)["code"]) == (1, "operator_user_required")
    assert audit_rows(home_env, "user.email_verified") == []
