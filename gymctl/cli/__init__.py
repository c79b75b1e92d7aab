"""The `gymctl` command: Typer sub-apps joined here, one module per command group.

Every command is a thin door: parse, call the domain, render. A DomainError anywhere becomes its
code on stderr and exit status 1; a configuration error stops the command before any work.
"""

from __future__ import annotations

import sys

import click
import typer

from gymctl.cli import assets as assets_cli
from gymctl.cli import billing as billing_cli
from gymctl.cli import branding as branding_cli
from gymctl.cli import bridge as bridge_cli
from gymctl.cli import config as config_cli
from gymctl.cli import daemons as daemons_cli
from gymctl.cli import db as db_cli
from gymctl.cli import invitations as invitations_cli
from gymctl.cli import members as members_cli
from gymctl.cli import movements as movements_cli
from gymctl.cli import releases as releases_cli
from gymctl.cli import users as users_cli
from gymctl.cli.output import err_console
from gymctl.cli.quickstart import quickstart
from gymctl.cli.serve import serve
from gymctl.config import ConfigError
from gymctl.errors import DomainError

app = typer.Typer(no_args_is_help=True, help="Back office of a multi-gym platform.")
app.add_typer(config_cli.app, name="config", help="Show the settings in force.")
app.add_typer(db_cli.app, name="db", help="Database migrations.")
app.add_typer(daemons_cli.app, name="daemons", help="Run the sweep daemons.")
app.add_typer(users_cli.app, name="users", help="People: tokens, identity, ownership trail.")
app.add_typer(members_cli.app, name="members", help="A gym's members: CSV import.")
app.add_typer(invitations_cli.app, name="invitations", help="Invitations and owner grants.")
app.add_typer(assets_cli.app, name="assets", help="Member-app image intake.")
app.add_typer(bridge_cli.app, name="bridge", help="The bridge to the external gym system.")
app.add_typer(branding_cli.app, name="branding", help="Palettes, publishing, minisites.")
app.add_typer(billing_cli.app, name="billing", help="Billing: sweeps, readiness, transactions.")
app.add_typer(movements_cli.app, name="movements", help="The canonical movement library.")
app.add_typer(releases_cli.app, name="releases", help="Branded apps and their releases.")
app.command("quickstart")(quickstart)
app.command("serve")(serve)


def main() -> None:
    try:
        result = app(standalone_mode=False)
    except DomainError as error:
        err_console.print(f"[red]error[/red] {error.code}: {error.message}", highlight=False)
        sys.exit(1)
    except ConfigError as error:
        err_console.print(f"[red]configuration error[/red]: {error}", highlight=False)
        sys.exit(2)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(1)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    sys.exit(result if isinstance(result, int) else 0)
