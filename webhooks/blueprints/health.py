"""GET /health: is this process up and can it reach its database (503 when it cannot)."""

from __future__ import annotations

from flask import Blueprint, jsonify
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

import gymctl
from gymctl import migrate
from gymctl.db import server_version
from webhooks.context import db
from webhooks.guard import public

bp = Blueprint("health", __name__)


@bp.get("/health")
@public
def health():
    session = db()
    try:
        connection = session.connection()
        server = server_version(connection)
        revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except SQLAlchemyError as error:
        session.rollback()
        return jsonify(
            status="unavailable",
            version=gymctl.__version__,
            database={"reachable": False, "error": type(error).__name__},
        ), 503
    return jsonify(
        status="ok",
        version=gymctl.__version__,
        database={
            "reachable": True,
            "server": server,
            "revision": revision,
            "head": revision == migrate.head(),
        },
    )
