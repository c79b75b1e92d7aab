"""The `gymctl` command: one module per command group, joined here.

Every command is a thin door: parse, call the domain, render. Groups are imported when run, not
when listed (gymctl/cli/lazy.py), so `--help` starts at once; each group's module imports its
domain inside its command functions for the same reason. However a command ends badly, main()
tells it the same way (gymctl/cli/failures.py).
"""

from __future__ import annotations

import sys

import typer

from gymctl.cli.lazy import LazyGroup

# name: (module:attribute, help). A Typer app is a group; a function is one command.
COMMANDS: dict[str, tuple[str, str]] = {
    "quickstart": (
        "gymctl.cli.quickstart:quickstart",
        "Create GYMCTL_HOME, migrate, seed a demo gym, run each sweep once.",
    ),
    "serve": ("gymctl.cli.serve:serve", "Serve the webhooks and the client API with gunicorn."),
    "config": ("gymctl.cli.config:app", "Show the settings in force; check them for production."),
    "keys": ("gymctl.cli.keys:app", "Generate secrets and keys in the format the settings expect."),
    "db": ("gymctl.cli.db:app", "Database migrations."),
    "daemons": ("gymctl.cli.daemons:app", "Run the sweep daemons."),
    "users": ("gymctl.cli.users:app", "People: tokens, identity, ownership trail."),
    "members": ("gymctl.cli.members:app", "A gym's members: CSV import."),
    "invitations": ("gymctl.cli.invitations:app", "Invitations and owner grants."),
    "legal": ("gymctl.cli.legal:app", "Legal documents: publish a version, list them."),
    "assets": ("gymctl.cli.assets:app", "Member-app image intake."),
    "bridge": ("gymctl.cli.bridge:app", "The bridge to the external gym system."),
    "branding": ("gymctl.cli.branding:app", "Palettes, publishing, minisites."),
    "billing": ("gymctl.cli.billing:app", "Billing: sweeps, readiness, transactions."),
    "movements": ("gymctl.cli.movements:app", "The canonical movement library."),
    "releases": ("gymctl.cli.releases:app", "Branded apps and their releases."),
    "tasks": ("gymctl.cli.tasks:app", "The staff's tasks of a gym: list them, mark one done."),
}


class Gymctl(LazyGroup):
    commands_table = COMMANDS


app = typer.Typer(
    cls=Gymctl,
    no_args_is_help=True,
    help="Back office of a multi-gym platform.",
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"gymctl {version('gymctl')}")  # noqa: T201
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_show_version, help="Print the version."
    ),
) -> None:
    """Back office of a multi-gym platform."""


def main(argv: list[str] | None = None) -> None:
    """The console entry: run the command, and end every failure the same way. A reader that
    closed the pipe early (`gymctl ... | head`) ends it quietly, as Python's note on SIGPIPE
    says (gymctl/cli/failures.py, stdout_closed)."""
    from gymctl.cli import failures

    args = sys.argv[1:] if argv is None else argv
    position = failures.not_text(args)
    if position is not None:
        sys.exit(failures.undecodable(position, args, as_json="--json" in args))
    try:
        try:
            result = app(args=args, prog_name="gymctl", standalone_mode=False)
        except Exception as error:
            status = failures.report(error, args, as_json="--json" in args)
        else:
            status = result if isinstance(result, int) else 0
        # Flush here, inside the handler: a closed pipe is found now, not at shutdown.
        sys.stdout.flush()
    except BrokenPipeError:
        status = failures.stdout_closed()
    except SystemExit:
        # Typer ends a closed pipe met inside a command itself (exit 1, its streams wrapped
        # to ignore the error); make the shutdown's flush quiet too.
        if failures.stdout_pacified():
            failures.stdout_closed()
        raise
    sys.exit(status)
