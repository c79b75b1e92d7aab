"""Refusal codes of gymctl.movements: every code its refusals carry, one constant each.

Listed in docs/error-codes.md (python -m gymctl.error_codes); tests/test_error_codes.py
checks every raised code is declared here and the listing is current."""

ALIAS_INVALID = "alias_invalid"
ALIAS_IS_NAME = "alias_is_name"
ALIAS_NOT_FOUND = "alias_not_found"
JOB_NOT_FOUND = "job_not_found"
LIBRARY_FILE_INVALID = "library_file_invalid"
LIBRARY_FILE_NOT_FOUND = "library_file_not_found"
MERGE_LOSER_MERGED_ELSEWHERE = "merge_loser_merged_elsewhere"
MERGE_PAIR_INVALID = "merge_pair_invalid"
MERGE_WINNER_DELETED = "merge_winner_deleted"
MOVEMENT_NOT_FOUND = "movement_not_found"
MOVEMENT_NOT_OWNED = "movement_not_owned"
MOVEMENT_SLUG_INVALID = "movement_slug_invalid"
MOVEMENT_SLUG_TAKEN = "movement_slug_taken"
MOVEMENT_THUMBNAIL_INVALID = "movement_thumbnail_invalid"
MOVEMENT_THUMBNAIL_TOO_LARGE = "movement_thumbnail_too_large"
MOVEMENT_VIDEO_MISSING = "movement_video_missing"
THUMBNAILS_DISABLED = "thumbnails_disabled"
VIDEO_SEARCH_UNAVAILABLE = "video_search_unavailable"
