"""Minisites (spec A 2.9, 4): the resolve call, the public page rendered from the published brand
(Jinja, no build step), and the draft preview a dashboard frames."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, render_template, request
from sqlalchemy import select

from gymctl.branding import minisites
from gymctl.branding.website import price_label
from gymctl.errors import forbidden, invalid, not_found
from gymctl.models import Organization
from webhooks import codes
from webhooks.context import db, now, services
from webhooks.guard import public

bp = Blueprint("minisites", __name__, template_folder="templates")


@bp.get("/minisites/resolve")
@public
def resolve():
    host = request.args.get("host")
    if not host or "\x00" in host:
        raise invalid(codes.HOST_REQUIRED, "pass ?host=<slug>.<minisite domain>")
    settings = services().settings
    slug = minisites.slug_of_host(settings, host)
    return jsonify(minisites.published_site(db(), settings, services().store, slug, now=now()))


def _contact_href(contact: dict[str, Any]) -> str:
    if contact.get("email"):
        return f"mailto:{contact['email']}"
    if contact.get("phone"):
        return f"tel:{contact['phone']}"
    return "#contact"


def _page(site: dict[str, Any]) -> str:
    """Pricing cards fall back to a contact action when there is no join URL."""
    return render_template(
        "minisite/page.html",
        site=site,
        join_url=site["platformData"].get("joinUrl"),
        contact_href=_contact_href(site["content"].get("contact", {})),
        price_label=price_label,
    )


@bp.get("/sites/<slug>")
@public
def page(slug):
    site = minisites.published_site(db(), services().settings, services().store, slug, now=now())
    return Response(
        _page(site),
        mimetype="text/html",
        headers={
            "Cache-Control": "public, max-age=60",
            "Content-Security-Policy": "frame-ancestors 'self'",
        },
    )


@bp.post("/sites/<slug>/preview")
@public
def preview(slug):
    """The draft, framed only by the dashboard origin minted into the ticket."""
    organization = db().scalar(
        select(Organization).where(Organization.slug == slug, Organization.deleted_at.is_(None))
    )
    if organization is None:
        raise not_found(codes.MINISITE_NOT_FOUND, "no minisite answers at that host")
    ticket = request.form.get("ticket", "")
    if not ticket or "\x00" in ticket:
        raise forbidden(codes.PREVIEW_TICKET_INVALID, "post the form field ticket")
    settings = services().settings
    origin = minisites.verify_preview_ticket(settings, ticket, organization.id, now=now())
    site = minisites.draft_site(db(), settings, services().store, organization)
    return Response(
        _page(site),
        mimetype="text/html",
        headers={
            "Cache-Control": "no-store",
            "Content-Security-Policy": f"frame-ancestors {origin}",
        },
    )
