"""`gymctl db upgrade | current | history`."""

from __future__ import annotations

import typer

from gymctl import migrate
from gymctl.cli.output import console, print_json, render_rows
from gymctl.config import get_settings

app = typer.Typer(no_args_is_help=True)


@app.command("upgrade")
def upgrade(revision: str = typer.Argument("head")) -> None:
    """Apply migrations up to REVISION (under an advisory lock on PostgreSQL)."""
    get_settings().check()
    migrate.upgrade(revision=revision)
    console.print(f"database at revision {migrate.current()}")


@app.command("current")
def current(as_json: bool = typer.Option(False, "--json")) -> None:
    """The revision the database is at, and the head of the journal."""
    data = {"current": migrate.current(), "head": migrate.head()}
    if as_json:
        print_json(data)
    else:
        console.print(f"current {data['current']}  head {data['head']}")


@app.command("history")
def history(as_json: bool = typer.Option(False, "--json")) -> None:
    """Every revision of the journal, newest first."""
    rows = [
        {"revision": rev, "down_revision": down, "message": doc}
        for rev, down, doc in migrate.history()
    ]
    render_rows(rows, ["revision", "down_revision", "message"], title="migrations", as_json=as_json)
