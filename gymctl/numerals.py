"""Whole numbers read from text (a query string, a header, a provider's answer, an argument).

`str.isdigit()` is True for '²', which int() refuses (a 500 where a refusal was meant), and for
other scripts' digits ('१', '٣'), which int() reads as 1 and 3: a number no one typed as such.
"""

from __future__ import annotations


def is_decimal(text: str) -> bool:
    """Only the ASCII digits 0-9, at least one."""
    return text.isascii() and text.isdigit()
