"""The canonical JSON a snapshot's digest is taken over (RFC 8785 style): keys sorted, no
whitespace, UTF-8, strings as JSON escapes them. Snapshots hold only strings, integers, booleans,
null, lists and objects; a float (whose text form differs between encoders) is refused, so the
digest is the same in every process and language that follows the rule."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def _check(value: Any, path: str = "$") -> None:
    if isinstance(value, float):
        raise ValueError(f"{path}: floats are not allowed in a canonical snapshot")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path}: object keys must be strings")
            _check(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
    elif not (value is None or isinstance(value, str | int | bool)):
        raise ValueError(f"{path}: {type(value).__name__} is not JSON")


def canonical_json(value: Any) -> bytes:
    _check(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()
