"""GET /health: is this process up and can it reach its database (503 when it cannot).

Anyone may ask, so the public answer leaves out the database server's version (it tells an
attacker which exploits to try); platform admins read it at GET /admin/health."""

from __future__ import annotations

from flask import Blueprint, jsonify
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

import gymctl
from gymctl import migrate
from gymctl.db import server_version
from webhooks.access import platform_admin_route
from webhooks.context import db
from webhooks.guard import public

bp = Blueprint("health", __name__)


def _report(*, detailed: bool):
    session = db()
    try:
        connection = session.connection()
        server = server_version(connection) if detailed else None
        revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except SQLAlchemyError as error:
        session.rollback()
        return jsonify(
            status="unavailable",
            version=gymctl.__version__,
            database={"reachable": False, "error": type(error).__name__},
        ), 503
    database = {"reachable": True, "revision": revision, "head": revision == migrate.head()}
    if detailed:
        database["server"] = server
    return jsonify(status="ok", version=gymctl.__version__, database=database)


@bp.get("/health")
@public
def health():
    return _report(detailed=False)


@bp.get("/admin/health")
@platform_admin_route
def admin_health():
    return _report(detailed=True)
