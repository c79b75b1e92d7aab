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
CLASS_TYPE_NAME_INVALID = "class_type_name_invalid"
CLASS_TYPE_NOT_FOUND = "class_type_not_found"
# ours (spec A 2.7: only staff coach): 422, a session's coach is an active owner, admin or coach
COACH_INELIGIBLE = "coach_ineligible"
DURATION_INVALID = "duration_invalid"
MEMBERSHIP_NOT_ACTIVE = "membership_not_active"
ORGANIZATION_NOT_FOUND = "organization_not_found"
PLAN_ENDS_BEFORE_SESSION = "plan_ends_before_session"
PLAN_NOT_STARTED = "plan_not_started"
PLAN_REQUIRED_TO_BOOK = "plan_required_to_book"
PLAN_SESSIONS_USED_UP = "plan_sessions_used_up"
SESSION_CANCELLED = "session_cancelled"
SESSION_NOT_FOUND = "session_not_found"
SESSION_NOT_STARTED = "session_not_started"
SESSION_STARTED = "session_started"
SESSION_TIMES_INVALID = "session_times_invalid"
