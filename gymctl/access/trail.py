"""The ownership trail of one user (spec A 4, GET /admin/users/:id/ownership-trail; DESIGN 4,
`gymctl users ownership-trail`): the evidence an operator weighs before Mark email verified.

Every section is bounded and JSON-ready (ISO timestamps, string ids), so the HTTP door and the
CLI render the same dict. Secrets never enter it: no national id, no tokens.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select, true
from sqlalchemy.orm import Session

from gymctl.access import codes
from gymctl.errors import not_found
from gymctl.models import (
    AuditLog,
    JoinLink,
    JoinSubmission,
    LegalConsent,
    LegalDocument,
    Organization,
    User,
    UserSession,
)
from gymctl.models.identity import same_address

SESSIONS_LIMIT = 10
JOIN_SUBMISSIONS_LIMIT = 50
OWNERSHIP_EVENTS_LIMIT = 100  # spec A 8
PLATFORM_ADMIN_ACTIONS_LIMIT = 100

# Refusal and ownership events about an address rather than a user row (the person may have no
# row, or another one): they are found by the address their emitters put in data["email"].
EMAIL_MATCHED_ACTIONS = (
    "membership.invitation_held",
    "membership.registration_refused",
    "join.blocked",
    "user.email_verified",
    "user.linked",
    "invitation.accepted",
)

# Audit data is written without secrets; this is the second lock on that door.
_SECRET_KEY = re.compile(r"token|secret|password|ciphertext|national_?id|ticket", re.IGNORECASE)


def resolve_user(session: Session, ref: str) -> User:
    """The user named by database id (UUID) or identity subject (user_...); deleted ones too,
    since a trail is most wanted for an account that is gone."""
    ref = ref.strip()
    try:
        user_id = uuid.UUID(ref)
    except ValueError:
        user = session.scalar(select(User).where(User.identity_id == ref)) if ref else None
    else:
        user = session.get(User, user_id)
    if user is None:
        raise not_found(codes.USER_NOT_FOUND, f"no user with id or identity subject {ref!r}")
    return user


def ownership_trail(session: Session, user: User) -> dict[str, Any]:
    """All sections of the trail for `user`, newest first within each."""
    events, events_truncated = _ownership_events(session, user)
    actions, actions_truncated = _platform_admin_actions(session, user)
    return {
        "user": _user(user),
        "signUpOrigin": _sign_up_origin(session, user),
        "sessions": _sessions(session, user),
        "joinSubmissions": _join_submissions(session, user),
        "consents": _consents(session, user),
        "ownershipEvents": {"events": events, "truncated": events_truncated},
        "platformAdminActions": {"actions": actions, "truncated": actions_truncated},
    }


def _user(user: User) -> dict[str, Any]:
    return {
        "id": str(user.id),
        "identityId": user.identity_id,
        # Spec A 2.1: a gym-created row waits for its login; the admin view calls it Unproven.
        "loginState": "linked" if user.identity_id else "unproven",
        "email": user.email,
        "name": user.name,
        "createdAt": _iso(user.created_at),
        "deletedAt": _iso(user.deleted_at),
    }


def _sign_up_origin(session: Session, user: User) -> dict[str, Any]:
    organization = None
    if user.signup_organization_id is not None:
        org = session.get(Organization, user.signup_organization_id)
        organization = {
            "id": str(user.signup_organization_id),
            "name": org.name if org is not None else None,
        }
    join_link = None
    if user.signup_join_link_id is not None:
        link = session.get(JoinLink, user.signup_join_link_id)
        join_link = {
            "id": str(user.signup_join_link_id),
            "label": link.label if link is not None else None,
        }
    return {
        "origin": user.signup_origin,
        "organization": organization,
        "joinLink": join_link,
        "createdAt": _iso(user.created_at),
        "createdByUserId": _str(user.created_by_user_id),
        "emailVerification": {
            "verifiedAt": _iso(user.email_verified_at),
            # "provider", "migration" or the operator's user id (Mark email verified).
            "verifiedBy": user.email_verified_by,
        },
    }


def _sessions(session: Session, user: User) -> list[dict[str, Any]]:
    rows = session.scalars(
        select(UserSession)
        .where(UserSession.user_id == user.id)
        .order_by(UserSession.last_seen_at.desc(), UserSession.first_seen_at.desc())
        .limit(SESSIONS_LIMIT)
    )
    result = []
    for row in rows:
        browser, device = describe_user_agent(row.user_agent)
        result.append(
            {
                "sessionId": row.session_id,
                "ip": row.ip,
                "city": row.city,
                "country": row.country,
                "userAgent": row.user_agent,
                "browser": browser,
                "device": device,
                "impersonated": row.impersonated_by is not None,
                "impersonatedBy": row.impersonated_by,
                "firstSeenAt": _iso(row.first_seen_at),
                "lastSeenAt": _iso(row.last_seen_at),
            }
        )
    return result


def _join_submissions(session: Session, user: User) -> list[dict[str, Any]]:
    matches = [JoinSubmission.user_id == user.id]
    if user.email:
        matches.append(same_address(JoinSubmission.email, user.email))
    rows = session.scalars(
        select(JoinSubmission)
        .where(or_(*matches))
        .order_by(JoinSubmission.created_at.desc())
        .limit(JOIN_SUBMISSIONS_LIMIT)
    )
    return [
        {
            "id": str(row.id),
            "organizationId": str(row.organization_id),
            "joinLinkId": str(row.join_link_id),
            "email": row.email,
            "userId": _str(row.user_id),
            "outcome": row.outcome,
            "ip": row.ip,
            "userAgent": row.user_agent,
            "createdAt": _iso(row.created_at),
        }
        for row in rows
    ]


def _consents(session: Session, user: User) -> list[dict[str, Any]]:
    rows = session.execute(
        select(LegalConsent, LegalDocument)
        .join(LegalDocument, LegalDocument.id == LegalConsent.document_id)
        .where(LegalConsent.user_id == user.id)
        .order_by(LegalConsent.accepted_at.desc())
    )
    return [
        {
            "documentType": document.type.value,
            "documentVersion": document.version,
            "locale": document.locale,
            "acceptedAt": _iso(consent.accepted_at),
            "ip": consent.ip,
            "userAgent": consent.user_agent,
        }
        for consent, document in rows
    ]


def _targets(user: User) -> Any:
    return (AuditLog.target_type == "user") & (AuditLog.target_id == str(user.id))


def _ownership_events(session: Session, user: User) -> tuple[list[dict[str, Any]], bool]:
    """Rows targeting the user, plus the address-matched refusal events, capped at 100.

    Two queries, each for one more row than the cap: the first rides ix_audit_log_target, and
    merging both tops gives the exact top 100 of the union and whether more exist.
    """
    limit = OWNERSHIP_EVENTS_LIMIT
    newest = (AuditLog.at.desc(), AuditLog.id.desc())
    found = {
        row.id: row
        for row in session.scalars(
            select(AuditLog).where(_targets(user)).order_by(*newest).limit(limit + 1)
        )
    }
    if user.email:
        by_email = session.scalars(
            select(AuditLog)
            .where(
                AuditLog.action.in_(EMAIL_MATCHED_ACTIONS),
                same_address(AuditLog.data["email"].as_string(), user.email),
            )
            .order_by(*newest)
            .limit(limit + 1)
        )
        found.update((row.id, row) for row in by_email)
    rows = sorted(found.values(), key=lambda row: (row.at, row.id), reverse=True)
    return [_event(row) for row in rows[:limit]], len(rows) > limit


def _platform_admin_actions(session: Session, user: User) -> tuple[list[dict[str, Any]], bool]:
    limit = PLATFORM_ADMIN_ACTIONS_LIMIT
    rows = list(
        session.scalars(
            select(AuditLog)
            .where(_targets(user), AuditLog.data["platformAdmin"].as_boolean() == true())
            .order_by(AuditLog.at.desc(), AuditLog.id.desc())
            .limit(limit + 1)
        )
    )
    return [_event(row) for row in rows[:limit]], len(rows) > limit


def _event(row: AuditLog) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "at": _iso(row.at),
        "action": row.action,
        "organizationId": _str(row.organization_id),
        "actorUserId": _str(row.actor_user_id),
        "targetType": row.target_type,
        "targetId": row.target_id,
        "data": _redact(row.data or {}),
    }


def _redact(data: Any) -> Any:
    if isinstance(data, dict):
        return {
            key: _redact(value) for key, value in data.items() if not _SECRET_KEY.search(str(key))
        }
    if isinstance(data, list):
        return [_redact(value) for value in data]
    return data


_BROWSERS: tuple[tuple[str, str], ...] = (
    # Order matters: Edge, Opera and Samsung also say Chrome; Chrome also says Safari.
    (r"Edg(?:e|A|iOS)?/(\d+)", "Edge"),
    (r"OPR/(\d+)", "Opera"),
    (r"SamsungBrowser/(\d+)", "Samsung Internet"),
    (r"(?:Firefox|FxiOS)/(\d+)", "Firefox"),
    (r"(?:Chrome|CriOS)/(\d+)", "Chrome"),
    (r"Version/(\d+)[\d.]* (?:Mobile/\S+ )?Safari/", "Safari"),
    (r"okhttp/(\d+)", "Android app (okhttp)"),
    (r"Dart/(\d+)", "App (Dart)"),
    (r"CFNetwork/(\d+)", "iOS app (CFNetwork)"),
    (r"Expo/(\d+)", "App (Expo)"),
    (r"curl/(\d+)", "curl"),
    (r"python-(?:requests|httpx)/(\d+)", "Python script"),
)
_DEVICES: tuple[tuple[str, str], ...] = (
    (r"iPad", "iPad"),
    (r"iPhone|iPod", "iPhone"),
    (r"Android.*Mobile", "Android phone"),
    (r"Android", "Android tablet"),
    (r"CrOS", "ChromeOS"),
    (r"Windows", "Windows"),
    (r"Macintosh|Mac OS X", "Mac"),
    (r"Darwin", "iOS"),
    (r"Linux", "Linux"),
)
_BOT = re.compile(r"bot|crawler|spider|headless", re.IGNORECASE)


def describe_user_agent(user_agent: str | None) -> tuple[str | None, str | None]:
    """(browser, device) as short words, e.g. ("Chrome 120", "Mac"); a guess for the operator's
    eye, not a fingerprint, so a few patterns beat a parsing dependency."""
    if not user_agent:
        return None, None
    if _BOT.search(user_agent):
        return "Bot", "Automated"
    browser = "Other"
    for pattern, name in _BROWSERS:
        match = re.search(pattern, user_agent)
        if match:
            browser = f"{name} {match.group(1)}"
            break
    device = "Other"
    for pattern, name in _DEVICES:
        if re.search(pattern, user_agent):
            device = name
            break
    return browser, device


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _str(value: uuid.UUID | None) -> str | None:
    return str(value) if value is not None else None
