"""The permission matrix (spec A 2.7, 2.8): role -> module -> none, view or manage.

The API enforces it after the membership is resolved; the web hides UI through the same table.
Rules kept outside the matrix live in gymctl.access.rules: single owner, owner removable only by
a platform admin, owner-only deletion, onboarding and personal-data erasure, own records.
"""

from __future__ import annotations

import uuid
from enum import IntEnum, StrEnum

from gymctl.access import codes
from gymctl.errors import forbidden
from gymctl.models import Role


class Access(IntEnum):
    none = 0
    view = 1
    manage = 2


class Module(StrEnum):
    organization = "organization"  # settings, profile of the gym
    members = "members"  # the member roster and member records
    member_billing = "member_billing"  # the billing tab of a member record
    invitations = "invitations"  # who may invite is further limited by the role grant matrix
    programming = "programming"  # workouts, programs, class types, sessions, bookings
    messages = "messages"
    forms = "forms"
    checkins = "checkins"
    metrics = "metrics"
    finance = "finance"  # plans, payments, subscriptions
    crm = "crm"  # leads
    analytics = "analytics"
    sales = "sales"  # granting sales capability (holding it is a grant, not a role)
    join_links = "join_links"
    branding = "branding"  # brand, website, member app
    payment_config = "payment_config"  # the payment-provider integration
    platform_billing = "platform_billing"  # the gym's own subscription to the platform


_ALL = {module: Access.manage for module in Module}
_OWNER_ONLY = {Module.payment_config, Module.platform_billing}

PERMISSION_MATRIX: dict[Role, dict[Module, Access]] = {
    Role.owner: dict(_ALL),
    # Owner-equivalent for daily work, finance included; the owner keeps the two integrations.
    Role.admin: {m: (Access.none if m in _OWNER_ONLY else Access.manage) for m in Module},
    Role.coach: {
        **{m: Access.none for m in Module},
        Module.programming: Access.manage,
        Module.messages: Access.manage,
        Module.forms: Access.manage,
        Module.checkins: Access.manage,
        Module.metrics: Access.manage,
        Module.members: Access.view,  # the roster, not its billing tab
        Module.invitations: Access.manage,  # member role only (role grant matrix)
    },
    # Member surfaces only: a member reaches their own records through rules, never a module.
    Role.member: {m: Access.none for m in Module},
}


class Action(StrEnum):
    view = "view"
    manage = "manage"


def can(role: Role | str, module: Module | str, action: Action | str) -> bool:
    """Pure: does `role` reach `module` for `action` (manage implies view)?"""
    granted = PERMISSION_MATRIX[Role(role)][Module(module)]
    return granted >= Access[Action(action).value]


def enforce(
    org_id: uuid.UUID,
    role: Role | str,
    module: Module | str,
    action: Action | str,
    message: str | None = None,
) -> None:
    """Refuse with 403 permission_denied unless the matrix allows it."""
    if not can(role, module, action):
        raise forbidden(
            codes.PERMISSION_DENIED,
            message
            or f"the {Role(role).value} role cannot {Action(action).value} {Module(module).value}",
        )
