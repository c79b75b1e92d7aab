"""`gymctl config show | check`: the settings in force, and whether production would start."""

from __future__ import annotations

import typer

from gymctl.cli.output import JSON, console, print_json, render_mapping
from gymctl.errors import ConfigError

app = typer.Typer(no_args_is_help=True)


@app.command("show")
def show(as_json: bool = JSON) -> None:
    """Print every setting by its environment name; secrets show as ********."""
    from gymctl.config import get_settings

    settings = get_settings()
    render_mapping(settings.redacted(), title=f"gymctl settings ({settings.env})", as_json=as_json)


@app.command("check")
def check(
    production: bool = typer.Option(
        False, "--production", help="Apply the production rules whatever GYMCTL_ENV says."
    ),
    as_json: bool = JSON,
) -> None:
    """Run the start-up check that `serve`, `daemons run` and `db upgrade` run: every problem
    is listed at once and the exit status is 2 if there is one."""
    from gymctl.config import get_settings
    from gymctl.production_check import production_problems

    settings = get_settings()
    applied = production or settings.is_production
    problems = production_problems(settings) if applied else []
    if problems:
        raise ConfigError(
            f"{len(problems)} production setting problem(s): " + "; ".join(problems), problems
        )
    result = {"env": settings.env.value, "productionRules": applied, "problems": []}
    if as_json:
        print_json(result)
    elif applied:
        console.print("ok: every setting production needs is present and well formed")
    else:
        console.print(
            f"ok: {settings.env.value} needs no setting "
            "(--production, or GYMCTL_ENV=production, applies the production rules)"
        )
