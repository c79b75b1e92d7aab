"""All tables; importing this package registers every model on `Base.metadata`."""

from gymctl.models import releases  # noqa: F401 (registers the release tables)
from gymctl.models.access import (
    Invitation,
    InvitationBatch,
    InvitationBatchStatus,
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
    DocumentCounter,
    MemberEmail,
    PaymentMethod,
    PaymentProviderConfig,
    PaymentTransaction,
    Plan,
    Subscription,
)
from gymctl.models.bookings import Booking, BookingStatus, ClassSession, ClassType
from gymctl.models.brand import (
    BrandDraft,
    BrandRevision,
    MemberAppDraft,
    MemberAppVersion,
    Website,
    WebsiteRevision,
)
from gymctl.models.branding import BrandAsset, MemberAppDraftAsset, RateWindow
from gymctl.models.bridge import (
    BridgeIssue,
    EntityLink,
    IntegrationConnection,
    RosterEntry,
    SyncOp,
)
from gymctl.models.daemons import JobRun
from gymctl.models.events import AuditLog, OutboxEvent
from gymctl.models.forecasts import ForecastRun, ForecastRunStatus
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
from gymctl.models.retention import (
    CancellationNotice,
    CancellationSettlement,
    RetentionCase,
    RetentionContact,
    RetentionDigest,
)

__all__ = [
    "ACTIVE_MEMBER_CAP",
    "AuditLog",
    "Base",
    "BillingSettings",
    "Booking",
    "BookingStatus",
    "BrandAsset",
    "BrandDraft",
    "BrandRevision",
    "BridgeIssue",
    "CancellationNotice",
    "CancellationSettlement",
    "Checkout",
    "ClassSession",
    "ClassType",
    "DocumentCounter",
    "EntityLink",
    "ForecastRun",
    "ForecastRunStatus",
    "IdentityWebhookDelivery",
    "IntegrationConnection",
    "Invitation",
    "InvitationBatch",
    "InvitationBatchStatus",
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
    "MemberEmail",
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
    "RetentionCase",
    "RetentionContact",
    "RetentionDigest",
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
