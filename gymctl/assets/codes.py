"""Refusal codes of gymctl.assets: every code its refusals carry, one constant each.

Listed in docs/error-codes.md (python -m gymctl.error_codes); tests/test_error_codes.py
checks every raised code is declared here and the listing is current."""

BRAND_ASSET_NOT_FOUND = "brand_asset_not_found"
BRAND_ASSET_STORED_INVALID = "brand_asset_stored_invalid"
