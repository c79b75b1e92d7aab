"""`gymctl users ...`: operator actions on people."""

from __future__ import annotations

import json
from datetime import timedelta

import typer
from rich.panel import Panel
from rich.text import Text

from gymctl.cli.output import JSON, console, print_json, render_rows

app = typer.Typer(no_args_is_help=True)
MAX_HOURS = 24 * 366  # a development token; timedelta cannot hold much more


@app.command("dev-token")
def dev_token(
    identity_id: str = typer.Argument(..., help="Identity subject, e.g. user_demo_coach."),
    hours: float = typer.Option(
        12, help=f"Lifetime of the token, more than 0 and at most {MAX_HOURS} hours."
    ),
    session: str | None = typer.Option(
        None, "--session", help="Reuse this session id (sid) instead of minting a new one."
    ),
    as_json: bool = JSON,
) -> None:
    """Mint a session token signed with the embedded default's local key (not in production)."""
    from gymctl import clock
    from gymctl.config import get_settings
    from gymctl.identity.dev_keys import mint_dev_token

    if not 0 < hours <= MAX_HOURS:  # not `min`/`max`: nan passes those (and crashed)
        raise typer.BadParameter(f"more than 0 and at most {MAX_HOURS}", param_hint="--hours")
    token = mint_dev_token(
        get_settings(),
        identity_id,
        now=clock.now(),
        lifetime=timedelta(hours=hours),
        session_id=session,
    )
    if as_json:
        import jwt

        sid = jwt.decode(token, options={"verify_signature": False})["sid"]
        print_json({"identityId": identity_id, "sessionId": sid, "token": token})
    else:
        print(token)  # noqa: T201


@app.command("ownership-trail")
def ownership_trail_command(
    user: str = typer.Argument(..., help="Database id (UUID) or identity subject (user_...)."),
    as_json: bool = JSON,
) -> None:
    """Show who owns an account: sign-up origin, sessions, join forms, consents, events."""
    from gymctl.access.trail import ownership_trail, resolve_user
    from gymctl.db import session_scope

    with session_scope() as session:
        trail = ownership_trail(session, resolve_user(session, user))
    if as_json:
        print_json(trail)
        return

    person, origin = trail["user"], trail["signUpOrigin"]
    verification = origin["emailVerification"]
    lines = [
        f"id            {person['id']}",
        f"login         {person['identityId'] or 'Unproven'} ({person['loginState']})",
        f"email         {person['email'] or '-'}",
        f"created       {person['createdAt']}"
        + (f" by {origin['createdByUserId']}" if origin["createdByUserId"] else ""),
        f"origin        {origin['origin']}",
    ]
    if origin["organization"]:
        org = origin["organization"]
        lines.append(f"gym           {org['name'] or '?'} ({org['id']})")
    if origin["joinLink"]:
        link = origin["joinLink"]
        lines.append(f"join link     {link['label'] or '-'} ({link['id']})")
    lines.append(
        f"email proven  {verification['verifiedAt']} by {verification['verifiedBy']}"
        if verification["verifiedAt"]
        else "email proven  no"
    )
    if person["deletedAt"]:
        lines.append(f"deleted       {person['deletedAt']}")
    # Text, not markup: names and labels are user input.
    console.print(Panel(Text("\n".join(lines)), title="User and sign-up origin"))

    session_columns = ["lastSeenAt", "firstSeenAt", "ip", "city", "country", "browser", "device"]
    render_rows(trail["sessions"], [*session_columns, "impersonatedBy"], title="Last sessions")
    render_rows(
        trail["joinSubmissions"],
        ["createdAt", "outcome", "email", "organizationId", "joinLinkId", "ip", "userAgent"],
        title="Join-form submissions",
    )
    render_rows(
        trail["consents"],
        ["acceptedAt", "documentType", "documentVersion", "locale", "ip", "userAgent"],
        title="Consents",
    )
    for key, rows_key, title in (
        ("ownershipEvents", "events", "Ownership and refusal events"),
        ("platformAdminActions", "actions", "Platform admin actions"),
    ):
        section = trail[key]
        rows = [
            {**row, "data": json.dumps(row["data"], sort_keys=True)} for row in section[rows_key]
        ]
        more = " (truncated: older rows exist)" if section["truncated"] else ""
        render_rows(
            rows, ["at", "action", "actorUserId", "organizationId", "data"], title=title + more
        )


@app.command("mark-email-verified")
def mark_email_verified_command(
    user: str = typer.Argument(..., help="Database id (UUID) or identity subject (user_...)."),
    operator: str = typer.Option(
        ...,
        "--operator",
        help="Your user, who confirmed ownership out of band: database id or identity subject "
        "(audited as the actor, recorded in the trail).",
    ),
    as_json: bool = JSON,
) -> None:
    """Confirm a person owns their address; their next /users/me links or activates."""
    from gymctl import clock
    from gymctl.access.ownership import mark_email_verified
    from gymctl.access.trail import resolve_user
    from gymctl.cli.operators import operator_id
    from gymctl.db import session_scope

    with session_scope() as session:
        actor = operator_id(session, operator)
        person = resolve_user(session, user)
        changed = mark_email_verified(
            session, person, actor_user_id=actor, actor=f"cli:{actor}", now=clock.now()
        )
        result = {"userId": str(person.id), "verified": True, "changed": changed}
    if as_json:
        print_json(result)
    else:
        console.print(f"{result['userId']}: email verified" + ("" if changed else " (already was)"))
