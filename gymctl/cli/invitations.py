"""`gymctl invitations list ORG | owner-grant EMAIL`: what operators do with invitations."""

from __future__ import annotations

import typer

from gymctl.cli.output import JSON, console, print_json, render_rows

app = typer.Typer(no_args_is_help=True)


@app.command("list")
def list_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    as_json: bool = JSON,
) -> None:
    """A gym's invitations, newest first (they hold invitee addresses: staff and operators)."""
    from gymctl.access import invitations
    from gymctl.access.gyms import resolve_organization
    from gymctl.db import session_scope

    with session_scope() as session:
        rows = invitations.list_invitations(session, resolve_organization(session, organization).id)
    render_rows(
        rows,
        ["email", "role", "status", "existingAccount", "sendCount", "expiresAt"],
        title="invitations",
        as_json=as_json,
    )


@app.command("owner-grant")
def owner_grant_command(
    email: str = typer.Argument(..., help="The future owner's address."),
    as_json: bool = JSON,
) -> None:
    """Send the claimable right to create a gym (spec A 7, OWNER_INVITATION_REQUIRED)."""
    from gymctl import clock
    from gymctl.access import invitations
    from gymctl.config import get_settings
    from gymctl.db import session_factory, session_scope
    from gymctl.models import Role
    from gymctl.providers.identity_admin import identity_admin_from_settings
    from gymctl.providers.mail import mailer_from_settings

    settings = get_settings()
    outreach = invitations.Outreach(
        settings,
        mailer_from_settings(settings),
        identity_admin_from_settings(settings, session_factory()),
    )
    with session_scope() as session:
        grant = invitations.create_invitation(
            session,
            outreach,
            organization=None,
            actor=None,
            actor_user_id=None,
            email=email,
            role=Role.owner,
            now=clock.now(),
        )
        result = invitations.describe(grant)
    if as_json:
        print_json(result)
    else:
        console.print(f"owner grant sent to {result['email']} (expires {result['expiresAt']})")
