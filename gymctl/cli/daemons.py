"""`gymctl daemons run | list | runs`: start the sweep daemons, show the job table and the
ledger of runs."""

from __future__ import annotations

import json
from typing import Any

import typer

from gymctl.cli.output import JSON, one_of, render_rows

app = typer.Typer(no_args_is_help=True)


@app.command("run")
def run(
    job: list[str] | None = typer.Option(
        None, "--job", metavar="NAME", help="Run only this job (repeatable)."
    ),
    once: bool = typer.Option(False, "--once", help="Run each job once now and exit."),
    interval: int | None = typer.Option(
        None,
        "--interval",
        min=1,
        max=366 * 86400,  # the scheduler's own range ends before a much larger one
        metavar="SECONDS",
        help="Override the interval of every selected job (all daemons should agree on it).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine output (with --once)."),
) -> None:
    """Run the daemons until SIGTERM/SIGINT, or each job once with --once."""
    from daemons.runner import configure_logging, run_daemons
    from gymctl.config import get_settings

    for name in job or ():
        _job_named(name)
    settings = get_settings()
    configure_logging(settings)
    outcomes = run_daemons(job, once, settings, interval_seconds=interval)
    if not once:
        return
    render_rows(
        (outcome.as_row() for outcome in outcomes),
        ["job", "status", "result", "reason"],
        title="daemon jobs, run once",
        as_json=as_json,
    )
    if any(outcome.status == "failed" for outcome in outcomes):
        raise typer.Exit(1)


@app.command("list")
def list_jobs(as_json: bool = JSON) -> None:
    """The table of jobs and their intervals."""
    from daemons.jobs import JOBS

    rows = [
        {"name": job.name, "interval": job.interval_seconds, "description": job.description}
        for job in JOBS
    ]
    render_rows(rows, ["name", "interval", "description"], title="daemon jobs", as_json=as_json)


@app.command("runs")
def runs(
    limit: int = typer.Option(
        20, "--limit", "-n", min=1, max=10_000, help="How many runs, newest first."
    ),
    job: str | None = typer.Option(None, "--job", metavar="NAME", help="Only this job."),
    as_json: bool = JSON,
) -> None:
    """The last runs recorded in the job_runs ledger, newest first."""
    from sqlalchemy import select

    from gymctl.config import get_settings
    from gymctl.db import get_engine, session_factory, session_scope
    from gymctl.models import JobRun

    query = select(JobRun).order_by(JobRun.started_at.desc(), JobRun.tick.desc()).limit(limit)
    if job is not None:
        query = query.where(JobRun.job_name == _job_named(job))
    factory = session_factory(get_engine(get_settings().resolved_database_url))
    with session_scope(factory) as session:
        rows = [
            {
                "job": run.job_name,
                "tick": run.tick,
                "runner": run.runner,
                "started": run.started_at,
                "finished": run.finished_at,
                "status": run.status,
                "result": _decoded(run.result),
            }
            for run in session.scalars(query)
        ]
    render_rows(
        rows,
        ["job", "tick", "runner", "started", "finished", "status"],
        title="daemon runs",
        as_json=as_json,
    )


def _decoded(result: str | None) -> Any:
    """The ledger keeps a job's result as JSON text: --json shows it as JSON, not as a string
    holding JSON. A failed run's message is plain text and stays so."""
    try:
        return json.loads(result) if result else result
    except ValueError:
        return result


def _job_named(name: str) -> str:
    """A --job value naming a job of the table, else a usage mistake listing them (s48's rule:
    `daemons runs --job` with a typo answered an empty ledger, read as "never ran")."""
    from daemons.jobs import JOBS
    from gymctl.codes import UNKNOWN_JOB

    return one_of(name, (job.name for job in JOBS), "--job", UNKNOWN_JOB)
