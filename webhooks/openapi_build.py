"""Build the OpenAPI 3.0.3 document from the route table and the pydantic body models.

The hand-kept parts (summaries, parameters, responses) live in `webhooks/openapi/source/`;
every request body schema is generated from the model its view parses, every route of the app
must have its operation (and every operation its route), and 3.1-isms that pydantic emits are
written the 3.0 way. OpenAPI `links` are generated from `links.json`, the operations whose
answers name the ids other operations take in their path (so a client, or schemathesis'
stateful phase, can walk from GET /users/me to a real organization, its members, plans...).
The result is committed as `webhooks/openapi.json` (served by GET /openapi.json); a test checks
that it equals what this builds and that it validates.

    python -m webhooks.openapi_build   # rewrite webhooks/openapi.json
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from flask import Flask
from pydantic import BaseModel, ValidationError

from webhooks.validation import WHITESPACE, Body

METHODS = ("get", "put", "post", "delete", "patch")
LINKS = "links.json"
OUTPUT = Path(__file__).with_name("openapi.json")
# Methods that carry a body: every route has a body limit (webhooks.bodies), so each of these
# may answer 413 whether or not the operation reads a body (a webhook reads its raw bytes).
BODY_METHODS = ("put", "post", "patch")
ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
TOO_LARGE = {
    "description": "body_too_large: the body is over this route class's limit",
    "content": ERROR,
}
# Every request whose path holds a NUL is refused before its route runs (webhooks.app).
PATH_INVALID = {
    "description": "path_invalid: a path parameter holds a NUL character",
    "content": ERROR,
}


def _folder():
    return resources.files("webhooks").joinpath("openapi", "source")


def sources() -> dict[str, Any]:
    """The hand-kept parts: `base.json` and one fragment per area (a name defined twice is an
    error, so areas cannot silently overwrite each other)."""
    folder = _folder()
    merged = json.loads(folder.joinpath("base.json").read_text())
    fragments = sorted(
        (
            e
            for e in folder.iterdir()
            if e.name.endswith(".json") and e.name not in ("base.json", LINKS)
        ),
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
        raise ValueError(f"openapi/source/{source} redefines {sorted(clash)}")
    into.update(part)


def openapi_path(rule: str) -> str:
    """Flask's `/a/<int:b>` as OpenAPI's `/a/{b}`."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def body_model(view: Any) -> type[BaseModel] | None:
    """The Body model a view parses: the one Body subclass its code names. A view that reads
    its query string (`parse_query`) has no body: its parameters are kept in openapi/source."""
    function = inspect.unwrap(view)
    if "parse_query" in function.__code__.co_names:
        return None
    found = {
        value
        for name in function.__code__.co_names
        if isinstance(value := function.__globals__.get(name), type)
        and issubclass(value, Body)
        and value is not Body
    }
    if len(found) > 1:
        raise ValueError(f"{function.__qualname__} names several bodies: {sorted(found, key=str)}")
    return found.pop() if found else None


def build(app: Flask) -> dict[str, Any]:
    document = sources()
    schemas = document["components"]["schemas"]
    seen: set[tuple[str, str]] = set()
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint == "static":
            continue
        path = openapi_path(rule.rule)
        for method in sorted(m.lower() for m in rule.methods or () if m.lower() in METHODS):
            operation = document["paths"].get(path, {}).get(method)
            if operation is None:
                raise ValueError(f"{method.upper()} {path} has no operation in openapi/source")
            seen.add((path, method))
            model = body_model(app.view_functions[rule.endpoint])
            if model is not None:
                _request_body(operation, model, schemas)
            if model is not None or method in BODY_METHODS:
                operation["responses"].setdefault("413", TOO_LARGE)
            if path_parameters(path):
                operation["responses"].setdefault("400", PATH_INVALID)
    for path, operations in document["paths"].items():
        for method in operations:
            if method in METHODS and (path, method) not in seen:
                raise ValueError(f"{method.upper()} {path} is documented but not routed")
    _links(document, json.loads(_folder().joinpath(LINKS).read_text())["producers"])
    return _openapi30(document)


def path_parameters(path: str) -> list[str]:
    return re.findall(r"{([^{}]+)}", path)


def _links(document: dict, producers: list[dict]) -> None:
    """For each producer (an operation and the JSON pointers of the ids its first 2xx answer
    names), a link to every other operation whose path parameters it supplies in full: named
    in its answer, or the same parameter of its own path (`$request.path.x`)."""
    targets = [
        (path, method, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if method in METHODS and path_parameters(path)
    ]
    for producer in producers:
        method, _, path = producer["operation"].partition(" ")
        source = document["paths"].get(path, {}).get(method.lower())
        if source is None:
            raise ValueError(f"openapi/source/{LINKS}: {producer['operation']} is no operation")
        answers = sorted(code for code in source["responses"] if code.startswith("2"))
        if not answers:
            raise ValueError(f"openapi/source/{LINKS}: {producer['operation']} has no 2xx answer")
        values = producer["values"]
        carried = set(path_parameters(path))
        links = {}
        for target_path, target_method, target in targets:
            wanted = path_parameters(target_path)
            if (target_path, target_method) == (path, method.lower()) or not set(wanted) & set(
                values
            ):
                continue
            if not set(wanted) <= set(values) | carried:
                continue
            links[target["operationId"]] = {
                "operationId": target["operationId"],
                "parameters": {
                    name: f"$response.body#{values[name]}"
                    if name in values
                    else f"$request.path.{name}"
                    for name in wanted
                },
            }
        if links:
            source["responses"][answers[0]]["links"] = dict(sorted(links.items()))


def _request_body(operation: dict, model: type[BaseModel], schemas: dict) -> None:
    # Generated names start with "body." so they never meet a hand-kept response schema.
    generated = model.model_json_schema(
        by_alias=True, ref_template="#/components/schemas/body.{model}"
    )
    for name, schema in generated.pop("$defs", {}).items():
        _add(schemas, f"body.{name}", _refuse_nul(schema))
    name = _add(schemas, f"body.{model.__name__}", _refuse_nul(generated))
    try:
        model.model_validate({})
        required = False  # an empty body is `{}`
    except ValidationError:
        required = True
    operation["requestBody"] = {
        "required": required,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
    }


NO_NUL = "^[^\\u0000]*$"
# A body model strips whitespace before it checks a length (Body: str_strip_whitespace, which
# strips what Unicode calls White_Space), so a string that must hold a character must hold one
# that is neither whitespace nor NUL: the name " " matched minLength 1 and was refused (400).
NOT_BLANK = rf"^[^\u0000]*[^\u0000{WHITESPACE}][^\u0000]*$"
# A model's own pattern that only refuses NUL (what read_json refuses anyway) says nothing of
# blankness: `"terminal": "  "` matched it and minLength 1, and was refused (string_too_short).
NUL_ONLY = (NO_NUL, "^[^\\x00]*$")


def _refuse_nul(schema: Any) -> Any:
    """Every body refuses NUL in any string (webhooks.bodies.read_json, 400 invalid_body), so a
    body string the model leaves free (or only refuses NUL in) says so, and one with a minimum
    length says it is not blank (NOT_BLANK): without it a client (or schemathesis) may send a
    document-valid string the server refuses."""
    if isinstance(schema, list):
        return [_refuse_nul(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    node = {key: _refuse_nul(value) for key, value in schema.items()}
    kind = node.get("type")
    is_string = kind == "string" or (isinstance(kind, list) and "string" in kind)
    if is_string and not {"enum", "const", "format"} & node.keys():
        blank_refused = node.get("minLength", 0) >= 1
        if "pattern" not in node:
            node["pattern"] = NOT_BLANK if blank_refused else NO_NUL
        elif blank_refused and node["pattern"] in NUL_ONLY:
            node["pattern"] = NOT_BLANK
    return node


def _add(schemas: dict, name: str, schema: dict) -> str:
    if name in schemas and schemas[name] != schema:
        raise ValueError(f"two different schemas are named {name}")
    schemas[name] = schema
    return name


def _openapi30(document: dict) -> dict:
    """JSON Schema 2020-12 (what pydantic writes) as OpenAPI 3.0's schema dialect."""
    document = copy.deepcopy(document)
    stack: list[Any] = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        _rewrite(node)
        stack.extend(node.values())
    return document


def _rewrite(node: dict) -> None:
    kind = node.get("type")
    if isinstance(kind, list):  # ["string", "null"]
        others = [k for k in kind if k != "null"]
        node["type"] = others[0] if len(others) == 1 else node.pop("type")
        if "null" in kind:
            node["nullable"] = True
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list) and {"type": "null"} in options:
            rest = [o for o in options if o != {"type": "null"}]
            node.pop(key)
            node["nullable"] = True
            if len(rest) == 1 and "$ref" not in rest[0]:
                node.update({k: v for k, v in rest[0].items() if k not in node})
            else:
                node["allOf" if len(rest) == 1 else key] = rest
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            node[flag] = node[bound]
            node[bound] = True
    if node.get("required") == [] and "in" not in node:
        del node["required"]
    for unsupported in ("propertyNames", "examples", "$schema"):
        node.pop(unsupported, None)
    if "$ref" in node and len(node) > 1 and isinstance(node["$ref"], str):
        node["allOf"] = [{"$ref": node.pop("$ref")}]


def render(document: dict) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    from gymctl.config import Settings
    from webhooks.app import create_app

    app = create_app(Settings(GYMCTL_ENV="test"))
    OUTPUT.write_text(render(build(app)))
    print(f"wrote {OUTPUT}")  # noqa: T201


if __name__ == "__main__":
    main()
