"""`gymctl members ...`: the gym's member list in one go (import, spec A 5.3), the join switch
(join-enabled, spec A 2.9) and the owner of a gym that has none (appoint-owner, spec A 2.7)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import Progress

from gymctl.cli import codes
from gymctl.cli.inputs import read_given
from gymctl.cli.output import JSON, console, print_json, render_rows
from gymctl.errors import conflict, invalid

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from gymctl.access.permissions import Module
    from gymctl.models import Membership

app = typer.Typer(no_args_is_help=True)


@app.command("import")
def import_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="CSV: email[,name]"),
    staff: str | None = typer.Option(
        None, "--staff", help="Recorded as the registering staff (default: the gym's owner)."
    ),
    as_json: bool = JSON,
) -> None:
    """Create an active member per row (rows without a login show as Unproven until the person
    signs in). Refused up front, creating nothing, over the tier's active-member cap."""
    from gymctl import clock
    from gymctl.access.gyms import resolve_organization
    from gymctl.access.invitations import Outreach
    from gymctl.access.member_imports import import_here
    from gymctl.access.permissions import Module
    from gymctl.access.registrations import MAX_ROSTER_BYTES, Registrar, parse_members_csv
    from gymctl.config import get_settings
    from gymctl.db import READ_ONLY, session_factory
    from gymctl.providers.identity_admin import identity_admin_from_settings
    from gymctl.providers.mail import mailer_from_settings

    rows = parse_members_csv(read_given(file, "FILE", limit=MAX_ROSTER_BYTES))
    factory = session_factory()
    settings = get_settings()
    outreach = Outreach(
        settings, mailer_from_settings(settings), identity_admin_from_settings(settings, factory)
    )
    with factory() as session:  # reads only: the import's chunks take the write lock
        session.connection(execution_options=READ_ONLY)
        gym = resolve_organization(session, organization)
        actor = _acting_staff(session, gym.id, staff, Module.members)
    registrar = Registrar(
        organization=gym,
        staff_user_id=actor.user_id,
        ip=None,
        path="cli: gymctl members import",
        outreach=outreach,
    )
    with Progress(console=console, transient=True, disable=as_json) as progress:
        task = progress.add_task("importing members", total=None)
        job = import_here(
            factory,
            registrar,
            actor.id,
            rows,
            now=clock.now,
            progress=lambda done, total: progress.update(task, completed=done, total=total),
        )
    summary = {"import": job["id"], "status": job["status"], **job["results"]}
    stopped = job["error"]
    if stopped is not None:  # the cap filled, or the staff lost the right, while it ran
        raise conflict(
            stopped["code"],
            f"the import stopped after {job['done']} of {job['total']} rows; those stay",
            **summary,
        )
    if as_json:
        print_json(summary)
        return
    members = summary["members"]
    render_rows(
        [{"outcome": key, "count": len(members[key])} for key in members],
        ["outcome", "count"],
        title=f"import into {gym.name}",
    )
    if members["unverified"]:
        console.print("refused (address of an unproven login): " + ", ".join(members["unverified"]))


@app.command("join-enabled")
def join_enabled_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    state: str = typer.Argument(..., help="on or off: off makes every join link answer 404."),
    staff: str | None = typer.Option(
        None, "--staff", help="Acting staff, held to the permission matrix (default: the owner)."
    ),
    as_json: bool = JSON,
) -> None:
    """Switch joining through links on or off for a gym (audited under the acting staff)."""
    from gymctl import clock
    from gymctl.access.gyms import resolve_organization
    from gymctl.access.join import set_join_enabled
    from gymctl.access.permissions import Module
    from gymctl.db import session_scope

    if state not in ("on", "off"):
        raise invalid(codes.JOIN_ENABLED_INVALID, "state must be on or off")
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        actor = _acting_staff(session, gym.id, staff, Module.join_links)
        set_join_enabled(session, gym, state == "on", actor_user_id=actor.user_id, now=clock.now())
        answer = {"organization": gym.slug, "joinEnabled": gym.join_enabled}
    if as_json:
        print_json(answer)
    else:
        console.print(f"joining through links is {state} for {answer['organization']}")


@app.command("tier")
def tier_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    tier: str = typer.Argument(..., help="starter (150 active members), growth (600) or elite."),
    operator: str = typer.Option(
        ...,
        "--operator",
        help="Your user, the platform admin: database id or identity subject (audited).",
    ),
    as_json: bool = JSON,
) -> None:
    """Put a gym on a platform tier: it caps the active members an import may bring (also
    PUT /admin/organizations/:orgId/tier)."""
    from gymctl import clock
    from gymctl.access import tiers
    from gymctl.access.gyms import resolve_organization
    from gymctl.cli.operators import operator_id
    from gymctl.cli.output import one_of
    from gymctl.db import session_scope
    from gymctl.models.organizations import Tier

    one_of(tier, [t.value for t in Tier], "TIER")
    with session_scope() as session:
        gym = resolve_organization(session, organization)
        change = tiers.set_tier(
            session,
            gym.id,
            Tier(tier),
            actor_user_id=operator_id(session, operator),
            now=clock.now(),
        )
        answer = change.as_dict()
    if as_json:
        print_json(answer)
        return
    render_rows([answer], list(answer), title=f"{organization} tier")


@app.command("appoint-owner")
def appoint_owner_command(
    organization: str = typer.Argument(..., help="Organization id or slug."),
    user: str = typer.Argument(
        ..., help="The new owner, an active member: database id (UUID) or identity subject."
    ),
    operator: str = typer.Option(
        ...,
        "--operator",
        help="Your user, the platform admin appointing: database id or identity subject "
        "(audited as the actor).",
    ),
    as_json: bool = JSON,
) -> None:
    """Appoint the owner of a gym that has none (the owner was removed or their login deleted);
    a gym with a live owner is refused (owner_exists): a transfer is the owner's own act."""
    from gymctl import clock
    from gymctl.access.gyms import resolve_organization
    from gymctl.access.owner_appointment import appoint_owner
    from gymctl.access.trail import resolve_user
    from gymctl.cli.operators import operator_id
    from gymctl.db import session_scope

    with session_scope() as session:
        actor = operator_id(session, operator)
        gym = resolve_organization(session, organization)
        person = resolve_user(session, user)
        appointed = appoint_owner(session, gym, person.id, actor_user_id=actor, now=clock.now())
        former = appointed.former_owner_user_id
        answer = {
            "organization": gym.slug,
            "userId": str(person.id),
            "role": appointed.membership.role.value,
            "changed": appointed.changed,
            "formerOwnerUserId": str(former) if former else None,
        }
    if as_json:
        print_json(answer)
        return
    shown = person.identity_id or answer["userId"]
    console.print(
        f"{shown} is now the owner of {answer['organization']}"
        + ("" if appointed.changed else " (already was)"),
        markup=False,
    )


def _acting_staff(
    session: Session, org_id: uuid.UUID, staff: str | None, module: Module
) -> Membership:
    """The membership acting for `--staff` (default: the gym's owner), held to the permission
    matrix as the HTTP routes hold a signed-in caller: someone with no active membership in the
    gym is organization_not_found, a role that may not manage `module` is permission_denied,
    both before any work is done."""
    from gymctl.access.memberships import owner_of, resolve_membership
    from gymctl.access.permissions import Action, enforce
    from gymctl.access.trail import resolve_user

    if staff:
        actor = resolve_membership(session, org_id, resolve_user(session, staff))
    else:
        actor = owner_of(session, org_id)
        if actor is None:
            raise invalid(codes.STAFF_REQUIRED, "the gym has no owner; pass --staff")
    enforce(org_id, actor.role, module, Action.manage)
    return actor
