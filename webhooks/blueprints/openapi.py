"""GET /openapi.json: the client API's OpenAPI document, kept in the repo beside this app.

`webhooks/openapi.json` holds the shared parts and the first areas' routes; each later area keeps
its paths and schemas in `webhooks/openapi/<area>.json`, merged here (a name defined twice is an
error, so areas cannot silently overwrite each other)."""

from __future__ import annotations

import functools
import json
from importlib import resources

from flask import Blueprint, jsonify

from webhooks.guard import public

bp = Blueprint("openapi", __name__)


@functools.cache
def document() -> dict:
    root = resources.files("webhooks")
    merged = json.loads(root.joinpath("openapi.json").read_text())
    fragments = sorted(
        (entry for entry in root.joinpath("openapi").iterdir() if entry.name.endswith(".json")),
        key=lambda entry: entry.name,
    )
    for fragment in fragments:
        part = json.loads(fragment.read_text())
        _merge(merged["paths"], part.get("paths", {}), fragment.name)
        schemas = part.get("components", {}).get("schemas", {})
        _merge(merged["components"]["schemas"], schemas, fragment.name)
    return merged


def _merge(into: dict, part: dict, source: str) -> None:
    clash = into.keys() & part.keys()
    if clash:
        raise ValueError(f"openapi/{source} redefines {sorted(clash)}")
    into.update(part)


@bp.get("/openapi.json")
@public
def openapi():
    return jsonify(document())
