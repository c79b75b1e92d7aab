"""docs/operations.md stays true: every gymctl command it names exists, and the ones marked
"(tested)" do what the guide says on a fresh home."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
COMMAND = re.compile(r"gymctl((?: [a-z][a-z-]*)+)")


def gymctl(env, *args):
    command = [sys.executable, "-m", "gymctl", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def home_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GYMCTL_", "IDENTITY_"))}
    env.update(GYMCTL_HOME=str(tmp_path / "home"), GYMCTL_ENV="development")
    return env


def named_commands() -> set[tuple[str, ...]]:
    """`gymctl group command` in the guide's code (fenced blocks and `inline` spans), not the
    word gymctl in prose or in a path such as /srv/gymctl/venv."""
    text = GUIDE.read_text()
    code = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S) + re.findall(r"`([^`\n]+)`", text)
    found = set()
    for snippet in code:
        for match in COMMAND.finditer(snippet):
            if match.start() == 0 or snippet[match.start() - 1] in " \t\n$(":
                found.add(tuple(match.group(1).split()[:2]))
    return found


def test_every_command_the_guide_names_exists(home_env):
    commands = named_commands()
    assert ("daemons", "run") in commands
    assert ("config", "check") in commands
    for words in sorted(commands):
        result = gymctl(home_env, *words, "--help")
        if result.returncode != 0 and len(words) == 2:  # "gymctl serve --host": one word
            result = gymctl(home_env, words[0], "--help")
        assert result.returncode == 0, (words, result.stderr)


@pytest.mark.parametrize(
    ("kind", "setting"),
    [
        ("invite-secret", "INVITE_SECRET"),
        ("national-id-key", "NATIONAL_ID_ENCRYPTION_KEY"),
        ("billing-key", "GYMCTL_BILLING_ENCRYPTION_KEY"),
    ],
)
def test_keys_generate_prints_the_setting_the_guide_shows(home_env, kind, setting):
    result = gymctl(home_env, "keys", "generate", kind)
    assert result.returncode == 0, result.stderr
    name, _, value = result.stdout.strip().partition("=")
    assert name == setting
    assert value


def test_config_check_lists_production_problems_and_exits_non_zero(home_env):
    result = gymctl({**home_env, "GYMCTL_ENV": "production"}, "config", "check")
    assert result.returncode != 0
    assert "GYMCTL_DATABASE_URL" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_db_current_and_daemons_runs_answer_json_on_a_fresh_home(home_env):
    assert gymctl(home_env, "db", "upgrade").returncode == 0
    current = json.loads(gymctl(home_env, "db", "current", "--json").stdout)
    assert current["current"] == current["head"]
    ran = gymctl(home_env, "daemons", "run", "--once", "--job", "event_relay")
    assert ran.returncode == 0, ran.stderr
    runs = json.loads(gymctl(home_env, "daemons", "runs", "--json").stdout)
    assert isinstance(runs, list)
