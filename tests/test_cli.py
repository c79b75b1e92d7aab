"""The command line's contract (issue 21), through the real console entry (`python -m gymctl`):
a usage mistake is one line and exit 2, a refusal its code and exit 1, a crash exit 70 with the
log that holds the traceback; `--help` loads no domain; every command takes `--json`."""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from rich.console import Console

from gymctl.cli import COMMANDS
from gymctl.cli.lazy import LazyCommand
from tests.test_quickstart import GYMCTL, gymctl, home_env  # noqa: F401 (fixture)

DOMAINS = (
    "identity", "access", "branding", "assets", "releases", "billing", "bookings", "bridge",
    "movements", "retention", "models", "providers", "db", "config",
)  # fmt: skip
GROUPS = [name for name, (target, _) in COMMANDS.items() if target.endswith(":app")]


def assert_one_line_usage_error(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith("usage error: "), line
    assert result.stdout == ""


BIG = "99999999999999999999999"  # past every integer column


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["nosuch"], id="unknown command"),
        pytest.param(["users", "ownership-trail"], id="missing argument"),
        pytest.param(["bridge", "retry"], id="missing argument of a lazy group"),
        pytest.param(["users", "mark-email-verified", "user_x"], id="missing option"),
        pytest.param(["daemons", "list", "--bogus"], id="unknown option"),
        pytest.param(["billing", "transaction", "show", "demo", "not-a-uuid"], id="non-UUID id"),
        pytest.param(["bridge", "ops", "demo", "--status", "stuck"], id="wrong enum choice"),
        pytest.param(["keys", "generate", "nope"], id="unknown key kind"),
        pytest.param(["db", "upgrade", "9999"], id="unknown revision"),
        pytest.param(["serve", "--workers", "0"], id="serve with no worker"),
        pytest.param(["serve", "--port", "99999"], id="serve on a port past 65535"),
        pytest.param(["serve", "--port", "0"], id="serve on port 0"),
        pytest.param(["movements", "jobs", "--queue", "bogus"], id="unknown job queue"),
        pytest.param(["movements", "jobs", "--status", "bogus"], id="unknown job status"),
        pytest.param(["billing", "sweep", "bogus"], id="unknown sweep"),
        pytest.param(["daemons", "runs", "--job", "billing_catchups"], id="unknown job, runs"),
        pytest.param(["daemons", "run", "--once", "--job", "bogus"], id="unknown job, run"),
        pytest.param(
            ["billing", "simulate", "demo", "--until", "2030-01-01", "--by", "year"],
            id="unknown forecast period",
        ),
        # Found by probing every command: each of these was a crash (a traceback in the log).
        pytest.param(["billing", "settings", "show", os.fsdecode(b"\xff")], id="not UTF-8"),
        pytest.param(["users", "dev-token", "user_x", "--hours", "nan"], id="a lifetime of nan"),
        pytest.param(["users", "dev-token", "user_x", "--hours", "1e309"], id="an endless one"),
        pytest.param(["branding", "restore", "demo", "brand", "--revision", BIG], id="revision"),
        pytest.param(["bridge", "retry", BIG, "--operator", "x"], id="an op id past BIGINT"),
        pytest.param(["daemons", "runs", "--limit", BIG], id="a limit past BIGINT"),
        pytest.param(["daemons", "run", "--interval", BIG, "--job", "event_relay"], id="interval"),
        pytest.param(["movements", "duplicates", "--limit", BIG], id="a library limit"),
        pytest.param(["db", "upgrade", ""], id="an empty revision"),
    ],
)
def test_a_usage_mistake_is_one_line_and_exit_2(home_env, args):  # noqa: F811
    assert_one_line_usage_error(gymctl(home_env, *args, check=False))


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["movements", "jobs", "--queue", "bogus"], "'bogus' is not one of: seed, thumbnails, "
         "videos, cues"),
        (["movements", "jobs", "--status", "done"], "'done' is not one of: queued, running, "
         "succeeded, failed"),
        (["billing", "sweep", "bogus"], "unknown_sweep: 'bogus' is not one of: lifecycle,"),
        (["daemons", "runs", "--job", "billing_catchups"], "unknown_job: 'billing_catchups' is "
         "not one of: "),
        (["billing", "simulate", "demo", "--until", "2030-01-01", "--by", "year"],
         "forecast_period_invalid: 'year' is not one of: day, week, month"),
        (["serve", "--workers", "0"], "'--workers': Input should be greater than or equal to 1"),
    ],
)  # fmt: skip
def test_an_unknown_choice_names_the_choices_and_keeps_its_code(home_env, args, shown):  # noqa: F811
    """A value the command would have silently matched nothing with (an empty table) or
    refused with exit 1 is a usage mistake that lists what it takes."""
    assert shown in gymctl(home_env, *args, check=False).stderr


def test_a_group_without_a_command_shows_its_help_and_exits_2(home_env):  # noqa: F811
    shown = gymctl(home_env, "db", check=False)
    assert shown.returncode == 2
    assert "upgrade" in shown.stdout
    assert shown.stderr == ""


def test_a_missing_file_and_a_wrong_slot_are_usage_mistakes(home_env, tmp_path):  # noqa: F811
    missing = gymctl(
        home_env, "assets", "normalize", str(tmp_path / "none.png"), "--slot", "logo", check=False
    )
    assert_one_line_usage_error(missing)
    assert "does not exist" in missing.stderr
    image = tmp_path / "logo.png"
    image.write_bytes(b"not even an image")
    banner = gymctl(home_env, "assets", "normalize", str(image), "--slot", "banner", check=False)
    assert_one_line_usage_error(banner)
    assert "'banner' is not one of" in banner.stderr


def test_with_json_a_refusal_and_a_usage_mistake_are_json_on_stdout(home_env):  # noqa: F811
    """Decision: with --json stdout always holds one JSON document; the exit status tells a
    refusal (1) or a usage mistake (2) from success."""
    refused = gymctl(home_env, "users", "dev-token", "user_x", "--json", check=False)
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["code"] == "dev_key_missing"
    assert refused.stderr == ""
    mistake = gymctl(home_env, "billing", "readiness", "--json", check=False)
    assert mistake.returncode == 2
    assert json.loads(mistake.stdout)["code"] == "usage_error"


def test_a_crash_exits_70_and_names_the_log_that_holds_the_traceback(home_env):  # noqa: F811
    home_env["GYMCTL_DATABASE_URL"] = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    crashed = gymctl(home_env, "db", "current", check=False)
    assert crashed.returncode == 70
    assert "Traceback" not in crashed.stderr
    [line] = crashed.stderr.splitlines()
    log = Path(re.search(r"the traceback is in (\S+)$", line).group(1))
    assert log.parent == Path(home_env["GYMCTL_HOME"]).resolve() / "logs"
    text = log.read_text()
    assert "Traceback" in text
    assert "OperationalError" in text


def test_a_crash_whose_arguments_are_not_utf8_still_writes_its_log(tmp_path, monkeypatch):
    """The log was opened strictly UTF-8: an argument the shell passed as bytes (a lone
    surrogate here) failed the write, and the crash showed as a raw traceback instead."""
    from gymctl.cli import failures

    monkeypatch.setenv("GYMCTL_HOME", str(tmp_path))
    log = failures._write_crash_log(RuntimeError("boom"), ["show", os.fsdecode(b"\xff")])
    assert log == (tmp_path / "logs" / "gymctl-cli-crashes.log").resolve()
    assert "show \\udcff" in log.read_text()


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["config", "show", "--json"], id="a command's output"),
        pytest.param(
            ["assets", "normalize", "examples/logo.jpg", "--slot", "icon", "--json"],
            id="a refusal's JSON",
        ),
        pytest.param(["nosuch", "--json"], id="a usage mistake's JSON"),
    ],
)
def test_a_reader_that_closed_the_pipe_ends_it_quietly(home_env, args):  # noqa: F811
    """`gymctl ... | head`: the reader is gone before gymctl writes. Python's recipe for
    SIGPIPE: no traceback, no 'Exception ignored' at shutdown, nothing said, exit 1."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(
            [*GYMCTL, *args],
            env=home_env,
            cwd=Path(__file__).parents[1],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (1, "")


def test_production_with_a_bad_environment_name_is_a_clear_configuration_error(home_env):  # noqa: F811
    home_env["GYMCTL_ENV"] = "prod"
    result = gymctl(home_env, "config", "check", check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "GYMCTL_ENV: Input should be 'production', 'development' or 'test'" in result.stderr


def test_config_check_lists_every_production_problem_at_once(home_env):  # noqa: F811
    home_env["GYMCTL_BILLING_ENCRYPTION_KEY"] = "garbage"
    result = gymctl(home_env, "config", "check", "--production", "--json", check=False)
    assert result.returncode == 2
    problems = json.loads(result.stdout)["problems"]
    for named in (
        "GYMCTL_DATABASE_URL",
        "INVITE_SECRET",
        "GYMCTL_CARD_PROVIDER_URL",
        "GYMCTL_STORAGE_SIGNING_SECRET",
        "GYMCTL_BILLING_ENCRYPTION_KEY: entry 1 is not of the form kid:base64key",
    ):
        assert any(problem.startswith(named) for problem in problems), (named, problems)
    assert "garbage" not in result.stdout


@pytest.mark.parametrize(
    "args", [["serve"], ["daemons", "run", "--once"], ["db", "upgrade"], ["config", "check"]]
)
def test_every_production_start_runs_the_one_check(home_env, args):  # noqa: F811
    """Issue 21: with every setting the old check asked for, the API died at worker boot and
    billing jobs failed every tick; each start now refuses first, naming what is missing."""
    from tests.test_config import public_key_pem

    home_env.update(
        GYMCTL_ENV="production",
        GYMCTL_DATABASE_URL="postgresql+psycopg://nobody@127.0.0.1:1/none",
        IDENTITY_JWT_KEY=public_key_pem(),
        IDENTITY_WEBHOOK_SECRET="whsec_c2VjcmV0",
        INVITE_SECRET="invite-secret-for-tests-0123456789abcdef",
        GYMCTL_BILLING_ENCRYPTION_KEY="k1:" + "A" * 43 + "=",
    )
    refused = gymctl(home_env, *args, check=False)
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    assert "GYMCTL_CARD_PROVIDER_URL is not set" in refused.stderr
    assert "GYMCTL_STORAGE_SIGNING_SECRET is not set" in refused.stderr


def loaded_modules(*args: str) -> list[str]:
    """Run main() with `args` in a fresh interpreter; the modules it imported."""
    script = (
        "import contextlib, io, json, sys\n"
        "from gymctl.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({list(args)!r})\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 0, exit.code\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout)


def test_help_imports_no_domain_package():
    """STYLE 12: a command loads only what it runs, so `gymctl --help` starts at once."""
    modules = loaded_modules("--help")
    domain = [m for m in modules if m.split(".")[:2] in (["gymctl", d] for d in DOMAINS)]
    assert domain == []
    assert not [m for m in modules if m.split(".")[0] in ("sqlalchemy", "daemons", "webhooks")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_help_imports_no_database_layer(command):
    modules = loaded_modules(command, "--help")
    assert f"gymctl.cli.{command}" in modules
    assert not [m for m in modules if m.split(".")[0] in ("sqlalchemy", "alembic", "daemons")]


def test_version_prints_the_installed_version(home_env):  # noqa: F811
    shown = gymctl(home_env, "--version").stdout
    assert shown == f"gymctl {importlib.metadata.version('gymctl')}\n"


def _leaf_commands(command, path):
    children = getattr(command, "commands", None)
    if children is None:
        yield " ".join(path), command
        return
    for name, child in children.items():
        yield from _leaf_commands(child, [*path, name])


def test_every_command_takes_json():
    """DESIGN 4: each command has `--json` for machine output (serve replaces itself with
    gunicorn and prints nothing)."""
    lacking = []
    for name, (target, help_text) in COMMANDS.items():
        if name == "serve":
            continue
        command = LazyCommand(name, target, help_text).load()
        for path, leaf in _leaf_commands(command, [name]):
            if not any("--json" in param.opts for param in leaf.params):
                lacking.append(path)
    assert lacking == []


@pytest.mark.parametrize("width", [40, 60, 100])
def test_a_table_never_cuts_an_id(monkeypatch, width):
    """An operator pastes ids from a table into the next command: a narrow terminal wraps the
    other columns, or shows each row as lines, but never splits or elides an id."""
    from gymctl.cli import output

    screen = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=screen, width=width))
    ids = [str(uuid.uuid4()) for _ in range(2)]
    output.render_rows(
        [{"subscription": i, "issues": "card_expired (blocking), " * 4} for i in ids],
        ["subscription", "issues"],
    )
    output.render_rows(
        [{"id": 7, "aggregateKey": f"member:{ids[0]}", "lastError": "refused " * 12}],
        ["id", "aggregateKey", "lastError"],
    )
    output.render_mapping({"winner": ids[0], "loser": ids[1], "note": "kept " * 20})
    shown = screen.getvalue()
    for text in (*ids, f"member:{ids[0]}"):
        assert text in shown


def test_each_generated_key_is_accepted_by_its_setting(home_env, tmp_path):  # noqa: F811
    """`gymctl keys generate KIND` prints NAME=value for an environment file; read back the
    way the settings read `.env`, every value passes the production check."""
    from dotenv import dotenv_values

    from gymctl.cli.keys import SETTINGS, Kind
    from tests.test_config import production

    env_file = tmp_path / ".env"
    env_file.write_text("".join(gymctl(home_env, "keys", "generate", k.value).stdout for k in Kind))
    values = dotenv_values(env_file)
    assert sorted(values) == sorted(SETTINGS.values())
    production(**values, GYMCTL_BRIDGE_API_URL="https://gym-system.example.test/api").check()
    private_key = Path(home_env["GYMCTL_HOME"]) / "identity" / "signing_key.pem"
    assert private_key.stat().st_mode & 0o777 == 0o600

    again = gymctl(home_env, "keys", "generate", "identity-dev-key", check=False)
    assert again.returncode == 1
    assert "key_exists" in again.stderr
