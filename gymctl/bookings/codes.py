"""Refusal codes of gymctl.bookings: every code its refusals carry, one constant each.

Listed in docs/error-codes.md (python -m gymctl.error_codes); tests/test_error_codes.py
checks every raised code is declared here and the listing is current."""

ALREADY_BOOKED = "already_booked"
BOOKING_BLOCKED_DEBT = "booking_blocked_debt"
BOOKING_CHECKED_IN = "booking_checked_in"
BOOKING_NOT_ACTIVE = "booking_not_active"
BOOKING_NOT_CONFIRMED = "booking_not_confirmed"
BOOKING_NOT_FOUND = "booking_not_found"
CAPACITY_INVALID = "capacity_invalid"
CHECKIN_NOT_OPEN = "checkin_not_open"
CLASS_TYPE_NOT_FOUND = "class_type_not_found"
DURATION_INVALID = "duration_invalid"
MEMBERSHIP_NOT_ACTIVE = "membership_not_active"
PLAN_NOT_STARTED = "plan_not_started"
PLAN_REQUIRED_TO_BOOK = "plan_required_to_book"
SESSION_CANCELLED = "session_cancelled"
SESSION_NOT_FOUND = "session_not_found"
SESSION_NOT_STARTED = "session_not_started"
SESSION_STARTED = "session_started"
SESSION_TIMES_INVALID = "session_times_invalid"
