"""All tables; importing this package registers every model on `Base.metadata`."""

from gymctl.models.base import Base
from gymctl.models.daemons import JobRun
from gymctl.models.events import AuditLog, OutboxEvent
from gymctl.models.identity import IdentityWebhookDelivery, User
from gymctl.models.legal import LegalConsent, LegalDocument, LegalDocumentType
from gymctl.models.organizations import (
    Membership,
    MembershipStatus,
    Organization,
    OrganizationStatus,
    Role,
)

__all__ = [
    "AuditLog",
    "Base",
    "IdentityWebhookDelivery",
    "JobRun",
    "LegalConsent",
    "LegalDocument",
    "LegalDocumentType",
    "Membership",
    "MembershipStatus",
    "Organization",
    "OrganizationStatus",
    "OutboxEvent",
    "Role",
    "User",
]
