"""The embedded default end to end: `gymctl quickstart` on SQLite, then `gymctl serve` (gunicorn)
answering /users/me over real HTTP with the printed token."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from daemons.jobs import JOBS

GYMCTL = [sys.executable, "-m", "gymctl"]


@pytest.fixture
def home_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GYMCTL_", "IDENTITY_"))}
    env.update(GYMCTL_HOME=str(tmp_path / "home"), GYMCTL_ENV="development")
    return env


def gymctl(env, *args, check=True):
    result = subprocess.run([*GYMCTL, *args], env=env, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"gymctl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not come up")


def test_quickstart_then_serve_answers_users_me_with_the_printed_token(home_env):
    out = json.loads(gymctl(home_env, "quickstart", "--json").stdout)
    assert out["database"].startswith("sqlite:///")
    assert {p["role"] for p in out["people"]} == {"owner", "coach", "member"}
    assert [s["job"] for s in out["sweeps"]] == [job.name for job in JOBS]
    assert {s["status"] for s in out["sweeps"]} == {"ok"}
    # The demo member's renewal was due: the catch-up charged it through the sandbox, once.
    sweeps = {s["job"]: s["result"] for s in out["sweeps"]}
    assert sweeps["billing_catchup"]["charged"] == 1
    assert sweeps["billing_daily"]["charged"] == 0
    assert out["billing"]["subscriptionId"]
    assert out["invitation"] == {
        "email": "new.coach@demo-gym.example",
        "role": "coach",
        "status": "accepted",
        "membership": "active",
        "accepted": True,
    }
    assert out["logo"]["backgroundRemoved"] is True
    assert [r["result"] for r in out["branding"]["results"]] == ["verified"] * 3
    # The shipped movement library is where the README's `movements seed` reads it.
    assert out["movementLibrary"] == "libraries/free-exercise-db.json"
    assert (Path(out["home"]) / "objects" / out["movementLibrary"]).is_file()
    [mail] = list(Path(out["mailbox"]).glob("*.eml"))
    assert "new.coach@demo-gym.example" in mail.read_text()

    port = free_port()
    server = subprocess.Popen(
        [*GYMCTL, "serve", "--port", str(port), "--workers", "1"],
        env=home_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/health")
        me = httpx.get(
            f"http://127.0.0.1:{port}/users/me",
            headers={"Authorization": f"Bearer {out['token']}"},
            timeout=10,
        )
        assert me.status_code == 200, me.text
        body = me.json()
        assert body["user"]["identityId"] == "user_demo_owner"
        assert body["activeOrganization"]["name"] == "Demo Gym"
        assert body["activeOrganization"]["role"] == "owner"
        assert body["pendingLegalConsents"] == 2
        assert body["branding"]["status"] == "published"
        site = httpx.get(out["minisite"].replace(":8000", f":{port}"), timeout=10)
        assert site.status_code == 200
        assert "Strength for every body" in site.text
        refused = httpx.get(f"http://127.0.0.1:{port}/users/me", timeout=10)
        assert (refused.status_code, refused.json()["code"]) == (401, "authorization_missing")
    finally:
        server.terminate()
        server.wait(timeout=15)


def test_quickstart_twice_changes_nothing_and_relays_the_events_once(home_env, tmp_path):
    gymctl(home_env, "quickstart", "--json")
    second = json.loads(gymctl(home_env, "quickstart", "--json").stdout)
    assert len(second["people"]) == 6  # the five seeded and the invited coach
    events = (tmp_path / "home" / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["name"] for line in events] == [
        "organization.created",
        "invitation.created",
        "user_signed_up",
        "invitation.accepted",
        "branding.asset_normalized",
        "branding.brand_published",
        "branding.website_published",
        "branding.app_published",
        "subscription.renewed",  # the first run's catch-up charge, relayed by the second run
    ]
    assert second["invitation"] is None  # done once
    assert second["billing"] is None
    second_sweeps = {s["job"]: s["result"] for s in second["sweeps"]}
    assert second_sweeps["billing_catchup"]["charged"] == 0  # charged once, not again
    assert second["logo"] is None
    assert second["branding"] is None  # published once, the address printed every time
    assert second["minisite"] == "http://127.0.0.1:8000/sites/demo-gym"


def test_dev_token_for_another_person_and_config_show_redacts(home_env):
    gymctl(home_env, "quickstart", "--json")
    token = json.loads(gymctl(home_env, "users", "dev-token", "user_demo_coach", "--json").stdout)
    assert token["identityId"] == "user_demo_coach"
    assert token["token"].count(".") == 2
    home_env["IDENTITY_SECRET_KEY"] = "sk_live_do_not_print"
    shown = json.loads(gymctl(home_env, "config", "show", "--json").stdout)
    assert shown["IDENTITY_SECRET_KEY"] == "********"
    assert shown["GYMCTL_ENV"] == "development"


def test_db_commands_report_the_revision(home_env):
    gymctl(home_env, "db", "upgrade")
    current = json.loads(gymctl(home_env, "db", "current", "--json").stdout)
    assert current["current"] == current["head"] is not None
    history = json.loads(gymctl(home_env, "db", "history", "--json").stdout)
    assert history[-1]["revision"] == "0001"


def test_production_refuses_to_start_naming_the_missing_setting(home_env):
    home_env["GYMCTL_ENV"] = "production"
    result = gymctl(home_env, "db", "upgrade", check=False)
    assert result.returncode == 2
    assert "IDENTITY_WEBHOOK_SECRET" in result.stderr
    assert "GYMCTL_DATABASE_URL" in result.stderr


def test_a_domain_refusal_prints_its_code_and_exits_1(home_env):
    result = gymctl(home_env, "users", "dev-token", "user_x", check=False)
    assert result.returncode == 1
    assert "dev_key_missing" in result.stderr
