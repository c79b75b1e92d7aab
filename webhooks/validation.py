"""Request bodies are validated by pydantic models; a bad body is 400 invalid_body with the
offending fields, and nothing is written. The body is read by the one JSON reader
(webhooks.bodies.read_json), which has already refused depth, NaN and NUL characters."""

from __future__ import annotations

from typing import TypeVar

from flask import request
from pydantic import BaseModel, ConfigDict, ValidationError

from gymctl.errors import invalid
from webhooks import codes
from webhooks.bodies import read_json

M = TypeVar("M", bound=BaseModel)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=True)


def parse(model: type[M]) -> M:
    if request.get_data() and not request.is_json:
        raise invalid(codes.INVALID_BODY, "the body is not JSON (send application/json)")
    data = read_json()
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as error:
        fields = [
            {"field": ".".join(str(p) for p in e["loc"]), "problem": e["type"]}
            for e in error.errors()
        ]
        raise invalid(codes.INVALID_BODY, "the body does not match", fields=fields) from None
