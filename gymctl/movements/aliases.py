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
        "palmfacingdown": "pronated",
        "palmfacingforward": "pronated",
        "supinated": "supinated",
        "underhand": "supinated",
        "palmup": "supinated",
        "palmfacingup": "supinated",
        "reversegrip": "supinated",
        "neutralgrip": "neutral",
        "palmin": "neutral",
        "palmfacingin": "neutral",
        "palmfacingeachother": "neutral",
        "hammer": "neutral",
        "hammergrip": "neutral",
        "closegrip": "close",
        "narrowgrip": "close",
        "close": "close",
        "widegrip": "wide",
        "wide": "wide",
        "openpalm": "open",
        "mixedgrip": "mixed",
    },
    "side": {
        "onearm": "one",
        "singlearm": "one",
        "onearmed": "one",
        "onehand": "one",
        "singlehand": "one",
        "oneleg": "one",
        "onelegged": "one",
        "singleleg": "one",
        "unilateral": "one",
        "twoarm": "two",
        "doublearm": "two",
        "double": "two",
        "two": "two",
        "alternate": "alternating",
        "alternating": "alternating",
    },
    "angle": {"incline": "incline", "decline": "decline", "footelevated": "decline"},
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
        "onknee": "kneeling",
        "ontheknee": "kneeling",
        "hanging": "hanging",
        "bentover": "bentover",
    },
    "stance": {
        "widestance": "wide",
        "narrowstance": "narrow",
        "closestance": "narrow",
        "sumo": "sumo",
        "split": "split",
        "staggered": "staggered",
    },
    "load": {
        "withband": "band",
        "band": "band",
        "banded": "band",
        "reverseband": "reverse-band",
        "chain": "chain",
        "withchain": "chain",
        "weighted": "weighted",
        "assisted": "assisted",
    },
    "machine": {"smith": "smith"},
    "attachment": {
        "rope": "rope",
        "vbar": "v-bar",
        "straightbar": "straight-bar",
        "strap": "straps",
    },
    "support": {
        "exerciseball": "ball",
        "stabilityball": "ball",
        "swissball": "ball",
        "box": "box",
        "floor": "floor",
        "preacher": "preacher",
        "toabench": "box",
    },
    "position": {
        "front": "front",
        "behindtheneck": "behind",
        "behindthehead": "behind",
        "behindtheback": "behind",
        "overhead": "overhead",
        "rear": "rear",
        "reardelt": "rear",
        "side": "side",
        "low": "low",
        "high": "high",
    },
    "start": {
        "hang": "hang",
        "fromblock": "blocks",
        "belowtheknee": "below-knee",
        "belowknee": "below-knee",
        "offpin": "pins",
        "dead": "dead",
    },
    "style": {
        "power": "power",
        "speed": "speed",
        "full": "full",
        "partial": "partial",
        "isometric": "isometric",
        "jump": "jump",
        "jumping": "jump",
        "twist": "twist",
        "rotation": "rotation",
        "reverse": "reverse",
        "external": "external",
        "internal": "internal",
        "stiffleg": "stiff",
        "stifflegged": "stiff",
        "straightleg": "stiff",
        "straightarm": "straight-arm",
        "bentarm": "bent-arm",
        "kipping": "kipping",
        "inner": "inner",
        "flexor": "flexor",
        "pullthrough": "pull-through",
        "legup": "leg-up",
        "rocking": "rocking",
        "lungestyle": "lunge",
        "squatstyle": "squat",
        "multipleresponse": "repeated",
        "singleresponse": "single",
        "pushpress": "push-press",
        "pronation": "pronation",
        "supination": "supination",
    },
    "pace": {"walking": "walk", "jogging": "jog", "running": "run", "sprint": "sprint"},
    "lift": {"clean": "clean", "snatch": "snatch", "jerk": "jerk"},
    "level": {"advanced": "advanced", "deficit": "deficit", "pause": "pause"},
    "target": {
        "neck": "neck",
        "guillotine": "neck",
        "tochin": "chin",
        "onthelegpress": "leg-press",
    },
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


# Names of one thing said two ways: folded phrase -> the words the embedding reads instead.
# Abbreviations, brand or jargon names, and the default angle and grip (flat, medium), which
# a name may state or leave out without naming another movement.
_SYNONYMS: dict[str, str] = {
    "db": "dumbbell",
    "kb": "kettlebell",
    "bb": "barbell",
    "ez": "ezbar",
    "ezcurlbar": "ezbar",
    "smithmachine": "smith",
    "leverage": "machine",
    "guillotine": "neck",
    "legtuck": "leg pull in",
    "reardelt": "rear lateral",
    "skullcrusher": "lying tricep extension",
    "militarypress": "shoulder press",
    "overheadpress": "shoulder press",
    "pressup": "push up",
    "rdl": "romanian deadlift",
    "flye": "fly",
    "flat": "",
    "medium": "",
    "mediumgrip": "",
    "exercise": "",
}
# Implement words in names -> the equipment value they name (free-exercise-db's vocabulary).
IMPLEMENTS: dict[str, str] = {
    "barbell": "barbell",
    "dumbbell": "dumbbell",
    "db": "dumbbell",
    "kettlebell": "kettlebells",
    "kb": "kettlebells",
    "cable": "cable",
    "smith": "machine",
    "machine": "machine",
    "leverage": "machine",
    "band": "bands",
    "bodyweight": "body only",
    "ezbar": "e-z curl bar",
}
_CANONICAL = {
    phrase: value for values in _QUALIFIERS.values() for phrase, value in values.items()
} | _SYNONYMS
_LONGEST_CANONICAL = max(len(k) for k in _CANONICAL)


def canonical_name(name: str, equipment: str | None = None) -> str:
    """The name as the embedding reads it: each qualifier phrase as its value ("palms facing
    in" and "hammer grip" both "neutral"), synonyms as one spelling, and the implement word
    dropped when it only repeats the equipment (the attributes carry it)."""
    folded = [singular(w) for w in words(name)]
    out: list[str] = []
    start = 0
    while start < len(folded):
        match, phrase = None, ""
        for stop in range(start, len(folded)):
            phrase += folded[stop]
            if len(phrase) > _LONGEST_CANONICAL:
                break
            if phrase in _CANONICAL:
                match = (stop, _CANONICAL[phrase])
        end, text = match or (start, folded[start])
        out.append(text)
        start = end + 1
    return " ".join(w for w in out if w and not (equipment and IMPLEMENTS.get(w) == equipment))


def named_implements(name: str) -> set[str]:
    """The equipment values a name's words state ("Barbell Walking Lunge" -> barbell)."""
    return {IMPLEMENTS[w] for w in (singular(w) for w in words(name)) if w in IMPLEMENTS}
