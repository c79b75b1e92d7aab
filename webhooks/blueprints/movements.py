"""The movement library's doors (spec B 4.5): platform-admin routes under
/admin/exercises/canonical, a member's video report and a gym's own thumbnail upload. Long work
is enqueued (202 with the job); the rest answers at once. Each calls the same domain functions as
`gymctl movements ...`."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from flask import Blueprint, current_app, jsonify, request
from pydantic import Field, StringConstraints, WithJsonSchema
from werkzeug.exceptions import RequestEntityTooLarge

from gymctl.access.memberships import resolve_membership
from gymctl.access.permissions import Action, Module
from gymctl.errors import invalid, not_found, too_large
from gymctl.movements import cues, discovery, jobs, merge, own, ranking, thumbnails
from gymctl.movements.duplicates import DEFAULT_LIMIT, alias_collisions, duplicates_report
from gymctl.movements.embeddings import threshold_for
from gymctl.movements.services import Library, library_from_settings
from gymctl.movements.views import describe
from webhooks import codes
from webhooks.access import membership, org_route, platform_admin_route, signed_in_user
from webhooks.bodies import reads_its_own_body
from webhooks.context import auth, db, now, services
from webhooks.validation import Body, parse, parse_query

bp = Blueprint("movements", __name__)
ADMIN = "/admin/exercises/canonical"
ORG = "/organizations/<uuid:org_id>/exercises/<uuid:movement_id>"
MULTIPART_OVERHEAD = 64 * 1024

Slug = Annotated[str, StringConstraints(min_length=1, max_length=160)]


def _library() -> Library:
    """Built once per app from its settings and object store."""
    if "gymctl.movements" not in current_app.extensions:
        svc = services()
        current_app.extensions["gymctl.movements"] = library_from_settings(
            svc.settings, store=svc.store
        )
    return current_app.extensions["gymctl.movements"]


def _enqueued(job) -> tuple:
    return jsonify(jobs.describe_job(job)), 202


class SeedRequest(Body):
    r2Key: str = Field(min_length=1, max_length=1024)
    rebuild: bool = False
    rpm: int | None = Field(None, ge=1, le=100_000)


@bp.post(f"{ADMIN}/seed")
@platform_admin_route
def seed():
    body = parse(SeedRequest)
    try:
        present = _library().store.head(body.r2Key) is not None
    except ValueError:
        present = False
    if not present:
        raise not_found(codes.LIBRARY_FILE_NOT_FOUND, f"no library file at {body.r2Key}")
    payload = body.model_dump(exclude_none=True)
    job = jobs.enqueue(db(), "seed", payload, now=now(), actor_user_id=signed_in_user().id)
    return _enqueued(job)


@bp.get(f"{ADMIN}/jobs")
@platform_admin_route
def list_jobs():
    """The newest jobs, of one queue or status if asked; one the library has not is a 400 (it
    listed nothing, as if no job had been queued)."""
    query = parse_query(JobsQuery)
    return jsonify(jobs=jobs.list_jobs(db(), queue=query.queue, status=query.status))


class JobsQuery(Body):
    queue: Literal[tuple(dict.fromkeys(jobs.QUEUES.values()))] | None = None  # type: ignore[valid-type]
    status: Literal[jobs.STATUSES] | None = None  # type: ignore[valid-type]


@bp.get(f"{ADMIN}/jobs/<queue>/<uuid:job_id>")
@platform_admin_route
def get_job(queue, job_id):
    return jsonify(jobs.get_job(db(), queue, job_id))


class ThumbnailsRequest(Body):
    force: bool = False


@bp.post(f"{ADMIN}/thumbnails")
@platform_admin_route
def enqueue_thumbnails():
    body = parse(ThumbnailsRequest)
    library = _library()
    reason = thumbnails.disabled_reason(library.settings, library.images)
    if reason:
        return jsonify(enqueued=0, jobIds=[], disabled=reason)
    actor = signed_in_user().id
    queued = [
        jobs.enqueue(
            db(),
            "thumbnail",
            {"movementId": str(m.id), "slug": m.slug, "force": body.force},
            now=now(),
            actor_user_id=actor,
        )
        for m in thumbnails.rows_needing_thumbnails(db(), force=body.force)
    ]
    return jsonify(enqueued=len(queued), jobIds=[str(j.id) for j in queued]), 202


class DuplicatesRequest(Body):
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=10_000)


@bp.post(f"{ADMIN}/duplicates")
@platform_admin_route
def duplicates():
    body = parse(DuplicatesRequest)
    library = _library()
    model = library.embedder.model
    return jsonify(
        duplicates_report(
            db(), model=model, threshold=threshold_for(library.settings, model), limit=body.limit
        )
    )


class Pair(Body):
    winnerId: uuid.UUID
    loserId: uuid.UUID


class MergeRequest(Body):
    pairs: list[Pair] = Field(min_length=1, max_length=500)
    dryRun: bool = False


@bp.post(f"{ADMIN}/merge")
@platform_admin_route
def merge_pairs():
    body = parse(MergeRequest)
    library = _library()
    return jsonify(
        merge.merge_pairs(
            db(),
            library.embedder,
            [(p.winnerId, p.loserId) for p in body.pairs],
            dry_run=body.dryRun,
            now=now(),
            actor_user_id=signed_in_user().id,
            video_threshold=library.settings.video_score_threshold,
        )
    )


@bp.get(f"{ADMIN}/alias-collisions")
@platform_admin_route
def list_alias_collisions():
    return jsonify(aliasCollisions=alias_collisions(db()))


class AliasChangeRequest(Body):
    sourceId: uuid.UUID
    alias: str = Field(min_length=1, max_length=200)
    dryRun: bool = False


@bp.post(f"{ADMIN}/alias-change")
@platform_admin_route
def alias_change():
    body = parse(AliasChangeRequest)
    return jsonify(
        merge.alias_change(
            db(),
            _library().embedder,
            source_id=body.sourceId,
            alias=body.alias,
            dry_run=body.dryRun,
            now=now(),
            actor_user_id=signed_in_user().id,
        )
    )


class DiscoverRequest(Body):
    limit: int | None = Field(None, ge=1, le=10_000)
    ids: list[uuid.UUID] | None = Field(None, max_length=1000)
    slugs: list[Slug] | None = Field(None, max_length=1000)
    force: bool = False


class RefreshRequest(DiscoverRequest):
    dryRun: bool = False
    includeUncovered: bool = False


class RankRequest(Body):
    dryRun: bool = False
    limit: int | None = Field(None, ge=1, le=10_000)
    slugs: list[Slug] | None = Field(None, max_length=1000)
    includeUncovered: bool = False


def _payload(body: Body) -> dict:
    return body.model_dump(mode="json", exclude_none=True)


@bp.post(f"{ADMIN}/video/discover")
@platform_admin_route
def video_discover():
    body = parse(DiscoverRequest)
    if _library().search is None:
        return jsonify(discovery.discover(db(), None, _library().settings, now=now()))
    job = jobs.enqueue(
        db(), "video_discover", _payload(body), now=now(), actor_user_id=signed_in_user().id
    )
    return _enqueued(job)


@bp.post(f"{ADMIN}/video/refresh")
@platform_admin_route
def video_refresh():
    """Discover then rank; without the search key there is nothing to refresh: the disabled
    answer of discover, at once (never a job that "succeeds" with the message inside)."""
    body = parse(RefreshRequest)
    if _library().search is None:
        found = discovery.discover(db(), None, _library().settings, now=now())
        return jsonify({**found, "dryRun": body.dryRun})
    job = jobs.enqueue(
        db(), "video_refresh", _payload(body), now=now(), actor_user_id=signed_in_user().id
    )
    return _enqueued(job)


@bp.post(f"{ADMIN}/video/rank")
@platform_admin_route
def video_rank():
    body = parse(RankRequest)
    if _library().llm is None:
        return jsonify(disabled=ranking.DISABLED, dryRun=body.dryRun)
    job = jobs.enqueue(
        db(), "video_rank", _payload(body), now=now(), actor_user_id=signed_in_user().id
    )
    return _enqueued(job)


class CuesRequest(Body):
    dryRun: bool = False
    rebuild: bool = False


@bp.post(f"{ADMIN}/cues")
@platform_admin_route
def write_cues():
    body = parse(CuesRequest)
    if _library().llm is None:
        return jsonify(disabled=cues.DISABLED, dryRun=body.dryRun)
    job = jobs.enqueue(db(), "cues", _payload(body), now=now(), actor_user_id=signed_in_user().id)
    return _enqueued(job)


@bp.post(f"{ADMIN}/<uuid:movement_id>/video/verify")
@platform_admin_route
def verify_video(movement_id):
    return jsonify(ranking.verify(db(), movement_id, now=now(), actor_user_id=signed_in_user().id))


@bp.post(f"{ADMIN}/<uuid:movement_id>/video/demote")
@platform_admin_route
def demote_video(movement_id):
    return jsonify(
        ranking.demote(
            db(), movement_id, _library().settings, now=now(), actor_user_id=signed_in_user().id
        )
    )


class VideoReportRequest(Body):
    negative: bool = True
    reason: str | None = Field(None, max_length=500)


@bp.post(f"{ORG}/video/report")
def report_video(org_id, movement_id):
    """Any active member of the gym may report the video of a movement it can see."""
    member = resolve_membership(db(), org_id, auth().user)
    body = parse(VideoReportRequest)
    return jsonify(
        ranking.report_video(
            db(),
            _library().settings,
            organization_id=org_id,
            movement_id=movement_id,
            user_id=member.user_id,
            negative=body.negative,
            reason=body.reason,
            now=now(),
        )
    )


report_video.gymctl_access = ("own",)  # type: ignore[attr-defined]


def _thumbnail_file() -> bytes:
    request.max_content_length = thumbnails.MAX_UPLOAD_BYTES + MULTIPART_OVERHEAD
    if request.mimetype != "multipart/form-data":
        raise invalid(codes.MOVEMENT_THUMBNAIL_MULTIPART, "send multipart/form-data with one file")
    try:
        files = request.files
    except RequestEntityTooLarge:
        raise too_large(codes.MOVEMENT_THUMBNAIL_TOO_LARGE, "at most 5 MB") from None
    parts = [part for name in files for part in files.getlist(name)]
    if len(parts) != 1:
        raise invalid(codes.MOVEMENT_THUMBNAIL_MULTIPART, "exactly one file part is expected")
    return parts[0].read(thumbnails.MAX_UPLOAD_BYTES + 1)


@bp.put(f"{ORG}/thumbnail")
@reads_its_own_body
@org_route(Module.programming, Action.manage)
def upload_thumbnail(org_id, movement_id):
    data = _thumbnail_file()
    library = _library()
    movement = thumbnails.upload_thumbnail(
        db(),
        library.public_store,
        library.settings,
        organization_id=org_id,
        movement_id=movement_id,
        data=data,
        now=now(),
        actor_user_id=membership().user_id,
    )
    return jsonify(describe(movement))


Short = Annotated[str, StringConstraints(min_length=1, max_length=64)]
Line = Annotated[str, StringConstraints(min_length=1, max_length=2000)]
Url = Annotated[str, StringConstraints(max_length=1024, pattern=r"^https?://\S+$")]


class OwnMovementChange(Body):
    """Fields of a gym's own movement; a thumbnail is uploaded, never named here."""

    # null is refused (400 movement_name_required, not invalid_body): the document says no null
    name: Annotated[
        Annotated[str, StringConstraints(min_length=1, max_length=200)] | None,
        WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 200}),
    ] = Field(
        None,
        description="absent keeps the name; it cannot be cleared (null is refused)",
        json_schema_extra=lambda schema: schema.pop("default", None),  # null is not one
    )
    aliases: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None = Field(
        None, max_length=50
    )
    category: Short | None = None
    kind: Annotated[str, StringConstraints(min_length=1, max_length=32)] | None = None
    movementPattern: Short | None = None
    equipment: Short | None = None
    primaryMuscles: list[Short] | None = Field(None, max_length=20)
    secondaryMuscles: list[Short] | None = Field(None, max_length=20)
    mechanic: Annotated[str, StringConstraints(min_length=1, max_length=32)] | None = None
    instructions: list[Line] | None = Field(None, max_length=50)
    cues: list[Line] | None = Field(None, max_length=20)
    commonFaults: list[Line] | None = Field(None, max_length=20)
    scalingOptions: list[Line] | None = Field(None, max_length=20)
    videoUrl: Url | None = None

    def fields(self) -> dict:
        """The snake_case fields the body names (null clears one; absent leaves it)."""
        names = {
            "movementPattern": "movement_pattern",
            "primaryMuscles": "primary_muscles",
            "secondaryMuscles": "secondary_muscles",
            "commonFaults": "common_faults",
            "scalingOptions": "scaling_options",
            "videoUrl": "video_url",
        }
        given = self.model_dump(include=self.model_fields_set)
        if "name" in given and given["name"] is None:
            raise invalid(codes.MOVEMENT_NAME_REQUIRED, "a movement needs a name")
        return {names.get(key, key): value for key, value in given.items()}


class OwnMovementCreate(OwnMovementChange):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    slug: Slug | None = None


@bp.post("/organizations/<uuid:org_id>/exercises")
@org_route(Module.programming, Action.manage)
def create_own_movement(org_id):
    body = parse(OwnMovementCreate)
    fields = body.fields()
    slug = fields.pop("slug", None)
    movement = own.create_own(
        db(),
        organization_id=org_id,
        fields=fields,
        slug=slug,
        now=now(),
        actor_user_id=membership().user_id,
    )
    return jsonify(describe(movement)), 201


@bp.patch(ORG)
@org_route(Module.programming, Action.manage)
def edit_own_movement(org_id, movement_id):
    body = parse(OwnMovementChange)
    movement = own.edit_own(
        db(),
        organization_id=org_id,
        movement_id=movement_id,
        changes=body.fields(),
        now=now(),
        actor_user_id=membership().user_id,
    )
    return jsonify(describe(movement))


@bp.delete(ORG)
@org_route(Module.programming, Action.manage)
def delete_own_movement(org_id, movement_id):
    movement = own.delete_own(
        db(),
        organization_id=org_id,
        movement_id=movement_id,
        now=now(),
        actor_user_id=membership().user_id,
    )
    return jsonify(describe(movement))
