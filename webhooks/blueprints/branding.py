"""The brand workspace, publishing and the public branding read (spec A 3, 4, 6.2).

Every write refused here is recorded as api.request_failed with its code (and nothing else is
written). Publishing runs each channel in its own transaction and verifies it with a fresh
read, so it uses the session factory directly, after the request's own session is closed.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

from flask import Blueprint, jsonify, request
from pydantic import Field

from gymctl.access.permissions import Action, Module
from gymctl.branding import minisites, publishing, workspace
from gymctl.branding.published import public_branding
from gymctl.branding.refusals import record_refusal
from gymctl.errors import DomainError, not_found
from gymctl.models import Organization
from gymctl.versioning import payload_schema
from webhooks import codes
from webhooks.access import membership, org_route
from webhooks.context import db, handover, now, services
from webhooks.guard import public
from webhooks.validation import PY_WHITESPACE, Body, one_line, parse

bp = Blueprint("branding", __name__)
WORKSPACE = "/organizations/<uuid:org_id>/brand-workspace"


def recorded(operation: str) -> Callable:
    """A refused write becomes api.request_failed (its work rolled back first, unless the
    refusal kept a record of its own, such as branding.asset_rejected)."""

    def decorate(view: Callable) -> Callable:
        @functools.wraps(view)
        def wrapped(org_id: uuid.UUID, **kwargs: Any):
            try:
                return view(org_id, **kwargs)
            except DomainError as error:
                if not error.request_failed_recorded:
                    session = db()
                    if not error.audited:
                        session.rollback()
                    record_refusal(
                        session,
                        org_id,
                        operation=operation.format(**kwargs),
                        error=error,
                        actor_user_id=membership().user_id,
                        now=now(),
                    )
                raise

        return wrapped

    return decorate


def _channel(name: str) -> str:
    if name not in workspace.CHANNELS:
        raise not_found(codes.CHANNEL_UNKNOWN, "channels: brand, website, app")
    return name


def _actor() -> uuid.UUID:
    return membership().user_id


@bp.get(WORKSPACE)
@org_route(Module.branding, Action.view)
def read_workspace(org_id):
    return jsonify(workspace.workspace(db(), org_id))


# The names workspace._brand_name strips again and refuses unless one line (400
# brand_name_invalid, its own code): the document says so.
BrandName = Annotated[str, one_line(workspace.MAX_BRAND_NAME, strip=PY_WHITESPACE)]
AppName = Annotated[str, one_line(workspace.MAX_APP_NAME, strip=PY_WHITESPACE)]


class BrandDraftBody(Body):
    palette: dict[str, Any]
    name: BrandName | None = Field(None, min_length=1, max_length=workspace.MAX_BRAND_NAME)
    logos: dict[str, str] | None = None

    def kept(self, field: str) -> Any:
        """An absent field keeps the draft's value; an explicit null clears it."""
        return getattr(self, field) if field in self.model_fields_set else workspace.KEEP


@bp.put(f"{WORKSPACE}/brand")
@org_route(Module.branding, Action.manage)
@recorded("branding.brand.save")
def save_brand(org_id):
    body = parse(BrandDraftBody)
    workspace.save_brand_draft(
        db(),
        services().store,
        org_id,
        palette=body.palette,
        name=body.kept("name"),
        logos=body.kept("logos"),
        actor_user_id=_actor(),
        now=now(),
    )
    return jsonify(workspace.channel(db(), org_id, "brand"))


class WebsiteDraftBody(Body):
    content: dict[str, Any]


@bp.put(f"{WORKSPACE}/website")
@org_route(Module.branding, Action.manage)
@recorded("branding.website.save")
def save_website(org_id):
    body = parse(WebsiteDraftBody)
    workspace.save_website_draft(
        db(), org_id, content=body.content, actor_user_id=_actor(), now=now()
    )
    return jsonify(workspace.channel(db(), org_id, "website"))


class AppDraftBody(Body):
    display_name: AppName | None = Field(
        None,
        alias="displayName",
        min_length=1,
        max_length=workspace.MAX_APP_NAME,
        description="absent keeps the draft's display name; null clears it",
    )

    def kept(self) -> str | workspace.Keep | None:
        """An absent displayName keeps the draft's value; an explicit null clears it."""
        return self.display_name if "display_name" in self.model_fields_set else workspace.KEEP


@bp.put(f"{WORKSPACE}/app")
@org_route(Module.branding, Action.manage)
@recorded("branding.app.save")
def save_app(org_id):
    body = parse(AppDraftBody)
    workspace.save_app_draft(db(), org_id, display_name=body.kept(), now=now())
    return jsonify(workspace.channel(db(), org_id, "app"))


class PublishBody(Body):
    channels: list[Literal["brand", "website", "app"]] = Field(
        default_factory=lambda: list(workspace.CHANNELS), min_length=1, max_length=3
    )


def _run(org_id: uuid.UUID, channels: list[str]) -> list[publishing.ChannelResult]:
    actor = _actor()
    return publishing.publish_channels(
        handover(),
        services().store,
        org_id,
        channels,
        actor_user_id=actor,
        now=now(),
    )


@bp.post(f"{WORKSPACE}/publish")
@org_route(Module.branding, Action.manage)
@recorded("branding.publish")
def publish_all(org_id):
    """The channels chosen, in the order brand, website, app; stops at the first failure."""
    channels = parse(PublishBody).channels
    results = _run(org_id, channels)
    return jsonify(
        {
            "results": [r.as_json() for r in results],
            "completed": all(r.result == "verified" for r in results),
            "workspace": workspace.workspace(db(), org_id),
        }
    )


@bp.post(f"{WORKSPACE}/<channel>/publish")
@org_route(Module.branding, Action.manage)
@recorded("branding.{channel}.publish")
def publish_one(org_id, channel):
    [result] = _run(org_id, [_channel(channel)])
    if result.error is not None:
        raise result.error
    return jsonify({**result.as_json(), "state": workspace.channel(db(), org_id, channel)})


@bp.post(f"{WORKSPACE}/<channel>/unpublish")
@org_route(Module.branding, Action.manage)
@recorded("branding.{channel}.unpublish")
def unpublish(org_id, channel):
    step = {
        "brand": publishing.unpublish_brand,
        "website": publishing.unpublish_website,
        "app": publishing.unpublish_app,
    }[_channel(channel)]
    step(db(), org_id, actor_user_id=_actor(), now=now())
    return jsonify(workspace.channel(db(), org_id, channel))


class RestoreBody(Body):
    revision: int | None = Field(None, ge=1, le=2_147_483_647)


@bp.post(f"{WORKSPACE}/<channel>/restore")
@org_route(Module.branding, Action.manage)
@recorded("branding.{channel}.restore")
def restore(org_id, channel):
    """The draft becomes a published revision again (default: the live one)."""
    _channel(channel)
    revision = parse(RestoreBody).revision
    common = {"actor_user_id": _actor(), "now": now()}
    if channel == "brand":
        publishing.restore_brand(db(), services().store, org_id, revision=revision, **common)
    elif channel == "website":
        publishing.restore_website(db(), org_id, revision=revision, **common)
    else:
        publishing.restore_app(db(), services().store, org_id, version=revision, **common)
    return jsonify(workspace.channel(db(), org_id, channel))


class AttestationBody(Body):
    kind: Literal["screenshot", "internalSmoke"]


@bp.post(f"{WORKSPACE}/app/attestations")
@org_route(Module.branding, Action.manage)
@recorded("branding.app.attest")
def attest(org_id):
    kind = parse(AttestationBody).kind
    publishing.attest_app(db(), org_id, kind, actor_user_id=_actor(), now=now())
    return jsonify(workspace.channel(db(), org_id, "app"))


@bp.post(f"{WORKSPACE}/preview-ticket")
@org_route(Module.branding, Action.view)
def preview_ticket(org_id):
    organization = db().get(Organization, org_id)
    return jsonify(minisites.mint_preview_ticket(services().settings, organization, now=now())), 201


@bp.get("/public/organizations/<uuid:org_id>/branding")
@public
def public_read(org_id):
    """What installed apps read: ?schema=1..4 (absent: 1)."""
    schema = payload_schema(request.args.get("schema"), parameter="schema")
    organization = db().get(Organization, org_id)
    if organization is None or organization.deleted_at is not None:
        raise not_found(codes.ORGANIZATION_NOT_FOUND, "no such organization")
    return jsonify(
        {
            "organizationId": str(org_id),
            **public_branding(db(), org_id, organization.name, schema),
        }
    )
