"""What a duplicate candidate rests on, beyond its cosine (spec B 4.5 /duplicates).

Two gates raise precision where the embedding cannot: the implements must agree (equipment
fields, and any implement a name states: "Barbell Walking Lunge" is not "Bodyweight Walking
Lunge") and the rows must share a primary muscle. The rest is shown, not judged: per pair, the
three parts of the cosine, how many instruction words are shared, what agrees and what differs,
so an operator can tell a duplicate from a look-alike before merging.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from gymctl.models import Movement
from gymctl.movements.aliases import named_implements, singular, words
from gymctl.movements.embeddings import part_similarities

_WORD = re.compile(r"[a-z]+")
# Words every instruction uses; they say nothing about which lift it is.
_FILLER = frozenset(
    {
        *("a", "an", "and", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it"),
        *("of", "on", "or", "so", "that", "the", "then", "this", "to", "until", "up", "down"),
        *("while", "will", "with", "you", "your"),
    }
)
_NAME_FILLER = frozenset(("a", "an", "and", "the", "with", "to", "of", "on", "machine", "exercise"))


def implements_agree(
    a_name: str, a_equipment: str | None, b_name: str, b_equipment: str | None
) -> bool:
    """False when both equipment fields are set and differ, or the implements the two rows
    state (fields and name words) have nothing in common. An unknown side agrees."""
    if a_equipment and b_equipment and a_equipment != b_equipment:
        return False
    a = named_implements(a_name) | ({a_equipment} if a_equipment else set())
    b = named_implements(b_name) | ({b_equipment} if b_equipment else set())
    return not (a and b and not a & b)


def muscles_agree(a: Iterable[str] | None, b: Iterable[str] | None) -> bool:
    """The rows share a primary muscle; a row that names none is not judged."""
    a_set, b_set = set(a or []), set(b or [])
    return not (a_set and b_set) or bool(a_set & b_set)


def instruction_words(lines: Sequence[str] | None) -> set[str]:
    text = " ".join(lines or []).lower()
    return {singular(w) for w in _WORD.findall(text)} - _FILLER


def instruction_overlap(a: Movement, b: Movement) -> float | None:
    """Shared content words of the two instructions over all of them (Jaccard); None when a
    row has no instructions."""
    a_words, b_words = instruction_words(a.instructions), instruction_words(b.instructions)
    if not a_words or not b_words:
        return None
    return round(len(a_words & b_words) / len(a_words | b_words), 2)


def _name_words(name: str) -> list[str]:
    return [w for w in dict.fromkeys(singular(w) for w in words(name)) if w not in _NAME_FILLER]


def pair_evidence(a: Movement, b: Movement, a_vector: np.ndarray, b_vector: np.ndarray) -> dict:
    """Why this pair (`agrees`) and what differs (`differs`), with the figures behind them."""
    parts = part_similarities(a_vector, b_vector)
    overlap = instruction_overlap(a, b)
    shared = sorted(set(a.primary_muscles or []) & set(b.primary_muscles or []))
    agrees: list[str] = [f"same movement pattern ({a.movement_pattern or 'none'})"]
    differs: list[str] = []
    if parts["instructions"] >= 0.9:
        agrees.append(f"instructions describe the same lift (cosine {parts['instructions']})")
    if overlap is not None and overlap >= 0.6:
        agrees.append(f"instructions share {overlap:.0%} of their words")
    elif overlap is not None:
        differs.append(f"instructions worded differently ({overlap:.0%} shared words)")
    if parts["name"] >= 0.9:
        agrees.append(f"names mean the same (cosine {parts['name']})")
    _compare(agrees, differs, "equipment", a.equipment, b.equipment)
    if shared:
        agrees.append(f"primary muscles: {', '.join(shared)}")
    _compare(agrees, differs, "category", a.category, b.category)
    _compare(agrees, differs, "mechanics", a.mechanic, b.mechanic)
    a_secondary, b_secondary = set(a.secondary_muscles or []), set(b.secondary_muscles or [])
    if a_secondary != b_secondary:
        only_a, only_b = sorted(a_secondary - b_secondary), sorted(b_secondary - a_secondary)
        differs.append(f"secondary muscles: only A {only_a}, only B {only_b}")
    a_words, b_words = _name_words(a.name), _name_words(b.name)
    only_a = [w for w in a_words if w not in b_words]
    only_b = [w for w in b_words if w not in a_words]
    if only_a or only_b:
        differs.append(f"name words: only A {only_a}, only B {only_b}")
    return {
        "parts": parts,
        "instructionOverlap": overlap,
        "equipment": {"a": a.equipment, "b": b.equipment},
        "sharedPrimaryMuscles": shared,
        "agrees": agrees,
        "differs": differs,
    }


def _compare(agrees: list[str], differs: list[str], label: str, a: Any, b: Any) -> None:
    if a and a == b:
        agrees.append(f"same {label} ({a})")
    elif a != b:
        differs.append(f"{label}: A {a or 'unknown'}, B {b or 'unknown'}")
