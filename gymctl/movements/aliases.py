"""Alias folding and variant qualifiers (spec B 2.7, 4.5).

`fold` is the one normalization of a movement term: case, spaces, apostrophes, dashes and
plurals folded, so "Pull-Ups", "pull up" and "Pullup" are one term. Qualifiers are the words
that make a look-alike a variant (pronated vs supinated, one arm vs two, with bands): a pair of
names whose qualifiers differ is never a duplicate candidate.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

_SEPARATORS = re.compile(r"[\W_]+")  # spaces, dashes, slashes, any punctuation
_APOSTROPHES = re.compile("['`\u2018\u2019\u00b4]")
# Plurals that the suffix rules below would get wrong.
_IRREGULAR = {"flyes": "fly", "flies": "fly", "calves": "calf", "halves": "half", "feet": "foot"}
_KEEP_S = ("ss", "us", "is")
_ES_AFTER = ("sses", "shes", "ches", "xes", "zes")


def singular(word: str) -> str:
    """One English word in its singular form; a singular word is returned unchanged."""
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(_ES_AFTER):
        return word[:-2]
    if word.endswith("s") and not word.endswith(_KEEP_S):
        return word[:-1]
    return word


def words(term: str) -> list[str]:
    """The term's words: accents stripped, lower case, apostrophes dropped, split on the rest."""
    if term.isascii():
        text = term.lower()
    else:
        text = unicodedata.normalize("NFKD", term)
        text = "".join(c for c in text if not unicodedata.combining(c)).casefold()
    text = _APOSTROPHES.sub("", text)
    return [w for w in _SEPARATORS.split(text) if w]


def fold(term: str) -> str:
    """The folded key of a term: singular words joined without separators."""
    return "".join(singular(w) for w in words(term))


def merge_aliases(existing: Iterable[str], added: Iterable[str], *, name: str) -> list[str]:
    """`existing` then `added`, one spelling per folded term, never the row's own name."""
    seen = {fold(name)}
    merged = []
    for alias in (*existing, *added):
        key = fold(alias)
        if key and key not in seen:
            seen.add(key)
            merged.append(alias.strip())
    return merged


# Each group is one axis along which look-alikes differ; a name's qualifiers are the
# (group, value) pairs its words hit. Values are folded phrases.
_QUALIFIERS: dict[str, dict[str, str]] = {
    "grip": {
        "pronated": "pronated",
        "overhand": "pronated",
        "palmdown": "pronated",
        "supinated": "supinated",
        "underhand": "supinated",
        "palmup": "supinated",
        "reversegrip": "supinated",
        "neutralgrip": "neutral",
        "palmin": "neutral",
        "hammer": "neutral",
        "closegrip": "close",
        "narrowgrip": "close",
        "widegrip": "wide",
        "mediumgrip": "medium",
        "openpalm": "open",
    },
    "side": {
        "onearm": "one",
        "singlearm": "one",
        "onearmed": "one",
        "onehand": "one",
        "singlehand": "one",
        "oneleg": "one",
        "singleleg": "one",
        "unilateral": "one",
        "twoarm": "two",
        "doublearm": "two",
        "double": "two",
        "alternate": "alternating",
        "alternating": "alternating",
    },
    "angle": {"incline": "incline", "decline": "decline", "flat": "flat"},
    "posture": {
        "seated": "seated",
        "sitting": "seated",
        "standing": "standing",
        "lying": "lying",
        "supine": "lying",
        "prone": "prone",
        "facedown": "prone",
        "faceup": "lying",
        "kneeling": "kneeling",
        "bentover": "bentover",
    },
    "load": {
        "withband": "band",
        "band": "band",
        "banded": "band",
        "chain": "chain",
        "withchain": "chain",
        "weighted": "weighted",
        "assisted": "assisted",
    },
    "position": {"front": "front", "behindtheneck": "behind", "overhead": "overhead"},
    "level": {"advanced": "advanced", "deficit": "deficit", "pause": "pause"},
}
_LONGEST = max(len(k) for group in _QUALIFIERS.values() for k in group)


def qualifiers(name: str) -> frozenset[tuple[str, str]]:
    """The variant qualifiers of a movement name, as (axis, value) pairs."""
    folded = [singular(w) for w in words(name)]
    found: set[tuple[str, str]] = set()
    for start in range(len(folded)):
        phrase = ""
        for word in folded[start:]:
            phrase += word
            if len(phrase) > _LONGEST:
                break
            for axis, values in _QUALIFIERS.items():
                if phrase in values:
                    found.add((axis, values[phrase]))
    return frozenset(found)


def same_variant(a: str, b: str) -> bool:
    """False when the names differ in a qualifier: only one has it, or they hold different ones."""
    return qualifiers(a) == qualifiers(b)
