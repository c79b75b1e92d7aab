"""What each op type carries, and the aggregate it is ordered within.

Every op about one member (the person, the free bridge membership, the bookings) shares the key
`member:<membership id>`: a booking needs the external user and its bridge membership to exist
first, so they must reach the external system in the order the platform made them. A coach
change is ordered per class session.
"""

from __future__ import annotations

import uuid
from datetime import date
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from gymctl.bridge import codes
from gymctl.errors import invalid
from gymctl.models.bridge import OpType

TEXT = r"^[^\x00]*$"


def member_key(membership_id: Any) -> str:
    """The aggregate of a member's ops (their user, bridge membership and bookings): one order."""
    return f"member:{membership_id}"


class _Payload(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    def aggregate_key(self) -> str:
        return member_key(self.member_id)  # type: ignore[attr-defined]


class MemberPayload(_Payload):
    """user.create and user.update: the member's full current details (an update replaces a
    waiting one). The phone is used for identity search and sent, never stored in rosters."""

    member_id: uuid.UUID
    # Required but in a deactivation, which carries no personal data (see `active`).
    first_name: str | None = Field(None, min_length=1, max_length=200, pattern=TEXT)
    last_name: str | None = Field(None, max_length=200, pattern=TEXT)
    email: str | None = Field(None, max_length=320, pattern=TEXT)
    phone: str | None = Field(None, max_length=40, pattern=TEXT)
    # user.update only: False deactivates the external user of a member whose membership ended
    # (mirror.member_retired; spec B 4.6 writes no deletes): only the flag is stored and sent.
    # True makes it active again, with the member's details (a member who came back).
    active: bool | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _named(cls, data: Any, handler: Any) -> MemberPayload:
        parsed = handler(data)
        if parsed.first_name is None and parsed.active is not False:
            raise ValidationError.from_exception_data(
                cls.__name__, [{"type": "missing", "loc": ("firstName",), "input": data}]
            )
        return parsed

    def fields(self) -> dict[str, Any]:
        """The external system's user fields."""
        if self.active is False:
            return {"active": False}
        sent = {"first_name": self.first_name, "last_name": self.last_name or "",
                "email": self.email}  # fmt: skip
        if self.phone:
            sent["phone"] = self.phone
        if self.active:
            sent["active"] = True
        return sent


class MembershipPayload(_Payload):
    """membership.*: the free bridge membership standing for one platform subscription."""

    member_id: uuid.UUID
    subscription_id: uuid.UUID
    start_date: date
    end_date: date | None = None


class BookingPayload(_Payload):
    member_id: uuid.UUID
    booking_id: uuid.UUID
    session_id: uuid.UUID
    # A create that minds its class (class_key): how many of the class's earlier cancels may
    # still be on their way when it goes (see mirror._class_key). Not sent anywhere.
    spare_seats: int | None = Field(None, ge=0)


class CoachPayload(_Payload):
    session_id: uuid.UUID
    coach_id: uuid.UUID  # the coach's platform membership (entity type staff)

    def aggregate_key(self) -> str:
        return f"schedule:{self.session_id}"


PAYLOADS: dict[OpType, type[_Payload]] = {
    OpType.user_create: MemberPayload,
    OpType.user_update: MemberPayload,
    OpType.membership_assign: MembershipPayload,
    OpType.membership_update: MembershipPayload,
    OpType.membership_cancel: MembershipPayload,
    OpType.membership_hold: MembershipPayload,
    OpType.booking_create: BookingPayload,
    OpType.booking_cancel: BookingPayload,
    OpType.schedule_coach: CoachPayload,
}


def parse_payload(op_type: OpType, payload: dict[str, Any]) -> _Payload:
    """The op's payload, validated; bridge_op_not_allowed for what is never written (leads)."""
    model = PAYLOADS.get(op_type)
    if model is None:
        raise invalid(
            codes.BRIDGE_OP_NOT_ALLOWED,
            f"{op_type.value} is never written to the external system",
        )
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        fields = [".".join(str(p) for p in e["loc"]) for e in error.errors()]
        raise invalid(
            codes.BRIDGE_PAYLOAD_INVALID, f"invalid {op_type.value} payload", fields=fields
        ) from None


def dump(payload: _Payload) -> dict[str, Any]:
    return payload.model_dump(mode="json", by_alias=True, exclude_none=True)
