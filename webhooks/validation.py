"""Request bodies are validated by pydantic models; a bad body is 400 invalid_body with the
offending fields, and nothing is written."""

from __future__ import annotations

from typing import Any, TypeVar

from flask import request
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from gymctl.errors import DomainError

M = TypeVar("M", bound=BaseModel)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=True)

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        """PostgreSQL text cannot hold NUL and no client has a reason to send one."""
        if _contains_nul(data):
            raise ValueError("text may not contain NUL characters")
        return data


def _contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_contains_nul(item) for item in value)
    return False


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
