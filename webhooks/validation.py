"""Request bodies are validated by pydantic models; a bad body is 400 invalid_body with the
offending fields, and nothing is written."""

from __future__ import annotations

from typing import TypeVar

from flask import request
from pydantic import BaseModel, ConfigDict, ValidationError

from gymctl.errors import DomainError

M = TypeVar("M", bound=BaseModel)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=True)


def parse(model: type[M]) -> M:
    data = request.get_json(silent=True)
    if data is None and request.get_data():
        raise DomainError("invalid_body", "the body is not JSON")
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as error:
        fields = [
            {"field": ".".join(str(p) for p in e["loc"]), "problem": e["type"]}
            for e in error.errors()
        ]
        raise DomainError("invalid_body", "the body does not match", fields=fields) from None
