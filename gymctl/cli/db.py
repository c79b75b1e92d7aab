"""`gymctl db upgrade | current | history`."""

from __future__ import annotations

import typer

from gymctl.cli.output import JSON, console, print_json, render_rows

app = typer.Typer(no_args_is_help=True)


@app.command("upgrade")
def upgrade(revision: str = typer.Argument("head"), as_json: bool = JSON) -> None:
    """Apply migrations up to REVISION (under an advisory lock on PostgreSQL)."""
    from gymctl import migrate
    from gymctl.config import get_settings

    get_settings().check()
    if not migrate.is_known_revision(revision):
        raise typer.BadParameter(
            f"no revision {revision!r} in the journal (see `gymctl db history`)",
            param_hint="REVISION",
        )
    migrate.upgrade(revision=revision)
    data = {"current": migrate.current(), "head": migrate.head()}
    if as_json:
        print_json(data)
    else:
        console.print(f"database at revision {data['current']}")


@app.command("current")
def current(as_json: bool = JSON) -> None:
    """The revision the database is at, and the head of the journal."""
    from gymctl import migrate

    data = {"current": migrate.current(), "head": migrate.head()}
    if as_json:
        print_json(data)
    else:
        console.print(f"current {data['current']}  head {data['head']}")


@app.command("history")
def history(as_json: bool = JSON) -> None:
    """Every revision of the journal, newest first."""
    from gymctl import migrate

    rows = [
        {"revision": rev, "down_revision": down, "message": doc}
        for rev, down, doc in migrate.history()
    ]
    render_rows(rows, ["revision", "down_revision", "message"], title="migrations", as_json=as_json)
