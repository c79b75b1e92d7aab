"""Organization routes: members, invitations, leads, join links, sales grants, the gym itself.
Every route resolves the caller's membership first and then enforces the permission matrix."""

from __future__ import annotations

import uuid
from typing import Annotated

from flask import Blueprint, Response, jsonify, request
from pydantic import Field

from gymctl.access import (
    bulk_invitations,
    compliance,
    erasure,
    gyms,
    invitations,
    join,
    member_imports,
    memberships,
    registrations,
    sales,
)
from gymctl.access.permissions import Action, Module
from gymctl.config import ConfigError
from gymctl.crypto import national_id_cipher
from gymctl.errors import unavailable
from gymctl.events import EventKind, emit
from gymctl.models import Organization, Role
from webhooks import codes
from webhooks.access import membership, org_route, owner_route, signed_in_user
from webhooks.bodies import body_limit
from webhooks.context import auth, client_ip, db, now, services
from webhooks.validation import Body, Email, one_of, parse

bp = Blueprint("organizations", __name__, url_prefix="/organizations")
ORG = "/<uuid:org_id>"


def _organization(org_id: uuid.UUID) -> Organization:
    return db().get(Organization, org_id)


def _queued(view: dict, location: str) -> Response:
    """202 Accepted: the work is queued for the daemons, and read back at `location`."""
    response = jsonify(view)
    response.status_code = 202
    response.headers["Location"] = location
    return response


def _registrar(org_id: uuid.UUID) -> registrations.Registrar:
    return registrations.Registrar(
        organization=_organization(org_id),
        staff_user_id=membership().user_id,
        ip=client_ip(),
        path=request.path,
        outreach=services().outreach,
    )


class CreateGym(Body):
    name: str = Field(min_length=1, max_length=200)
    slug: str = Field(min_length=1, max_length=64)


@bp.post("")
def create_gym():
    body = parse(CreateGym)
    organization, created = gyms.create_gym(
        db(), signed_in_user(), name=body.name, slug=body.slug, now=now()
    )
    answer = jsonify(id=str(organization.id), name=organization.name, slug=organization.slug)
    return answer, 201 if created else 200


@bp.delete(ORG)
@owner_route
def delete_gym(org_id):
    gyms.delete_organization(
        db(), _organization(org_id), actor_user_id=membership().user_id, now=now()
    )
    return jsonify(deleted=True)


@bp.post(f"{ORG}/onboarding/complete")
@owner_route
def complete_onboarding(org_id):
    organization = gyms.complete_onboarding(
        db(), _organization(org_id), actor_user_id=membership().user_id, now=now()
    )
    return jsonify(onboardingCompletedAt=organization.onboarding_completed_at.isoformat())


# --- members ---------------------------------------------------------------------------------


@bp.get(f"{ORG}/members")
@org_route(Module.members, Action.view)
def roster(org_id):
    return jsonify(members=memberships.roster(db(), org_id))


class DeskRegistration(Body):
    email: Email
    name: str | None = Field(None, max_length=200)


@bp.post(f"{ORG}/members")
@org_route(Module.members, Action.manage)
def register_at_desk(org_id):
    body = parse(DeskRegistration)
    person, created = registrations.register_member(
        db(), _registrar(org_id), email=body.email, name=body.name, origin="desk", now=now()
    )
    return jsonify(
        userId=str(person.id), created=created, login="linked" if person.identity_id else "unproven"
    ), 201 if created else 200


@bp.post(f"{ORG}/members/import")
@body_limit(registrations.MAX_ROSTER_BYTES)
@org_route(Module.members, Action.manage)
def import_members(org_id):
    """Check the roster and queue it (202 and where to read it): the daemons register its rows,
    a chunk a transaction. What is refused up front (the tier's cap, a CSV without an email
    column) is refused here, nothing queued."""
    upload = request.files.get("file")
    content = upload.read() if upload else request.get_data()
    rows = registrations.parse_members_csv(content)
    job = member_imports.queue_import(db(), _registrar(org_id), membership(), rows, now=now())
    where = f"/organizations/{org_id}/members/import/{job.id}"
    return _queued(member_imports.import_view(db(), job), where)


@bp.get(f"{ORG}/members/import/<uuid:import_id>")
@org_route(Module.members, Action.manage)
def read_member_import(org_id, import_id):
    """An import: its status and the rows done so far, by outcome, in CSV order."""
    job = member_imports.find_import(db(), org_id, import_id)
    return jsonify(member_imports.import_view(db(), job))


class RoleChange(Body):
    role: Role


@bp.patch(f"{ORG}/members/<uuid:user_id>")
@org_route(Module.members, Action.manage)
def change_role(org_id, user_id):
    body = parse(RoleChange)
    target = memberships.change_role(db(), membership(), user_id, body.role, now=now())
    return jsonify(userId=str(target.user_id), role=target.role.value)


@bp.delete(f"{ORG}/members/<uuid:user_id>")
@org_route(Module.members, Action.manage)
def remove_member(org_id, user_id):
    target = memberships.remove_member(
        db(), org_id, user_id, actor=membership(), actor_user_id=membership().user_id, now=now()
    )
    return jsonify(userId=str(target.user_id), status=target.status.value)


class NationalId(Body):
    nationalId: str = Field(min_length=4, max_length=32, pattern=r"^[0-9A-Za-z-]+$")


@bp.put(f"{ORG}/members/<uuid:user_id>/national-id")
@org_route(Module.members, Action.manage)
def set_national_id(org_id, user_id):
    """Stored encrypted on this organization's membership (never the shared user row, which
    other organizations rely on) and bound to it; the answer never echoes it."""
    body = parse(NationalId)
    member = memberships.live_membership_of(db(), org_id, user_id)  # ended: 409
    try:
        cipher = national_id_cipher(services().settings)
    except ConfigError:
        raise unavailable(
            codes.NATIONAL_ID_NOT_CONFIGURED, "national ids cannot be stored here yet"
        ) from None
    member.national_id_ciphertext = cipher.encrypt(
        body.nationalId, table="memberships", column="national_id", row_id=str(member.id)
    )
    emit(
        db(),
        EventKind.audit,
        "user.national_id_set",
        at=now(),
        aggregate_type="user",
        aggregate_id=user_id,
        organization_id=org_id,
        actor_user_id=membership().user_id,
    )
    return jsonify(userId=str(user_id), nationalIdStored=True)


@bp.post(f"{ORG}/members/<uuid:user_id>/erasure")
@owner_route
def erase_member(org_id, user_id):
    """Personal-data erasure: owner-only (spec A 2.8), audited; money records are kept."""
    done = erasure.erase_personal_data(
        db(), _organization(org_id), user_id, actor_user_id=membership().user_id, now=now()
    )
    return jsonify(userId=str(user_id), erased=done)


@bp.get(f"{ORG}/members/<uuid:user_id>/compliance.pdf")
@org_route(Module.members, Action.manage)
def compliance_pdf(org_id, user_id):
    """Spec A 2.1: the national id is released only inside this PDF, to staff who manage
    members; never cached, never in JSON."""
    document = compliance.compliance_pdf(
        db(),
        services().settings,
        _organization(org_id),
        user_id,
        actor_user_id=membership().user_id,
        now=now(),
    )
    return Response(
        document,
        mimetype="application/pdf",
        headers={
            "Content-Disposition": f'attachment; filename="compliance-{user_id}.pdf"',
            "Cache-Control": "no-store",
        },
    )


# --- invitations -----------------------------------------------------------------------------


class InvitationRequest(Body):
    email: Email
    role: Role = Role.member


@bp.get(f"{ORG}/invitations")
@org_route(Module.invitations, Action.view)
def list_invitations(org_id):
    return jsonify(invitations=invitations.list_invitations(db(), org_id))


@bp.post(f"{ORG}/invitations")
@org_route(Module.invitations, Action.manage)
def create_invitation(org_id):
    body = parse(InvitationRequest)
    invitation = invitations.create_invitation(
        db(),
        services().outreach,
        organization=_organization(org_id),
        actor=membership(),
        actor_user_id=membership().user_id,
        email=body.email,
        role=body.role,
        now=now(),
    )
    return jsonify(invitations.describe(invitation)), 201


class BulkInvitations(Body):
    emails: list[str] = Field(min_length=1, max_length=bulk_invitations.MAX_ADDRESSES)
    role: Role = Role.member


@bp.post(f"{ORG}/invitations/bulk")
@org_route(Module.invitations, Action.manage)
def bulk_invitations_queue(org_id):
    """Queue a bulk invite (202 and where to read it): the daemons invite each address in a
    transaction of its own, and its outcome is read back at the Location."""
    body = parse(BulkInvitations)
    batch = bulk_invitations.queue_batch(
        db(),
        organization=_organization(org_id),
        actor=membership(),
        emails=body.emails,
        role=body.role,
        now=now(),
    )
    where = f"/organizations/{org_id}/invitations/bulk/{batch.id}"
    return _queued(bulk_invitations.batch_view(batch), where)


@bp.get(f"{ORG}/invitations/bulk/<uuid:batch_id>")
@org_route(Module.invitations, Action.view)
def bulk_invitations_read(org_id, batch_id):
    """A bulk invite: the outcome of each address done so far, in the order given."""
    return jsonify(bulk_invitations.batch_view(bulk_invitations.find_batch(db(), org_id, batch_id)))


@bp.post(f"{ORG}/invitations/<uuid:invitation_id>/revoke")
@org_route(Module.invitations, Action.manage)
def revoke_invitation(org_id, invitation_id):
    invitation = invitations.revoke_invitation(db(), membership(), invitation_id, now=now())
    return jsonify(invitations.describe(invitation))


@bp.post(f"{ORG}/invitations/<uuid:invitation_id>/resend")
@org_route(Module.invitations, Action.manage)
def resend_invitation(org_id, invitation_id):
    invitation = invitations.resend_invitation(
        db(), services().outreach, membership(), invitation_id, now=now()
    )
    return jsonify(invitations.describe(invitation))


# --- leads -----------------------------------------------------------------------------------


class LeadRequest(Body):
    name: str = Field(min_length=1, max_length=200)
    email: Email


@bp.post(f"{ORG}/leads")
@org_route(Module.crm, Action.manage)
def create_lead(org_id):
    body = parse(LeadRequest)
    lead = registrations.create_lead(db(), org_id, name=body.name, email=body.email, now=now())
    return jsonify(id=str(lead.id), name=lead.name, email=lead.email, status=lead.status), 201


@bp.post(f"{ORG}/leads/<uuid:lead_id>/convert")
@org_route(Module.crm, Action.manage)
def convert_lead(org_id, lead_id):
    person = registrations.convert_lead(db(), _registrar(org_id), lead_id, now=now())
    return jsonify(userId=str(person.id), login="linked" if person.identity_id else "unproven")


# --- join links ------------------------------------------------------------------------------


class JoinLinkRequest(Body):
    label: str | None = Field(None, max_length=200)
    planId: uuid.UUID | None = None


@bp.get(f"{ORG}/join-links")
@org_route(Module.join_links, Action.view)
def list_join_links(org_id):
    return jsonify(
        joinEnabled=_organization(org_id).join_enabled,
        joinLinks=join.list_join_links(db(), org_id),
    )


class JoinEnabledRequest(Body):
    joinEnabled: bool


@bp.put(f"{ORG}/join-enabled")
@org_route(Module.join_links, Action.manage)
def set_join_enabled(org_id):
    """organizations.join_enabled: off makes every join link of the gym answer 404."""
    body = parse(JoinEnabledRequest)
    organization = join.set_join_enabled(
        db(), _organization(org_id), body.joinEnabled, actor_user_id=membership().user_id, now=now()
    )
    return jsonify(joinEnabled=organization.join_enabled)


@bp.post(f"{ORG}/join-links")
@org_route(Module.join_links, Action.manage)
def create_join_link(org_id):
    body = parse(JoinLinkRequest)
    link = join.create_join_link(
        db(),
        org_id,
        actor_user_id=membership().user_id,
        label=body.label,
        plan_id=body.planId,
        now=now(),
    )
    return jsonify(join.describe(link)), 201


@bp.post(f"{ORG}/join-links/<uuid:link_id>/revoke")
@org_route(Module.join_links, Action.manage)
def revoke_join_link(org_id, link_id):
    link = join.revoke_join_link(
        db(), org_id, link_id, actor_user_id=membership().user_id, now=now()
    )
    return jsonify(join.describe(link))


@bp.post(f"{ORG}/join-links/<uuid:link_id>/pause")
@org_route(Module.join_links, Action.manage)
def pause_join_link(org_id, link_id):
    link = join.set_link_active(
        db(), org_id, link_id, False, actor_user_id=membership().user_id, now=now()
    )
    return jsonify(join.describe(link))


@bp.post(f"{ORG}/join-links/<uuid:link_id>/resume")
@org_route(Module.join_links, Action.manage)
def resume_join_link(org_id, link_id):
    link = join.set_link_active(
        db(), org_id, link_id, True, actor_user_id=membership().user_id, now=now()
    )
    return jsonify(join.describe(link))


# --- sales -----------------------------------------------------------------------------------


class SalesGrantRequest(Body):
    userId: uuid.UUID
    scope: Annotated[str, one_of(sales.SCOPES)]
    manager: bool = False


@bp.post(f"{ORG}/sales-grants")
@org_route(Module.sales, Action.manage)
def grant_sales(org_id):
    body = parse(SalesGrantRequest)
    grant = sales.grant_sales(
        db(), membership(), body.userId, scope=body.scope, manager=body.manager, now=now()
    )
    return jsonify(id=str(grant.id), scope=grant.scope, manager=grant.manager), 201


@bp.delete(f"{ORG}/sales-grants/<uuid:grant_id>")
@org_route(Module.sales, Action.manage)
def revoke_sales(org_id, grant_id):
    grant = sales.revoke_sales(db(), membership(), grant_id, now=now())
    return jsonify(id=str(grant.id), revoked=grant.revoked_at is not None)


@bp.get(f"{ORG}/me/sales-access")
def my_sales_access(org_id):
    """Own records (outside the matrix): any active member may ask about themself."""
    mine = memberships.resolve_membership(db(), org_id, auth().user)
    access = sales.sales_access(db(), mine)
    return jsonify(
        salesAccess=None if access is None else {"scope": access.scope, "manager": access.manager}
    )


my_sales_access.gymctl_access = ("own",)  # type: ignore[attr-defined]
