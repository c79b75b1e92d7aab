"""Refusal codes of gymctl.cli: every code its refusals carry, one constant each.

Listed in docs/error-codes.md (python -m gymctl.error_codes); tests/test_error_codes.py
checks every raised code is declared here and the listing is current."""

BILLING_LIFECYCLE_DAY_INVALID = "billing_lifecycle_day_invalid"
BRIDGE_BUSY = "bridge_busy"
BRIDGE_CALL_FAILED = "bridge_call_failed"
BRIDGE_DISABLED = "bridge_disabled"
BRIDGE_NOT_CONNECTED = "bridge_not_connected"
CHANNEL_UNKNOWN = "channel_unknown"
CURSOR_INVALID = "cursor_invalid"
FEATURE_SWITCH_STATE_INVALID = "feature_switch_state_invalid"
JOIN_ENABLED_INVALID = "join_enabled_invalid"
KEY_EXISTS = "key_exists"
MERGE_PAIR_INVALID = "merge_pair_invalid"
OPERATOR_UNKNOWN = "operator_unknown"
OPERATOR_USER_REQUIRED = "operator_user_required"
OUTPUT_UNWRITABLE = "output_unwritable"
PUSH_CREDENTIAL_EMPTY = "push_credential_empty"
STAFF_REQUIRED = "staff_required"
TIMESTAMP_NOT_UTC = "timestamp_not_utc"
WEBSITE_CONTENT_INVALID = "website_content_invalid"
