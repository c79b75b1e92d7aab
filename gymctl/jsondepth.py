"""How deep a JSON text nests, measured on its bytes before it is parsed.

Python's json parser recurses: 100 000 levels of `[` are a RecursionError, so every reader of
untrusted JSON (the API's bodies, an asset transform) checks this first. Pure, no recursion.
"""

from __future__ import annotations

import re
from itertools import accumulate

# A string literal, or an unterminated one running to the end. Possessive, and a lone trailing
# backslash still matches: a backslash-quote run without a closing quote is consumed once instead
# of being rescanned from each of its quotes (quadratic: seconds for a 64 KiB body).
MAX_DEPTH = 32  # our deepest document (a branding draft) is 5 levels

_STRING = re.compile(rb'"(?:[^"\\]++|\\.?)*+(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects, brackets inside strings not counted. Works
    on UTF-8 bytes: no byte of a multi-byte character is an ASCII bracket or quote. Exact for
    valid JSON; for invalid JSON, exact up to where the parser fails."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
