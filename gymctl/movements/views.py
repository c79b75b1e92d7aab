"""The JSON shape of a movement, shared by the HTTP answers, the CLI's --json and reports."""

from __future__ import annotations

from typing import Any

from gymctl.models import Movement


def describe(movement: Movement) -> dict[str, Any]:
    return {
        "id": str(movement.id),
        "slug": movement.slug,
        "name": movement.name,
        "aliases": list(movement.aliases or []),
        "category": movement.category,
        "kind": movement.kind,
        "movementPattern": movement.movement_pattern,
        "equipment": movement.equipment,
        "primaryMuscles": list(movement.primary_muscles or []),
        "secondaryMuscles": list(movement.secondary_muscles or []),
        "mechanic": movement.mechanic,
        "organizationId": str(movement.organization_id) if movement.organization_id else None,
        "thumbnailUrl": movement.thumbnail_url,
        "videoUrl": movement.video_url,
        "videoStatus": movement.video_status,
        "videoCandidates": list(movement.video_candidates or []),
        "videoRejectedIds": list(movement.video_rejected_ids or []),
        "cues": list(movement.cues or []),
        "commonFaults": list(movement.common_faults or []),
        "scalingOptions": list(movement.scaling_options or []),
        "embeddingModel": movement.embedding_model,
        "mergedIntoId": str(movement.merged_into_id) if movement.merged_into_id else None,
        "deletedAt": movement.deleted_at.isoformat() if movement.deleted_at else None,
    }
