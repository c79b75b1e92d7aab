"""Refusal codes of gymctl's top-level modules and the daemons: one constant each.

Listed in docs/error-codes.md (python -m gymctl.error_codes); tests/test_error_codes.py
checks every raised code is declared here and the listing is current."""

RATE_LIMITED = "rate_limited"
SCHEMA_UNSUPPORTED = "schema_unsupported"
UNKNOWN_JOB = "unknown_job"
TASK_NOT_FOUND = "task_not_found"
TASK_CLOSES_ITSELF = "task_closes_itself"
