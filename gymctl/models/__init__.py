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
from gymctl.models.billing import (
    BillingSettings,
    Checkout,
    PaymentMethod,
    PaymentProviderConfig,
    PaymentTransaction,
    Plan,
    Subscription,
)
from gymctl.models.brand import (
    BrandDraft,
    BrandRevision,
    MemberAppDraft,
    MemberAppVersion,
    Website,
    WebsiteRevision,
)
from gymctl.models.branding import BrandAsset, MemberAppDraftAsset, RateWindow
from gymctl.models.bridge import EntityLink, IntegrationConnection, RosterEntry, SyncOp
from gymctl.models.daemons import JobRun
from gymctl.models.events import AuditLog, OutboxEvent
from gymctl.models.identity import IdentityWebhookDelivery, User, UserSession
from gymctl.models.legal import LegalConsent, LegalDocument, LegalDocumentType
from gymctl.models.movements import (
    Movement,
    MovementJob,
    MovementVideoReport,
    VideoSearchQuota,
    Workout,
    WorkoutMovement,
)
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
    "BillingSettings",
    "BrandAsset",
    "BrandDraft",
    "BrandRevision",
    "Checkout",
    "EntityLink",
    "IdentityWebhookDelivery",
    "IntegrationConnection",
    "Invitation",
    "InvitationStatus",
    "JobRun",
    "JoinLink",
    "JoinSubmission",
    "Lead",
    "LegalConsent",
    "LegalDocument",
    "LegalDocumentType",
    "MemberAppDraft",
    "MemberAppDraftAsset",
    "MemberAppVersion",
    "Membership",
    "MembershipStatus",
    "Movement",
    "MovementJob",
    "MovementVideoReport",
    "Organization",
    "OrganizationStatus",
    "OutboxEvent",
    "PaymentMethod",
    "PaymentProviderConfig",
    "PaymentTransaction",
    "Plan",
    "RateWindow",
    "Role",
    "RosterEntry",
    "SalesGrant",
    "Subscription",
    "SyncOp",
    "Task",
    "Tier",
    "User",
    "UserSession",
    "VideoSearchQuota",
    "Website",
    "WebsiteRevision",
    "Workout",
    "WorkoutMovement",
]
