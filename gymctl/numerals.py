"""Whole numbers read from text (a query string, a header, a provider's answer, an argument).

`str.isdigit()` is True for '²', which int() refuses (a 500 where a refusal was meant), and for
other scripts' digits ('१', '٣'), which int() reads as 1 and 3: a number no one typed as such.
"""

from __future__ import annotations


def is_decimal(text: str) -> bool:
    """Only the ASCII digits 0-9, at least one."""
    return text.isascii() and text.isdigit()


# Every whole number gymctl reads from text fits a BIGINT (19 digits): a row id, a Unix time, a
# count, a delay in seconds. Longer is no such number, and past 4,300 digits int() raises
# ValueError rather than read it (CPython's guard against quadratic conversion): a 500 on a
# query string of nines.
MAX_DIGITS = 19


def whole_number(text: str) -> int | None:
    """The number `text` writes in ASCII digits (at most MAX_DIGITS of them, leading zeros
    counted), else None."""
    return int(text) if is_decimal(text) and len(text) <= MAX_DIGITS else None
