"""Video discovery (spec B 4.5 /video/discover, 8): search candidates for movements.

Queries per movement: the name plus "demo"; with 2 queries a how-to query; with 3 the first
alias; then one query per trusted channel beyond that cap. Candidates are kept only between
15 s and 4 min and never twice (nor when rejected before). Discovery never removes anything and
saves what it found even when the quota or the API stops it midway. Each search costs 100 units
of a daily quota (10 000 by default) and a run makes at most maxSearches (90) searches.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from gymctl.config import Settings
from gymctl.db import advisory_lock
from gymctl.models import Movement, VideoSearchQuota
from gymctl.movements.clients import (
    DETAILS_UNITS,
    SEARCH_UNITS,
    ProviderUnavailable,
    QuotaExceeded,
    VideoSearch,
)
from gymctl.movements.progress import SILENT, Progress
from gymctl.movements.targets import canonical_rows

MIN_SECONDS, MAX_SECONDS = 15, 240
DISABLED = "video search is disabled: GYMCTL_VIDEO_SEARCH_KEY is unset"


def queries(
    movement: Movement, per_movement: int, trusted: Sequence[str]
) -> list[tuple[str, str | None]]:
    """(query, channel id) pairs in the spec's order."""
    planned: list[tuple[str, str | None]] = [(f"{movement.name} demo", None)]
    if per_movement >= 2:
        planned.append((f"how to do {movement.name}", None))
    if per_movement >= 3 and movement.aliases:
        planned.append((movement.aliases[0], None))
    planned += [(movement.name, channel) for channel in trusted]
    return planned


def discover(
    session: Session,
    search: VideoSearch | None,
    settings: Settings,
    *,
    now: datetime,
    limit: int | None = None,
    ids: Sequence[uuid.UUID] | None = None,
    slugs: Sequence[str] | None = None,
    force: bool = False,
    progress: Progress = SILENT,
) -> dict[str, Any]:
    rows = canonical_rows(session, ids=ids, slugs=slugs, exclude_manual_video=True)
    result: dict[str, Any] = {
        "searchesUsed": 0,
        "quotaUnitsUsed": 0,
        "quotaExhausted": False,
        "candidatesAdded": 0,
        "searched": 0,
    }
    if search is None:
        return {**result, **_coverage(rows), "disabled": DISABLED}
    todo = [m for m in rows if force or not m.video_candidates]
    if limit is not None:
        todo = todo[:limit]
    advisory_lock(session, "movements:video-quota")
    quota = session.get(VideoSearchQuota, now.date(), with_for_update=True)
    if quota is None:
        quota = VideoSearchQuota(day=now.date(), units_used=0)
        session.add(quota)
    trusted = settings.video_trusted_channels
    progress.start("discover", len(todo))
    for movement in todo:
        planned = queries(movement, settings.video_queries_per_movement, trusted)
        cost = len(planned) * (SEARCH_UNITS + DETAILS_UNITS)
        if result["searchesUsed"] + len(planned) > settings.video_max_searches:
            break
        if quota.units_used + cost > settings.video_daily_quota:
            result["quotaExhausted"] = True
            break
        try:
            _search_one(movement, search, planned, trusted, quota, result, now)
        except QuotaExceeded:
            quota.units_used = max(quota.units_used, settings.video_daily_quota)
            result["quotaExhausted"] = True
            break
        except ProviderUnavailable as error:
            result["error"] = error.message
            break
        finally:
            session.flush()
        result["searched"] += 1
        progress.advance()
    return {**result, **_coverage(rows)}


def _coverage(rows: list[Movement]) -> dict[str, int]:
    covered = sum(1 for m in rows if m.video_candidates)
    return {"covered": covered, "remaining": len(rows) - covered}


def _search_one(
    movement: Movement,
    search: VideoSearch,
    planned: list[tuple[str, str | None]],
    trusted: Sequence[str],
    quota: VideoSearchQuota,
    result: dict[str, Any],
    now: datetime,
) -> None:
    """One movement's searches; its new candidates are saved even if a later query fails."""
    known = {c.get("videoId") for c in movement.video_candidates or []}
    known |= set(movement.video_rejected_ids or [])
    for query, channel in planned:
        found = [f for f in search.search(query, channel_id=channel) if f.video_id not in known]
        quota.units_used += SEARCH_UNITS
        result["searchesUsed"] += 1
        result["quotaUnitsUsed"] += SEARCH_UNITS
        if not found:
            continue
        details = search.details([f.video_id for f in found])
        quota.units_used += DETAILS_UNITS
        result["quotaUnitsUsed"] += DETAILS_UNITS
        for item in found:
            info = details.get(item.video_id)
            seconds = info.duration_seconds if info else None
            if seconds is None or not MIN_SECONDS <= seconds <= MAX_SECONDS:
                continue
            known.add(item.video_id)
            movement.video_candidates = [
                *(movement.video_candidates or []),
                {
                    "url": f"https://www.youtube.com/watch?v={item.video_id}",
                    "videoId": item.video_id,
                    "title": item.title,
                    "channelId": item.channel_id,
                    "channelTitle": item.channel_title,
                    "trusted": item.channel_id in trusted,
                    "durationSeconds": seconds,
                    "viewCount": info.view_count if info else 0,
                    "score": None,
                    "modelScore": None,
                    "source": "youtube-search",
                    "discoveredAt": now.isoformat(),
                },
            ]
            movement.updated_at = now
            result["candidatesAdded"] += 1
