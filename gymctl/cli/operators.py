"""The operator a command's write is audited as (docs/decisions.md, "CLI writes take
--operator"): a user of the platform, by database id or identity subject. One who is no user is
refused before any work, in every group: an audit row must name its actor."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from gymctl.cli import codes
from gymctl.errors import DomainError, forbidden

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def operator_id(session: Session, ref: str) -> uuid.UUID:
    from gymctl.access.trail import resolve_user

    try:
        return resolve_user(session, ref).id
    except DomainError:
        raise forbidden(
            codes.OPERATOR_USER_REQUIRED, f"no user {ref!r} to audit this write as"
        ) from None
