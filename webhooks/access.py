"""Route guards of the access layer: organization routes resolve the caller's membership, then
enforce the permission matrix (or an owner-only rule); admin routes need a platform admin.

Each guard records what it requires on the view (`gymctl_access`), so a test can walk every
organization route and check the matrix against the API.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flask import g

from gymctl.access.memberships import resolve_membership
from gymctl.access.permissions import Action, Module, enforce
from gymctl.db import release_for_outside_call
from gymctl.errors import forbidden, unauthorized
from gymctl.models import Membership, Role, User
from webhooks import codes
from webhooks.context import auth, db, services


def org_route(module: Module, action: Action) -> Callable:
    """Resolve the caller's active membership in <org_id> (404 otherwise), then the matrix."""

    def decorate(view: Callable) -> Callable:
        @functools.wraps(view)
        def guarded(org_id, **kwargs: Any):
            membership = resolve_membership(db(), org_id, auth().user)
            enforce(org_id, membership.role, module, action)
            g.membership = membership
            return view(org_id, **kwargs)

        guarded.gymctl_access = ("matrix", module, action)  # type: ignore[attr-defined]
        return guarded

    return decorate


def owner_route(view: Callable) -> Callable:
    """Rules outside the matrix: only the owner (deleting the gym, completing onboarding)."""

    @functools.wraps(view)
    def guarded(org_id, **kwargs: Any):
        membership = resolve_membership(db(), org_id, auth().user)
        if membership.role is not Role.owner:
            raise forbidden(codes.OWNER_REQUIRED, "only the organization's owner can do this")
        g.membership = membership
        return view(org_id, **kwargs)

    guarded.gymctl_access = ("owner",)  # type: ignore[attr-defined]
    return guarded


def platform_admin_route(view: Callable) -> Callable:
    @functools.wraps(view)
    def guarded(**kwargs: Any):
        # The provider may be asked (a cache miss): on the embedded default the request's
        # transaction, which may have begun for the caller's row, does not hold the one write
        # lock while it answers.
        release_for_outside_call(db())
        services().platform_admins.require(auth().user_id)
        return view(**kwargs)

    guarded.gymctl_access = ("platform_admin",)  # type: ignore[attr-defined]
    return guarded


def membership() -> Membership:
    return g.membership


def signed_in_user() -> User:
    """The caller's row; a token whose login has no row yet gets one (webhook late)."""
    from gymctl.identity.users import first_request

    current = auth()
    if current.user is None:
        current.user = first_request(
            db(),
            current.user_id,
            identity_admin=services().identity_admin,
            settings=services().settings,
            now=services().clock.now(),
        )
    if current.user.deleted_at is not None:
        raise unauthorized(codes.USER_DELETED, "this account was deleted")
    return current.user
