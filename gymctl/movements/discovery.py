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
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy.orm import Session

from gymctl.config import Settings
from gymctl.db import advisory_lock
from gymctl.errors import unavailable
from gymctl.models import Movement, VideoSearchQuota
from gymctl.movements import codes
from gymctl.movements.audit import audit_library
from gymctl.movements.clients import (
    DETAILS_UNITS,
    SEARCH_UNITS,
    ProviderUnavailable,
    QuotaExceeded,
    VideoSearch,
)
from gymctl.movements.progress import SILENT, Progress
from gymctl.movements.targets import canonical_rows
from gymctl.movements.units import Checkpoint, fresh, keep, left_alone

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
    actor_user_id: uuid.UUID | None = None,
    progress: Progress = SILENT,
    checkpoint: Checkpoint = keep,
) -> dict[str, Any]:
    """A movement is a unit (units.py): its searches' most units are reserved on the day's
    quota and committed before it searches, so concurrent runs never overspend; its
    candidates and the units it did not spend are written after. A run stopped between the
    two keeps the reservation (the quota errs on the spent side) and the movement stays
    uncovered, to be searched again."""
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
    day = now.date()
    _quota(session, day)
    trusted = settings.video_trusted_channels
    progress.start("discover", len(todo))
    for movement in todo:
        planned = queries(movement, settings.video_queries_per_movement, trusted)
        cost = len(planned) * (SEARCH_UNITS + DETAILS_UNITS)
        if result["searchesUsed"] + len(planned) > settings.video_max_searches:
            break
        quota = _quota(session, day)
        if quota.units_used + cost > settings.video_daily_quota:
            result["quotaExhausted"] = True
            break
        quota.units_used += cost
        known = {c.get("videoId") for c in movement.video_candidates or []}
        known |= set(movement.video_rejected_ids or [])
        checkpoint()
        found = _search_one(search, planned, trusted, known, now)
        quota = _quota(session, day)
        quota.units_used += found.units - cost
        result["searchesUsed"] += found.searches
        result["quotaUnitsUsed"] += found.units
        result["candidatesAdded"] += _save(session, movement.id, found.candidates, now)
        if isinstance(found.stopped, QuotaExceeded):
            quota.units_used = max(quota.units_used, settings.video_daily_quota)
            result["quotaExhausted"] = True
        elif found.stopped is not None:
            result["error"] = found.stopped.message
        session.flush()
        if found.stopped is not None:
            break
        result["searched"] += 1
        progress.advance()
    result.update(_coverage(rows))
    audit_library(session, "movements.videos_discovered", now, actor_user_id, result)
    return result


def _quota(session: Session, day: date) -> VideoSearchQuota:
    """The day's quota row as stored now, held by this transaction (made on first use)."""
    session.flush()
    advisory_lock(session, "movements:video-quota")
    quota = session.get(VideoSearchQuota, day, with_for_update=True, populate_existing=True)
    if quota is None:
        quota = VideoSearchQuota(day=day, units_used=0)
        session.add(quota)
        session.flush()
    return quota


def _coverage(rows: list[Movement]) -> dict[str, int]:
    covered = sum(1 for m in rows if m.video_candidates)
    return {"covered": covered, "remaining": len(rows) - covered}


@dataclass
class _Found:
    """One movement's searches: what they found and spent, and the error that stopped them."""

    candidates: list[dict[str, Any]] = field(default_factory=list)
    searches: int = 0
    units: int = 0
    stopped: ProviderUnavailable | None = None


def _search_one(
    search: VideoSearch,
    planned: list[tuple[str, str | None]],
    trusted: Sequence[str],
    known: set[str | None],
    now: datetime,
) -> _Found:
    """One movement's searches, with no transaction open; what they found before an error is
    kept."""
    found = _Found()
    try:
        for query, channel in planned:
            new = [f for f in search.search(query, channel_id=channel) if f.video_id not in known]
            found.searches += 1
            found.units += SEARCH_UNITS
            if not new:
                continue
            details = search.details([f.video_id for f in new])
            found.units += DETAILS_UNITS
            for item in new:
                info = details.get(item.video_id)
                seconds = info.duration_seconds if info else None
                if seconds is None or not MIN_SECONDS <= seconds <= MAX_SECONDS:
                    continue
                known.add(item.video_id)
                found.candidates.append(
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
                    }
                )
    except ProviderUnavailable as error:  # QuotaExceeded too
        found.stopped = error
    return found


def _save(
    session: Session, movement_id: uuid.UUID, candidates: list[dict[str, Any]], now: datetime
) -> int:
    """Append the candidates the row as stored now has not seen; how many were added. A row
    merged away or made manual meanwhile is never touched (as ranking's)."""
    movement = fresh(session, movement_id)
    if left_alone(movement):
        return 0
    known = {c.get("videoId") for c in movement.video_candidates or []}
    known |= set(movement.video_rejected_ids or [])
    new = [c for c in candidates if c["videoId"] not in known]
    if new:
        movement.video_candidates = [*(movement.video_candidates or []), *new]
        movement.updated_at = now
    return len(new)


def refuse_if_stopped(result: dict[str, Any], answer: dict[str, Any]) -> None:
    """A pass the search API stopped (down, or refusing the key) kept what it found, but did
    not do its work: for a door that tells success by its exit status (the command line), a
    refusal carrying the answer beside its code."""
    if "error" in result:
        raise unavailable(codes.VIDEO_SEARCH_UNAVAILABLE, result["error"], **answer)
