"""The demo gym of the quick start: an owner, a coach and members, created once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.events import EventKind, emit
from gymctl.models import (
    LegalConsent,
    LegalDocument,
    LegalDocumentType,
    Membership,
    Organization,
    Role,
    User,
)

DEMO_SLUG = "demo-gym"
DEMO_PEOPLE = (
    ("user_demo_owner", "owner@demo-gym.example", Role.owner),
    ("user_demo_coach", "coach@demo-gym.example", Role.coach),
    ("user_demo_member_1", "dana@demo-gym.example", Role.member),
    ("user_demo_member_2", "eli@demo-gym.example", Role.member),
    ("user_demo_member_3", "fran@demo-gym.example", Role.member),
)


@dataclass
class DemoGym:
    organization: Organization
    people: list[tuple[User, Role]]
    created: bool


def seed_demo_gym(session: Session, *, now: datetime) -> DemoGym:
    """Idempotent: a second run finds the gym and changes nothing."""
    existing = session.scalar(select(Organization).where(Organization.slug == DEMO_SLUG))
    if existing is not None:
        rows = session.execute(
            select(User, Membership.role)
            .join(Membership, Membership.user_id == User.id)
            .where(Membership.organization_id == existing.id)
            .order_by(Membership.created_at)
        ).all()
        return DemoGym(existing, [(user, role) for user, role in rows], created=False)

    organization = Organization(name="Demo Gym", slug=DEMO_SLUG, created_at=now)
    session.add(organization)
    documents = [
        LegalDocument(
            type=doc_type,
            version="2026-01",
            locale="en",
            url=f"https://demo-gym.example/legal/{doc_type.value}",
            published_at=now - timedelta(days=30),
        )
        for doc_type in LegalDocumentType
    ]
    session.add_all(documents)
    session.flush()
    people = []
    for offset, (identity_id, email, role) in enumerate(DEMO_PEOPLE):
        at = now + timedelta(microseconds=offset)
        user = User(
            identity_id=identity_id,
            email=email,
            email_verified_at=at,
            email_verified_by="provider",
            created_at=at,
            updated_at=at,
        )
        session.add(user)
        session.flush()
        session.add(
            Membership(
                organization_id=organization.id,
                user_id=user.id,
                role=role,
                created_at=at,
                updated_at=at,
            )
        )
        # The owner has accepted the terms of use only, so /users/me shows 2 consents owed.
        if role is Role.owner:
            session.add(LegalConsent(user_id=user.id, document_id=documents[0].id, accepted_at=at))
        people.append((user, role))
    emit(
        session,
        EventKind.domain,
        "organization.created",
        at=now,
        aggregate_type="organization",
        aggregate_id=organization.id,
        organization_id=organization.id,
        payload={"slug": DEMO_SLUG, "demo": True},
    )
    session.flush()
    return DemoGym(organization, people, created=True)


DEMO_INVITEE = ("user_demo_new_coach", "new.coach@demo-gym.example")


def demo_invitation(session: Session, outreach, demo: DemoGym, *, now: datetime) -> dict | None:
    """The owner invites a coach (the email lands in the mailbox), then the coach signs up and
    the identity provider's user.created accepts it. Skipped when already done."""
    from gymctl.access.identity_events import apply_identity_event
    from gymctl.access.invitations import create_invitation
    from gymctl.models import Invitation, MembershipStatus

    identity_id, email = DEMO_INVITEE
    if session.scalar(select(Invitation).where(Invitation.email == email)) is not None:
        return None
    owner = next(user for user, role in demo.people if role is Role.owner)
    owner_membership = session.scalar(
        select(Membership).where(
            Membership.user_id == owner.id, Membership.organization_id == demo.organization.id
        )
    )
    invitation = create_invitation(
        session,
        outreach,
        organization=demo.organization,
        actor=owner_membership,
        actor_user_id=owner.id,
        email=email,
        role=Role.coach,
        now=now,
    )
    event = {
        "type": "user.created",
        "data": {
            "id": identity_id,
            "primary_email_address_id": "idn_demo",
            "email_addresses": [
                {"id": "idn_demo", "email_address": email, "verification": {"status": "verified"}}
            ],
        },
    }
    apply_identity_event(
        session, f"msg_demo_{invitation.id.hex}", event, now=now, settings=outreach.settings
    )
    membership = session.scalar(
        select(Membership)
        .join(User, User.id == Membership.user_id)
        .where(User.identity_id == identity_id)
    )
    return {
        "email": email,
        "role": invitation.role.value,
        "status": invitation.status.value,
        "membership": membership.status.value if membership else None,
        "accepted": membership is not None and membership.status is MembershipStatus.active,
    }


def demo_logo(
    session: Session, store, demo: DemoGym, *, now: datetime, max_bytes: int
) -> dict | None:
    """The member app's logo: a flat-background JPEG through the intake pipeline with
    removeBackground, stored and referenced by the draft. Skipped when the draft has one."""
    import io

    from PIL import Image, ImageDraw

    from gymctl.assets.intake import store_upload
    from gymctl.assets.types import Slot, Transform
    from gymctl.models import MemberAppDraftAsset

    if session.get(MemberAppDraftAsset, (demo.organization.id, Slot.logo.value)) is not None:
        return None
    image = Image.new("RGB", (1600, 800), (246, 246, 246))
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((260, 180, 1340, 620), radius=120, fill=(28, 64, 160))
    draw.ellipse((640, 280, 960, 520), fill=(246, 190, 40))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    owner = next(user for user, role in demo.people if role is Role.owner)
    asset = store_upload(
        session,
        store,
        organization_id=demo.organization.id,
        slot=Slot.logo,
        data=buffer.getvalue(),
        transform=Transform(remove_background=True),
        source="upload",
        actor_user_id=owner.id,
        now=now,
        max_bytes=max_bytes,
    )
    return {
        "key": asset.key,
        "width": asset.width,
        "height": asset.height,
        "bytes": asset.bytes,
        "backgroundRemoved": asset.report["backgroundRemoved"],
    }


SHIPPED_LIBRARY = Path(__file__).resolve().parent / "movements" / "data" / "free-exercise-db.json"
LIBRARY_KEY = "libraries/free-exercise-db.json"


def publish_demo_library(store) -> str:
    """The movement library file that ships with the package (free-exercise-db, Unlicense), put
    where `gymctl movements seed libraries/free-exercise-db.json` reads it; an operator's own
    file at that key is left alone."""
    if store.get(LIBRARY_KEY) is None:
        store.put(LIBRARY_KEY, SHIPPED_LIBRARY.read_bytes(), content_type="application/json")
    return LIBRARY_KEY
