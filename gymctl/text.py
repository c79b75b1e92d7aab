"""Rules for the text people type that every area applies the same way."""

from __future__ import annotations

import unicodedata


def one_line(text: str) -> bool:
    """No control character and no line or paragraph separator: a name the schedule, a roster,
    an email subject or a native build shows on one line. A direction mark (Cf), which a Hebrew
    name may hold, is no break."""
    return not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)


def on_one_line(text: str) -> str:
    """`text` with every run of whitespace (line breaks and separators included) as one space:
    what is shown on one line whatever was typed (a mail header refuses a line break)."""
    return " ".join(text.split())
