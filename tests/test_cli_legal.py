"""`gymctl legal publish|list` on the embedded default, end to end in a subprocess: the same
rules as POST /admin/legal-documents (tests/access/test_legal_publish.py)."""

from __future__ import annotations

import json

from tests.test_quickstart import gymctl, home_env  # noqa: F401 (fixture)


def test_the_cli_publishes_lists_and_refuses_with_the_same_rules(home_env):  # noqa: F811
    """On the embedded default after the quick start (demo documents, version 2026-01)."""
    gymctl(home_env, "quickstart", "--json")
    operator = ("--operator", "user_demo_owner")

    dry = json.loads(
        gymctl(
            home_env,
            "legal",
            "publish",
            "terms_of_use",
            "2026-07",
            "https://demo-gym.example/legal/terms-2026-07",
            *operator,
            "--dry-run",
            "--json",
        ).stdout
    )
    assert (dry["state"], dry["dryRun"]) == ("current", True)
    published = json.loads(
        gymctl(
            home_env,
            "legal",
            "publish",
            "terms_of_use",
            "2026-07",
            "https://demo-gym.example/legal/terms-2026-07",
            *operator,
            "--json",
        ).stdout
    )
    assert (published["version"], published["state"]) == ("2026-07", "current")
    listed = json.loads(gymctl(home_env, "legal", "list", "--json").stdout)
    terms = [(d["version"], d["state"]) for d in listed if d["type"] == "terms_of_use"]
    assert terms == [("2026-07", "current"), ("2026-01", "superseded")]

    for args, code in [
        (("terms_of_use", "2026-07", "https://demo-gym.example/t"), "legal_document_version_taken"),
        (("terms_of_use", "2026-08", "http://demo-gym.example/t"), "legal_document_url_invalid"),
        (("house_rules", "1", "https://demo-gym.example/t"), "legal_document_type_invalid"),
        (
            (
                "terms_of_use",
                "2026-09",
                "https://demo-gym.example/t",
                "--published-at",
                "2020-01-01T00:00Z",
            ),
            "legal_document_backdated",
        ),
    ]:
        refused = gymctl(home_env, "legal", "publish", *args, *operator, "--json", check=False)
        assert (refused.returncode, json.loads(refused.stdout)["code"]) == (1, code)
    stranger = gymctl(
        home_env,
        "legal",
        "publish",
        "privacy_policy",
        "9",
        "https://demo-gym.example/p",
        "--operator",
        "user_nobody",
        "--json",
        check=False,
    )
    assert json.loads(stranger.stdout)["code"] == "operator_user_required"
    assert json.loads(gymctl(home_env, "legal", "list", "--json").stdout) == listed
