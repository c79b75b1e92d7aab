"""`gymctl billing ...`: the billing sweeps by hand (the daemons run the same functions)."""

from __future__ import annotations

import typer

from gymctl import clock
from gymctl.billing.sweeps import SWEEPS, run_sweep
from gymctl.cli.output import print_json, render_mapping
from gymctl.config import get_settings
from gymctl.db import get_engine, session_factory

app = typer.Typer(no_args_is_help=True)


@app.command("sweep")
def sweep_command(
    name: str = typer.Argument(..., help=f"One of: {', '.join(SWEEPS)}."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report who is due; charge nothing."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Run one billing sweep now and print its summary."""
    settings = get_settings()
    factory = session_factory(get_engine(settings.resolved_database_url))
    result = run_sweep(name, factory, clock.now(), settings, dry_run=dry_run)
    if as_json:
        print_json(result)
    else:
        render_mapping(result, title=f"billing sweep {name}{' (dry run)' if dry_run else ''}")
