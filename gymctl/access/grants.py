"""The role grant matrix (spec A 2.8): who may give which role, by invitation or role change."""

from __future__ import annotations

from gymctl.access import codes
from gymctl.errors import forbidden
from gymctl.models import Role

GRANTABLE: dict[Role, frozenset[Role]] = {
    Role.owner: frozenset({Role.owner, Role.admin, Role.coach, Role.member}),
    Role.admin: frozenset({Role.coach, Role.member}),
    Role.coach: frozenset({Role.member}),
    Role.member: frozenset(),
}


def can_grant(actor: Role, role: Role) -> bool:
    return role in GRANTABLE[actor]


def require_grant(actor: Role, role: Role) -> None:
    if not can_grant(actor, role):
        raise forbidden(
            codes.ROLE_GRANT_FORBIDDEN, f"a {actor.value} cannot grant the {role.value} role"
        )


def require_role_change(actor: Role, current: Role, new: Role) -> None:
    """A role change needs the caller to be able to grant both the new and the current role."""
    require_grant(actor, new)
    require_grant(actor, current)


def require_invitation_handling(actor: Role, invited_role: Role) -> None:
    """Revoke or resend: coaches only for member-role invitations (the grant matrix says so)."""
    require_grant(actor, invited_role)
