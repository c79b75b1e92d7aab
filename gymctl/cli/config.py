"""`gymctl config show`: every setting in force, secrets redacted."""

from __future__ import annotations

import typer

from gymctl.cli.output import render_mapping
from gymctl.config import get_settings

app = typer.Typer(no_args_is_help=True)


@app.command("show")
def show(as_json: bool = typer.Option(False, "--json", help="Machine output.")) -> None:
    """Print every setting by its environment name; secrets show as ********."""
    settings = get_settings()
    render_mapping(settings.redacted(), title=f"gymctl settings ({settings.env})", as_json=as_json)
