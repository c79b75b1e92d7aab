"""Coaching text (spec B 4.5 /cues): 3 cues, 2 common faults and 2 scaling options per movement,
in English, from the chat model. Without rebuild only rows short of a count are filled. An
answer that does not hold exactly those counts of short plain strings is refused for that row
and changes nothing; a dry run shows what would be written and writes nothing."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from gymctl.models import Movement
from gymctl.movements.audit import audit_library
from gymctl.movements.clients import ChatModel
from gymctl.movements.progress import SILENT, Progress
from gymctl.movements.targets import canonical_rows
from gymctl.movements.units import Checkpoint, fresh, keep

COUNTS = {"cues": 3, "commonFaults": 2, "scalingOptions": 2}
COLUMNS = {"cues": "cues", "commonFaults": "common_faults", "scalingOptions": "scaling_options"}
MAX_ITEM = 200
DISABLED = "cue writing is disabled: GYMCTL_LLM_KEY is unset"
PROMPT = (
    "You write coaching text for a gym's movement library, in English. For the movement given, "
    'answer JSON {"cues": [3 short coaching cues], "commonFaults": [2 common faults], '
    '"scalingOptions": [2 ways to scale it]}; each item one sentence of at most 200 characters.'
)


def short_of_counts(movement: Movement) -> bool:
    return any(len(getattr(movement, COLUMNS[k]) or []) < n for k, n in COUNTS.items())


def validated(answer: dict[str, Any]) -> dict[str, list[str]] | None:
    out = {}
    for key, count in COUNTS.items():
        items = answer.get(key)
        if not isinstance(items, list) or len(items) != count:
            return None
        if not all(
            isinstance(i, str) and i.strip() and len(i) <= MAX_ITEM and "\x00" not in i
            for i in items
        ):
            return None
        out[key] = [i.strip() for i in items]
    return out


def _still_to_fill(current: Movement | None, rebuild: bool) -> bool:
    """The row as stored now still takes the answer: not merged away, and (without rebuild)
    not filled meanwhile by a merge or another run."""
    return current is not None and not current.deleted_at and (rebuild or short_of_counts(current))


def write_cues(
    session: Session,
    llm: ChatModel | None,
    *,
    now: datetime,
    dry_run: bool = False,
    rebuild: bool = False,
    limit: int | None = None,
    actor_user_id: uuid.UUID | None = None,
    progress: Progress = SILENT,
    checkpoint: Checkpoint = keep,
) -> dict[str, Any]:
    """Each movement is a unit (units.py): the model answers with no transaction open, and
    the text is written to the row as stored by then. Filled rows are no longer short, so a
    run stopped midway resumes where it stopped."""
    if llm is None:
        return {"disabled": DISABLED, "dryRun": dry_run}
    rows = [m for m in canonical_rows(session) if rebuild or short_of_counts(m)]
    if limit is not None:
        rows = rows[:limit]
    cost, filled, invalid, report = 0, 0, [], []
    progress.start("cues", len(rows))
    for movement in rows:
        movement_id, slug = movement.id, movement.slug
        user = json.dumps(
            {
                "movement": movement.name,
                "equipment": movement.equipment,
                "instructions": (movement.instructions or [])[:6],
            }
        )
        checkpoint()
        answer, usage = llm.complete_json(PROMPT, user)
        cost += llm.cost_micros(usage)
        text = validated(answer)
        current = None if dry_run or text is None else fresh(session, movement_id)
        if text is None:
            invalid.append(slug)
        elif dry_run or _still_to_fill(current, rebuild):
            filled += 1
            report.append({"id": str(movement_id), "slug": slug, **text})
            if current is not None:
                for key, items in text.items():
                    setattr(current, COLUMNS[key], items)
                current.updated_at = now
        progress.advance()
    result = {
        "dryRun": dry_run,
        "rebuild": rebuild,
        "considered": len(rows),
        "filled": filled,
        "invalid": invalid,
        "costUsdMicros": cost,
        "model": llm.model,
        "report": report,
    }
    if not dry_run:
        session.flush()
        audit_library(
            session,
            "movements.cues_written",
            now,
            actor_user_id,
            {k: v for k, v in result.items() if k != "report"},
        )
    return result
