"""`gymctl users ...`: operator actions on people."""

from __future__ import annotations

from datetime import timedelta

import typer

from gymctl import clock
from gymctl.cli.output import print_json
from gymctl.config import get_settings
from gymctl.identity.dev_keys import mint_dev_token

app = typer.Typer(no_args_is_help=True)


@app.command("dev-token")
def dev_token(
    identity_id: str = typer.Argument(..., help="Identity subject, e.g. user_demo_coach."),
    hours: float = typer.Option(12, help="Lifetime of the token."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Mint a session token signed with the embedded default's local key (not in production)."""
    token = mint_dev_token(
        get_settings(), identity_id, now=clock.now(), lifetime=timedelta(hours=hours)
    )
    if as_json:
        print_json({"identityId": identity_id, "token": token})
    else:
        print(token)  # noqa: T201
