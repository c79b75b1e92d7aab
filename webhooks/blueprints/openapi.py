"""GET /openapi.json: the client API's OpenAPI document, kept in the repo beside this app."""

from __future__ import annotations

import functools
import json
from importlib import resources

from flask import Blueprint, jsonify

from webhooks.guard import public

bp = Blueprint("openapi", __name__)


@functools.cache
def document() -> dict:
    return json.loads(resources.files("webhooks").joinpath("openapi.json").read_text())


@bp.get("/openapi.json")
@public
def openapi():
    return jsonify(document())
