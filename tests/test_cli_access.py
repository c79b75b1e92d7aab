"""Operators' access commands on the embedded default, end to end in a subprocess."""

from __future__ import annotations

import json

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
            "desk-call-42",
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
