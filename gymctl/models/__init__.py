"""All tables; importing this package registers every model on `Base.metadata`."""

from gymctl.models.access import (
    Invitation,
    InvitationStatus,
    JoinLink,
    JoinSubmission,
    Lead,
    SalesGrant,
    Task,
)
from gymctl.models.base import Base
from gymctl.models.branding import BrandAsset, MemberAppDraftAsset, RateWindow
from gymctl.models.daemons import JobRun
from gymctl.models.events import AuditLog, OutboxEvent
from gymctl.models.identity import IdentityWebhookDelivery, User, UserSession
from gymctl.models.legal import LegalConsent, LegalDocument, LegalDocumentType
from gymctl.models.organizations import (
    ACTIVE_MEMBER_CAP,
    Membership,
    MembershipStatus,
    Organization,
    OrganizationStatus,
    Role,
    Tier,
)

__all__ = [
    "ACTIVE_MEMBER_CAP",
    "AuditLog",
    "Base",
    "BrandAsset",
    "IdentityWebhookDelivery",
    "Invitation",
    "InvitationStatus",
    "JobRun",
    "JoinLink",
    "JoinSubmission",
    "Lead",
    "LegalConsent",
    "LegalDocument",
    "LegalDocumentType",
    "MemberAppDraftAsset",
    "Membership",
    "MembershipStatus",
    "Organization",
    "OrganizationStatus",
    "OutboxEvent",
    "RateWindow",
    "Role",
    "SalesGrant",
    "Task",
    "Tier",
    "User",
    "UserSession",
]
