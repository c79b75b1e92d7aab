"""s48: the operator workflows walked at a terminal (the quick start, movement library, bridge
retries), through the real console entry on both engines: what an operator copies from the
screen runs, a typo'd name is refused rather than matching nothing, an outage is not a success."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.test_quickstart import GYMCTL, gymctl, home_env  # noqa: F401 (fixture)

OPERATOR = ("--operator", "user_demo_owner")
# A closed port on loopback: the search API answers nothing (ConnectError).
SEARCH_DOWN = {"GYMCTL_VIDEO_SEARCH_KEY": "k", "GYMCTL_VIDEO_SEARCH_URL": "http://127.0.0.1:9"}


@pytest.fixture
def seeded(home_env, committed_database):  # noqa: F811
    """The quick start on the engine, then the seed command exactly as it printed it."""
    home_env["GYMCTL_DATABASE_URL"] = committed_database
    shown = gymctl(home_env, "quickstart").stdout
    hint = re.search(r"seed it with: (gymctl movements seed [^)]+)\)", " ".join(shown.split()))
    assert hint, shown
    seeded = gymctl(home_env, *shlex.split(hint.group(1))[1:], "--json", check=False)
    return home_env, hint.group(1), seeded


def test_the_quickstarts_seed_hint_runs_as_printed(seeded):
    _, hint, result = seeded
    assert result.returncode == 0, (hint, result.stderr)
    assert json.loads(result.stdout)["created"] == 873


def test_a_video_pass_naming_no_movement_is_refused(seeded):
    """`--slug` / `--id` naming no live canonical movement (a typo, a merged loser, another
    gym's own movement) searched nothing and said so with exit 0; now movement_not_found names
    them, before any search or score (with and without the search key)."""
    env, _, _ = seeded
    for command in (("video", "discover"), ("video", "rank"), ("video", "refresh")):
        typo = gymctl(
            env, "movements", *command, "--slug", "barbell-squat", "--slug", "no-such-lift",
            *OPERATOR, "--json", check=False,
        )  # fmt: skip
        assert typo.returncode == 1, typo.stdout + typo.stderr
        refused = json.loads(typo.stdout)
        assert refused["code"] == "movement_not_found"
        assert refused["slugs"] == ["no-such-lift"]
    unknown = "00000000-0000-4000-8000-000000000000"
    by_id = gymctl(
        env | SEARCH_DOWN, "movements", "video", "discover", "--id", unknown, *OPERATOR,
        check=False,
    )  # fmt: skip
    assert by_id.returncode == 1
    assert f"error movement_not_found: no canonical movement {unknown}" in by_id.stderr
    known = gymctl(
        env, "movements", "video", "discover", "--slug", "barbell-squat", *OPERATOR, "--json"
    )
    assert json.loads(known.stdout)["remaining"] == 1


def test_a_search_outage_exits_1_with_the_counts(seeded):
    """The search API unreachable: the pass stops (what it found is kept) and the command
    exits 1 with the provider's code, not 0 as if the run had done its work."""
    env, _, _ = seeded
    down = gymctl(
        env | SEARCH_DOWN, "movements", "video", "discover", "--limit", "2", *OPERATOR, "--json",
        check=False,
    )  # fmt: skip
    assert down.returncode == 1, down.stdout + down.stderr
    answer = json.loads(down.stdout)
    assert answer["code"] == "video_search_unavailable"
    assert (answer["searched"], answer["remaining"]) == (0, 873)
    table = gymctl(
        env | SEARCH_DOWN, "movements", "video", "discover", "--limit", "2", *OPERATOR,
        check=False,
    )  # fmt: skip
    assert table.returncode == 1
    assert "remaining" in table.stdout
    assert "error video_search_unavailable:" in table.stderr
    assert "Traceback" not in table.stdout + table.stderr


def test_bridge_ops_help_names_the_statuses_it_takes(home_env):  # noqa: F811
    """The help offered `--status done`, which is a usage error; it now lists the op statuses."""
    from gymctl.models.bridge import OpStatus

    shown = " ".join(gymctl(home_env, "bridge", "ops", "--help").stdout.split())
    assert "done" not in shown
    for status in OpStatus:
        assert status.value in shown


def test_an_unknown_job_queue_is_a_usage_mistake(home_env):  # noqa: F811
    """`movements job QUEUE ID` with a queue there is not: exit 2 naming the queues, as
    `movements jobs --queue` does, not `job_not_found` as if the job were missing."""
    wrong = gymctl(
        home_env, "movements", "job", "videoz", "00000000-0000-4000-8000-000000000000",
        check=False,
    )  # fmt: skip
    assert wrong.returncode == 2, wrong.stderr
    assert "'videoz' is not one of: seed, thumbnails, videos, cues" in wrong.stderr


@pytest.fixture(params=["postgresql", "sqlite"])
def unmigrated(request, home_env, tmp_path):  # noqa: F811
    """A database no one migrated: an empty PostgreSQL database of the test's own, or the
    embedded default's folder where it is not (gymctl run from another directory)."""
    if request.param == "sqlite":
        home_env["GYMCTL_HOME"] = str(tmp_path / "elsewhere" / ".gymctl")
        yield home_env, str(tmp_path / "elsewhere" / ".gymctl" / "gymctl.db")
        return
    from sqlalchemy import create_engine, make_url, text

    from tests.conftest import _pg_admin_url

    name = f"gymctl_s48_unmigrated_{uuid.uuid4().hex[:8]}"
    admin = create_engine(_pg_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    home_env["GYMCTL_DATABASE_URL"] = (
        make_url(_pg_admin_url()).set(database=name).render_as_string(hide_password=False)
    )
    try:
        yield home_env, f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.mark.parametrize(
    "args",
    [
        ("billing", "readiness", "demo-gym"),
        ("bridge", "status", "demo-gym"),
        ("movements", "duplicates"),
        ("bridge", "retry", "1", *OPERATOR),
        ("daemons", "run", "--once", "--job", "event_relay"),
    ],
)
def test_a_command_on_a_database_never_migrated_says_how_to_migrate(unmigrated, args):
    """Run outside the quick start's folder (GYMCTL_HOME is ./.gymctl), every command was a
    crash (exit 70: "no such table", or "unable to open database file"); now a configuration
    error naming the database and the command that migrates it, twice the same (the first
    run must not leave a state the second reads differently). The daemons crashed on their
    lock folder, then failed every job with SQL errors; the server started, answering 503 and
    401 to every request: both are refused before they start (s57)."""
    env, where = unmigrated
    for _ in range(2):
        told = gymctl(env, *args, check=False)
        assert told.returncode == 2, told.stderr
        assert "Traceback" not in told.stdout + told.stderr
        assert "crashed" not in told.stderr
        assert where in told.stderr
        assert "never migrated" in told.stderr
        assert "gymctl db upgrade" in told.stderr
    as_json = json.loads(gymctl(env, *args, "--json", check=False).stdout)
    assert as_json["code"] == "configuration_error"


@pytest.mark.parametrize(
    "command",
    [
        (sys.executable, "-m", "daemons", "--once", "--job", "event_relay"),
        (*GYMCTL, "serve", "--port", "1"),
    ],
    ids=["python -m daemons", "gymctl serve"],
)
def test_a_server_or_daemon_on_a_database_never_migrated_exits_2_before_it_starts(
    unmigrated, command
):
    """`python -m daemons` (a daemon host's door) refuses as `gymctl daemons run` does, and the
    server no longer starts to answer 503 and 401 to every request."""
    env, where = unmigrated
    told = subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert told.returncode == 2, told.stderr
    assert where in told.stderr
    assert "never migrated" in told.stderr


def test_a_json_refusal_of_a_command_with_progress_bars_leaves_stderr_empty(home_env):  # noqa: F811
    """Off a terminal the bars drew nothing but left a blank line on stderr: a script that
    keeps stderr (2>&1, a cron mail) got a stray line before the one JSON document."""
    gymctl(home_env, "db", "upgrade")
    for args in (
        ("movements", "seed", "libraries/none.json", *OPERATOR, "--json"),
        ("movements", "merge", "not-a-pair", *OPERATOR, "--json"),
        ("movements", "cues", "--dry-run", *OPERATOR, "--json"),
    ):
        answered = gymctl(home_env, *args, check=False)
        assert answered.stderr == "", args
        json.loads(answered.stdout)
