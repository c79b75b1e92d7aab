"""`gymctl billing simulate` on the quick start's embedded default, in a subprocess."""

from __future__ import annotations

import json
import os
import pty
import signal
import sqlite3
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymctl.billing import forecast
from gymctl.cli import app as gymctl_app
from gymctl.config import get_settings
from tests.test_quickstart import GYMCTL, gymctl, home_env  # noqa: F401 (fixture)

COUNTED = ("subscriptions", "payment_transactions", "outbox_events", "retention_cases")


def _state(env) -> dict[str, object]:
    database = Path(env["GYMCTL_HOME"]) / "gymctl.db"
    with sqlite3.connect(database) as connection:
        counts = {t: connection.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTED}
        rows = connection.execute("SELECT * FROM subscriptions ORDER BY id").fetchall()
    return {"counts": counts, "subscriptions": rows}


def _day(days: int) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).date().isoformat()


def test_simulate_forecasts_the_demo_gym_and_changes_nothing(home_env, tmp_path):  # noqa: F811
    gymctl(home_env, "quickstart", "--json")
    before = _state(home_env)
    chart = tmp_path / "forecast.png"
    database = Path(home_env["GYMCTL_HOME"]) / "gymctl.db"
    with sqlite3.connect(database) as connection:
        [(dana,)] = connection.execute("SELECT id FROM subscriptions").fetchall()
    subscription = str(uuid.UUID(dana))  # (the first column is the organization's id)

    out = gymctl(
        home_env,
        "billing",
        "simulate",
        "demo-gym",
        "--until",
        _day(70),
        "--by",
        "month",
        "--decline-rate",
        "0.5",
        "--seed",
        "3",
        "--chart",
        str(chart),
        "--explain",
        subscription,
        "--json",
    ).stdout
    report = json.loads(out)

    assert report["by"] == "month"
    assert len(report["periods"]) == 3
    assert {
        "moneyInCents",
        "refundsOutCents",
        "debtsOpened",
        "debtsCleared",
        "cancelledForNonPayment",
        "noticesMatured",
        "presalesOpened",
        "activeAtEnd",
    } <= set(report["periods"][0])
    assert report["explain"]["subscriptionId"] == subscription
    assert isinstance(report["explain"]["timeline"], list)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _state(home_env) == before
    table = gymctl(home_env, "billing", "simulate", "demo-gym", "--until", _day(14)).stdout
    assert "billing forecast" in table


def test_simulate_holds_no_write_lock_while_it_forecasts(home_env, monkeypatch):  # noqa: F811
    """The forecast only reads the real database, and only while it copies: on the embedded
    default a writer (a member paying, a daemon's sweep) gets the write lock while the scratch
    copy runs, rather than waiting out the whole forecast (minutes for a large gym)."""
    gymctl(home_env, "quickstart", "--json")
    for name in [n for n in os.environ if n.startswith(("GYMCTL_", "IDENTITY_"))]:
        monkeypatch.delenv(name)
    for name in ("GYMCTL_HOME", "GYMCTL_ENV"):
        monkeypatch.setenv(name, home_env[name])
    get_settings.cache_clear()
    writes: list[str] = []
    real_run = forecast.run

    def run_after_a_write(*args, **kwargs):
        database = Path(home_env["GYMCTL_HOME"]) / "gymctl.db"
        with sqlite3.connect(database, timeout=0.5, isolation_level=None) as writer:
            try:
                writer.execute("BEGIN IMMEDIATE")
                writes.append("taken")
                writer.execute("ROLLBACK")
            except sqlite3.OperationalError as error:
                writes.append(str(error))
        return real_run(*args, **kwargs)

    monkeypatch.setattr(forecast, "run", run_after_a_write)
    try:
        result = CliRunner().invoke(
            gymctl_app, ["billing", "simulate", "demo-gym", "--until", _day(30), "--json"]
        )
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["periods"]
    assert writes == ["taken"]


def test_simulate_refusals_change_nothing(home_env):  # noqa: F811
    """Refusals: an unknown organization, a date in the past, more than 3 years ahead, both
    decline sources, a share outside 0..1, an unknown period; each a JSON refusal with its code
    and exit status 1, and nothing written."""
    gymctl(home_env, "quickstart", "--json")
    before = _state(home_env)
    cases = {
        "organization_not_found": ("no-such-gym", "--until", _day(30)),
        "forecast_date_past": ("demo-gym", "--until", _day(-1)),
        "forecast_date_too_far": ("demo-gym", "--until", _day(3 * 366 + 1)),
        "decline_rate_conflict": (
            "demo-gym",
            "--until",
            _day(30),
            "--decline-rate",
            "0.2",
            "--from-history",
        ),
        "decline_rate_invalid": ("demo-gym", "--until", _day(30), "--decline-rate", "1.5"),
        # A day that does not exist: named as neither form --until takes, not as a time
        # without its UTC offset.
        "timestamp_not_utc": ("demo-gym", "--until", "2027-02-30"),
        # --explain names no subscription of the gym: refused before the forecast runs, not
        # shown as an empty timeline.
        "subscription_not_found": ("demo-gym", "--until", _day(30), "--explain", str(uuid.uuid4())),
    }
    for code, args in cases.items():
        refused = gymctl(home_env, "billing", "simulate", *args, "--json", check=False)
        assert refused.returncode == 1, code
        assert json.loads(refused.stdout or refused.stderr)["code"] == code
        if code == "timestamp_not_utc":
            message = json.loads(refused.stdout)["message"]
            assert message.startswith("'2027-02-30' is neither a day (YYYY-MM-DD) nor"), message
    # An instant before year 1 once in UTC was an OverflowError (a crash), not this refusal.
    early = gymctl(home_env, "billing", "simulate", "demo-gym", "--until",
                   "0001-01-01T00:00:00+01:00", "--json", check=False)  # fmt: skip
    assert (early.returncode, json.loads(early.stdout)["code"]) == (1, "timestamp_not_utc")
    assert _state(home_env) == before


def test_simulate_usage_mistakes_exit_2_before_the_forecast_runs(home_env, tmp_path):  # noqa: F811
    """An unknown period (its code kept in the message) and a chart in a folder that does not
    exist are usage mistakes: exit 2, found before the forecast runs, nothing written."""
    gymctl(home_env, "quickstart", "--json")
    before = _state(home_env)
    period = gymctl(
        home_env, "billing", "simulate", "demo-gym", "--until", _day(30), "--by", "year",
        check=False,
    )  # fmt: skip
    assert period.returncode == 2, period.stderr
    assert "forecast_period_invalid" in period.stderr
    assert "'year' is not one of: day, week, month" in period.stderr
    for seed in ("-1", str(forecast.MAX_SEED + 1)):  # the HTTP forecast's range (s54: any int)
        refused = gymctl(
            home_env, "billing", "simulate", "demo-gym", "--until", _day(30), "--seed", seed,
            check=False,
        )  # fmt: skip
        assert refused.returncode == 2, refused.stderr
        assert f"{seed} is not a seed from 0 to {forecast.MAX_SEED}" in refused.stderr
    chart = tmp_path / "missing" / "forecast.png"
    unwritable = gymctl(
        home_env, "billing", "simulate", "demo-gym", "--until", _day(30), "--chart", str(chart),
        "--json", check=False,
    )  # fmt: skip
    assert unwritable.returncode == 2, unwritable.stderr
    answer = json.loads(unwritable.stdout)
    assert answer["code"] == "usage_error"
    assert "--chart" in answer["message"]
    assert "does not exist" in answer["message"]
    assert "Traceback" not in unwritable.stderr
    picture = tmp_path / "forecast.jpg"  # no format of the chart's: refused, not PNG bytes
    unknown = gymctl(
        home_env, "billing", "simulate", "demo-gym", "--until", _day(30), "--chart", str(picture),
        check=False,
    )  # fmt: skip
    assert unknown.returncode == 2, unknown.stderr
    assert "forecast.jpg: a chart is drawn as .png, .svg, .pdf" in unknown.stderr
    assert not picture.exists()
    assert _state(home_env) == before


def test_the_chart_is_drawn_in_the_format_its_file_names(home_env, tmp_path):  # noqa: F811
    """--chart FILE.svg is an SVG and FILE.pdf a PDF (s54 noticed PNG bytes in a .svg that no
    viewer opens); a suffix in capitals names the same format."""
    gymctl(home_env, "quickstart", "--json")
    signatures = {"forecast.svg": b"<svg", "forecast.PDF": b"%PDF-"}
    for name, signature in signatures.items():
        chart = tmp_path / name
        gymctl(home_env, "billing", "simulate", "demo-gym", "--until", _day(7), "--chart",
               str(chart), "--json")  # fmt: skip
        assert signature in chart.read_bytes()[:400], name


def test_on_a_terminal_a_bar_follows_the_forecast_clock(home_env):  # noqa: F811
    """A large gym's year takes a minute or two: on a terminal, stderr shows the forecast
    clock's day as it moves (the bar is removed when done); with --json or piped, stderr
    stays quiet."""
    gymctl(home_env, "quickstart", "--json")
    table, shown = _on_a_terminal(home_env, "billing", "simulate", "demo-gym", "--until", _day(60))
    assert b"forecast clock " + _day(0)[:4].encode() in shown
    assert "billing forecast" in table
    report, quiet = _on_a_terminal(
        home_env, "billing", "simulate", "demo-gym", "--until", _day(60), "--json"
    )
    assert json.loads(report)["periods"]
    assert b"forecast clock" not in quiet
    piped = gymctl(home_env, "billing", "simulate", "demo-gym", "--until", _day(60))
    assert "forecast clock" not in piped.stderr


def _on_a_terminal(env, *args) -> tuple[str, bytes]:
    """Run gymctl with stderr on a pseudo-terminal: (stdout, what the terminal was shown)."""
    leader, follower = pty.openpty()
    done = subprocess.run(
        [*GYMCTL, *args],
        env={**env, "COLUMNS": "120"},
        stdout=subprocess.PIPE,
        stderr=follower,
        timeout=120,
        check=True,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return done.stdout.decode(), shown


def test_operators_see_the_queued_forecasts_the_daemons_run(home_env):  # noqa: F811
    """A forecast queued for the admin screen, run by `gymctl daemons run --job
    billing_forecasts` on the embedded default, as `gymctl billing forecasts` shows it."""
    from sqlalchemy import select

    from gymctl.billing import forecast_runs
    from gymctl.db import get_engine, release_engine, session_factory
    from gymctl.models import Organization

    gymctl(home_env, "quickstart", "--json")
    url = f"sqlite:///{Path(home_env['GYMCTL_HOME']) / 'gymctl.db'}"
    with session_factory(get_engine(url))() as session:
        demo = session.scalar(select(Organization).where(Organization.slug == "demo-gym"))
        until = datetime.fromisoformat(_day(30)).replace(tzinfo=UTC)
        forecast_runs.request_forecast(
            session,
            demo.id,
            forecast_runs.ForecastRequest(until=until),
            now=datetime.now(UTC),
            requested_by=None,
        )
        session.commit()
    release_engine(url)
    queued = json.loads(gymctl(home_env, "billing", "forecasts", "demo-gym", "--json").stdout)
    assert [(r["status"], r["progress"]) for r in queued] == [("queued", 0.0)]

    ran = gymctl(home_env, "daemons", "run", "--once", "--job", "billing_forecasts", "--json")
    assert [o["result"]["succeeded"] for o in json.loads(ran.stdout)] == [1]
    done = json.loads(gymctl(home_env, "billing", "forecasts", "demo-gym", "--json").stdout)
    assert [(r["id"], r["status"], r["progress"]) for r in done] == [
        (queued[0]["id"], "succeeded", 1.0)
    ]
    table = gymctl(home_env, "billing", "forecasts", "demo-gym").stdout
    assert "queued billing forecasts" in table
    assert queued[0]["id"] in table  # ids are never cut (gymctl.cli.output.render_rows)
    refused = gymctl(home_env, "billing", "forecasts", "no-such-gym", "--json", check=False)
    assert json.loads(refused.stdout or refused.stderr)["code"] == "organization_not_found"


def test_a_forecast_stopped_by_sigterm_removes_its_scratch_copy(home_env, tmp_path):  # noqa: F811
    """A `timeout`, a closed terminal or a cancelled job (SIGTERM, SIGHUP) stops the forecast as
    Ctrl-C does, its scratch copy removed (s54, a hunt: Python's own handling ended the process
    at once and left the copy, hundreds of MB for a large gym, in the temporary folder)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**home_env, "TMPDIR": str(scratch)}
    gymctl(env, "quickstart", "--json")
    running = subprocess.Popen(
        [*GYMCTL, "billing", "simulate", "demo-gym", "--until", _day(3 * 365 - 2), "--by", "day",
         "--json"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not any(scratch.glob(f"{forecast.SCRATCH_PREFIX}*/{forecast.OWNER}")):
            assert running.poll() is None, running.stderr.read()
            assert time.monotonic() < deadline, "the forecast made no scratch copy"
            time.sleep(0.01)
        running.send_signal(signal.SIGTERM)
        assert running.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        running.kill()
    assert list(scratch.glob(f"{forecast.SCRATCH_PREFIX}*")) == []
    assert b"Traceback" not in running.stderr.read()


def test_a_scratch_copy_whose_process_is_gone_is_removed_by_the_next_forecast(tmp_path):
    """A forecast killed outright (SIGKILL, out of memory) runs no cleanup: the next one removes
    its copy. A live process's copy stays, and so does one whose owner is not written yet."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    copies = {
        "gone": str(gone.pid),
        "live": str(os.getpid()),
        "unowned": None,
    }
    for name, pid in copies.items():
        folder = tmp_path / f"{forecast.SCRATCH_PREFIX}{name}"
        folder.mkdir()
        (folder / "forecast.sqlite3").write_bytes(b"x")
        if pid is not None:
            (folder / forecast.OWNER).write_text(pid)

    assert forecast.remove_orphans(tmp_path) == 1

    left = sorted(p.name.removeprefix(forecast.SCRATCH_PREFIX) for p in tmp_path.iterdir())
    assert left == ["live", "unowned"]


def test_a_hangup_the_caller_ignores_stays_ignored():
    """`nohup gymctl billing simulate ...`: the forecast's own SIGHUP stop (s54) leaves an
    ignored SIGHUP ignored (the session's review: it replaced nohup's, and a closed terminal
    stopped a forecast its operator had left running). SIGTERM still stops it."""
    from gymctl.cli.billing import _stopped_as_by_ctrl_c

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with _stopped_as_by_ctrl_c():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # nothing happens
            with pytest.raises(SystemExit) as stopped:
                os.kill(os.getpid(), signal.SIGTERM)
            assert stopped.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
