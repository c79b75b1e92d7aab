"""Choosing each movement's video (spec B 3 video candidate row, 4.5 /video/rank, demote,
verify, member reports).

The pick reads modelScore only: a legacy score never competes and an unscored candidate counts
0. Ties go to a trusted channel, then the shorter video, then the more viewed, then list order.
Below the threshold the row shows no video. Rows with video_status manual are never touched; a
verified (reviewed) video stays while the rest are scored.

A failure of the language model costs only its movement: scores already paid for are kept and
written, the movement is reported `failed` with the error, and after MAX_FAILURES failures in a
run the rows still needing scores are reported `pending` without a call. Scores live on the
candidates, so the next run resumes where this one stopped.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gymctl.config import Settings
from gymctl.errors import conflict, not_found
from gymctl.models import Movement, MovementVideoReport
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.movements import codes
from gymctl.movements.audit import audit, audit_library
from gymctl.movements.clients import ChatModel, ProviderUnavailable
from gymctl.movements.progress import SILENT, Progress
from gymctl.movements.targets import canonical_rows
from gymctl.movements.units import Checkpoint, fresh, keep, left_alone

OUTCOMES = ("kept", "changed", "cleared", "filled", "still_none", "failed", "pending")
MAX_FAILURES = 3  # model failures in one run before it stops calling the model
REPORTS_TO_DEMOTE = 3
DISABLED = "video ranking is disabled: GYMCTL_LLM_KEY is unset"
SCORING_PROMPT = (
    "You rate exercise demonstration videos for a gym's movement library. For each candidate, "
    "give a score from 0 to 1: how well it shows a clear, correct demonstration of exactly this "
    'movement (not a variant). Answer JSON: {"scores": [{"videoId": "...", "score": 0.0}]}.'
)


# The paths that name a YouTube video by their next part (youtube.com/shorts/ID, /embed/ID...).
_VIDEO_PATHS = ("shorts", "embed", "live", "v")
_YOUTUBE = ("youtube.com", "youtube-nocookie.com")


def video_id(url: str) -> str:
    """The video's id for the rejected list, however its link is spelled: the v= parameter, a
    youtu.be link's path, or the part after /shorts/, /embed/, /live/ or /v/; else the URL
    itself. Discovery's candidates carry the bare id: a video demoted under another spelling
    of its link was found again and shown."""
    parts = urlsplit(url)
    values = parse_qs(parts.query).get("v")
    if values:
        return values[0]
    host = (parts.hostname or "").lower().removeprefix("www.")
    path = [part for part in parts.path.split("/") if part]
    if host == "youtu.be" and path:
        return path[0]
    youtube = host in _YOUTUBE or host.endswith(".youtube.com")
    if youtube and len(path) >= 2 and path[0] in _VIDEO_PATHS and path[1] != "videoseries":
        return path[1]
    return url


def is_rejected(url: str, rejected_ids: list[str] | None) -> bool:
    """The video of `url` is on the rejected list: by its id, or by the whole link a row
    rejected before video_id read every spelling stored."""
    ids = rejected_ids or []
    return video_id(url) in ids or url in ids


def choose(candidates: list[dict[str, Any]], threshold: float, rejected: set[str]):
    """The winning candidate (or None when the best is below the threshold)."""
    live = [(i, c) for i, c in enumerate(candidates) if c.get("videoId") not in rejected]
    if not live:
        return None

    def order(item: tuple[int, dict[str, Any]]) -> tuple:
        index, c = item
        return (
            -(c.get("modelScore") or 0.0),
            not c.get("trusted", False),
            c.get("durationSeconds") or 10**9,
            -(c.get("viewCount") or 0),
            index,
        )

    best = min(live, key=order)[1]
    return best if (best.get("modelScore") or 0.0) >= threshold else None


def outcome(previous: str | None, chosen: str | None) -> str:
    if previous and chosen:
        return "kept" if previous == chosen else "changed"
    if previous:
        return "cleared"
    return "filled" if chosen else "still_none"


def _scoring_request(movement: Movement, unscored: list[dict[str, Any]]) -> str:
    listing = [
        {
            "videoId": c.get("videoId"),
            "title": c.get("title"),
            "channel": c.get("channelTitle"),
            "seconds": c.get("durationSeconds"),
        }
        for c in unscored
    ]
    return json.dumps(
        {"movement": movement.name, "aliases": movement.aliases or [], "candidates": listing}
    )


def _score(llm: ChatModel, user: str) -> tuple[dict[str, float], int]:
    answer, usage = llm.complete_json(SCORING_PROMPT, user)
    scores = {}
    for item in answer.get("scores") or []:
        if not isinstance(item, dict):
            continue
        score = item.get("score")
        if isinstance(score, int | float) and not isinstance(score, bool) and 0 <= score <= 1:
            scores[str(item.get("videoId"))] = float(score)
    return scores, llm.cost_micros(usage)


def rank(
    session: Session,
    llm: ChatModel | None,
    settings: Settings,
    *,
    now: datetime,
    dry_run: bool = False,
    limit: int | None = None,
    slugs: list[str] | None = None,
    include_uncovered: bool = False,
    actor_user_id: uuid.UUID | None = None,
    progress: Progress = SILENT,
    checkpoint: Checkpoint = keep,
) -> dict[str, Any]:
    """Each movement is a unit (units.py): the model scores its candidates with no
    transaction open, and the pick is made on the row as stored by then."""
    if llm is None:
        return {"disabled": DISABLED, "dryRun": dry_run}
    rows = canonical_rows(session, slugs=slugs, exclude_manual_video=True)
    skipped = [m for m in rows if not m.video_candidates and not include_uncovered]
    rows = [m for m in rows if m.video_candidates or include_uncovered]
    if limit is not None:
        rows = rows[:limit]
    summary: dict[str, Any] = dict.fromkeys(OUTCOMES, 0)
    cost, report = 0, []
    progress.start("rank", len(rows))
    for movement in rows:
        candidates = [dict(c) for c in movement.video_candidates or []]
        unscored = [c for c in candidates if c.get("modelScore") is None]
        scores: dict[str, float] = {}
        if unscored:
            if summary["failed"] >= MAX_FAILURES:
                summary["pending"] += 1
                report.append(_unranked(movement, candidates, "pending", dry_run))
                progress.advance()
                continue
            user = _scoring_request(movement, unscored)
            checkpoint()
            try:
                scores, spent = _score(llm, user)
            except ProviderUnavailable as error:
                summary["failed"] += 1
                failed = _unranked(movement, candidates, "failed", dry_run)
                report.append({**failed, "error": {"code": error.code, "message": error.message}})
                progress.advance()
                continue
            cost += spent
        current = fresh(session, movement.id)
        if left_alone(current):
            progress.advance()  # merged or made manual meanwhile: never touched
            continue
        movement = current
        candidates = [dict(c) for c in movement.video_candidates or []]
        for c in candidates:
            if c.get("modelScore") is None and c.get("videoId") in scores:
                c["modelScore"] = scores[c["videoId"]]
        rejected = set(movement.video_rejected_ids or [])
        if movement.video_status == "reviewed" and movement.video_url:
            chosen_url = movement.video_url
            chosen = next((c for c in candidates if c.get("url") == chosen_url), None)
        else:
            chosen = choose(candidates, settings.video_score_threshold, rejected)
            chosen_url = chosen["url"] if chosen else None
        result = outcome(movement.video_url, chosen_url)
        summary[result] += 1
        report.append(
            {
                "id": str(movement.id),
                "slug": movement.slug,
                "chosen": _brief(chosen)
                if chosen
                else ({"url": chosen_url} if chosen_url else None),
                "rejected": [_brief(c) for c in candidates if c is not chosen],
                "previousUrl": movement.video_url,
                "outcome": result,
                "covered": bool(candidates),
                "candidateCount": len(candidates),
                "dryRun": dry_run,
            }
        )
        if not dry_run:
            movement.video_candidates = candidates
            if movement.video_status != "reviewed":
                movement.video_url = chosen_url
                movement.video_status = "auto" if chosen_url else "none"
            movement.updated_at = now
        progress.advance()
    summary.update(uncovered=len(skipped), costUsdMicros=cost, dryRun=dry_run, model=llm.model)
    if not dry_run:
        session.flush()
        audit_library(session, "movements.videos_ranked", now, actor_user_id, summary)
    return {"summary": summary, "skippedUncovered": len(skipped), "report": report}


def _unranked(movement: Movement, candidates: list, outcome: str, dry_run: bool) -> dict:
    """The report row of a movement left as it was (its scores could not be had)."""
    return {
        "id": str(movement.id),
        "slug": movement.slug,
        "chosen": None,
        "rejected": [],
        "previousUrl": movement.video_url,
        "outcome": outcome,
        "covered": bool(candidates),
        "candidateCount": len(candidates),
        "dryRun": dry_run,
    }


def _brief(candidate: dict[str, Any]) -> dict[str, Any]:
    return {
        "url": candidate.get("url"),
        "videoId": candidate.get("videoId"),
        "modelScore": candidate.get("modelScore"),
    }


def _movement(session: Session, movement_id: uuid.UUID, organization_id: uuid.UUID | None = None):
    """A live canonical row, or (with an organization) one that organization owns."""
    movement = session.get(Movement, movement_id, with_for_update=True)
    visible = movement is not None and movement.deleted_at is None
    if visible and movement.organization_id is not None:
        visible = movement.organization_id == organization_id
    if not visible:
        raise not_found(codes.MOVEMENT_NOT_FOUND, "no such movement")
    return movement


def _require_video(movement: Movement) -> str:
    if not movement.video_url:
        raise conflict(codes.MOVEMENT_VIDEO_MISSING, "this movement shows no video")
    return movement.video_url


def verify(session: Session, movement_id: uuid.UUID, *, now: datetime, actor_user_id=None):
    movement = _movement(session, movement_id)
    url = _require_video(movement)
    movement.video_status, movement.updated_at = "reviewed", now
    audit(session, movement, "movements.video_verified", now, actor_user_id, {"videoUrl": url})
    return {"id": str(movement.id), "videoUrl": url, "videoStatus": "reviewed"}


def demote(
    session: Session,
    movement_id: uuid.UUID,
    settings: Settings,
    *,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    reason: str = "operator",
    movement: Movement | None = None,
) -> dict[str, Any]:
    """Reject the current video; the next scored candidate above the threshold takes its place,
    else the row shows none."""
    movement = movement or _movement(session, movement_id)
    return _demote(
        session,
        movement,
        settings.video_score_threshold,
        now=now,
        actor_user_id=actor_user_id,
        reason=reason,
    )


def reported_out(
    session: Session, movement: Movement, threshold: float, *, now: datetime
) -> dict[str, Any] | None:
    """The shown video holds three negative reports (a merge brought the loser's to the
    winner): it is demoted as the third report would have, unless verified or manual. Left
    shown, only a fourth person could demote it, each of the three's repeats changing nothing."""
    url = movement.video_url
    if url is None or movement.video_status in ("reviewed", "manual"):
        return None
    if _negatives(session, movement.id, url) < REPORTS_TO_DEMOTE:
        return None
    return _demote(session, movement, threshold, now=now, reason="member_reports")


def _negatives(session: Session, movement_id: uuid.UUID, url: str) -> int:
    return session.scalar(
        select(func.count()).where(
            MovementVideoReport.movement_id == movement_id,
            MovementVideoReport.video_url == url,
            MovementVideoReport.negative.is_(True),
        )
    )


def _demote(
    session: Session,
    movement: Movement,
    threshold: float,
    *,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    reason: str,
) -> dict[str, Any]:
    previous = _require_video(movement)
    rejected = [*(movement.video_rejected_ids or []), video_id(previous)]
    movement.video_rejected_ids = list(dict.fromkeys(rejected))
    chosen = choose(movement.video_candidates or [], threshold, set(rejected))
    movement.video_url = chosen["url"] if chosen else None
    movement.video_status = "auto" if chosen else "none"
    movement.updated_at = now
    result = {
        "id": str(movement.id),
        "previousUrl": previous,
        "videoUrl": movement.video_url,
        "outcome": outcome(previous, movement.video_url),
        "reason": reason,
    }
    audit(session, movement, "movements.video_demoted", now, actor_user_id, result)
    return result


def report_video(
    session: Session,
    settings: Settings,
    *,
    organization_id: uuid.UUID,
    movement_id: uuid.UUID,
    user_id: uuid.UUID,
    negative: bool,
    reason: str | None,
    now: datetime,
) -> dict[str, Any]:
    """A member's report; the third negative one demotes unless the video is verified or manual."""
    movement = _movement(session, movement_id, organization_id)
    url = _require_video(movement)
    try:
        with (
            unique_violation("uq_movement_video_reports_movement_id_video_url_user_id"),
            session.begin_nested(),
        ):
            session.add(
                MovementVideoReport(
                    movement_id=movement.id,
                    video_url=url,
                    organization_id=organization_id,
                    user_id=user_id,
                    negative=negative,
                    reason=reason,
                    created_at=now,
                )
            )
        recorded = True
    except UniqueViolation:
        recorded = False  # one report per person and video; a repeat changes nothing
    negatives = _negatives(session, movement.id, url)
    demoted = None
    if (
        recorded
        and negatives >= REPORTS_TO_DEMOTE
        and movement.video_status not in ("reviewed", "manual")
    ):
        demoted = demote(
            session, movement.id, settings, now=now, reason="member_reports", movement=movement
        )
    return {
        "id": str(movement.id),
        "videoUrl": movement.video_url,
        "recorded": recorded,
        "negativeReports": negatives,
        "demoted": demoted is not None,
    }
