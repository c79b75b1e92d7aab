"""The duplicates report on free-exercise-db (issue 22): the embedding reads what a movement is
(name, instructions, attributes), so duplicates under other names are found, and look-alikes
that differ by implement or qualifier are not. Measured against hand-labelled pairs."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from gymctl.models import Movement
from gymctl.movements.duplicates import duplicates_report
from gymctl.movements.embeddings import LOCAL_MODEL, LocalEmbedder
from gymctl.movements.library import FORMAT
from gymctl.movements.seed import seed_library
from tests.conftest import NOW
from tests.movements.conftest import DATA

LABELS = Path(__file__).resolve().parent / "data" / "duplicate_labels.json"


def report(session):
    return duplicates_report(session, model=LOCAL_MODEL, threshold=0.92, limit=10_000)


def pairs_by_names(result) -> dict[frozenset, dict]:
    return {frozenset((p["a"]["name"], p["b"]["name"])): p for p in result["pairs"]}


def test_the_labels_cover_at_least_150_pairs_with_a_reason_each():
    labels = json.loads(LABELS.read_text())["labels"]
    names = {entry["name"] for entry in json.loads(DATA.read_text())}
    assert len(labels) >= 150
    assert {label["label"] for label in labels} == {"duplicate", "variant", "different"}
    for label in labels:
        assert {label["a"], label["b"]} <= names
        assert label["a"] != label["b"]
        assert label["reason"].strip()


def test_the_report_meets_its_precision_and_recall_on_the_labelled_pairs(seeded, session):
    """Goal of issue 22: precision >= 0.9 and recall >= 0.7 on our labels (a variant or a
    different movement reported is a false positive)."""
    reported = pairs_by_names(report(session))
    tp = fp = fn = 0
    for label in json.loads(LABELS.read_text())["labels"]:
        found = frozenset((label["a"], label["b"])) in reported
        if label["label"] == "duplicate":
            tp, fn = tp + found, fn + (not found)
        else:
            fp += found
    assert tp / (tp + fp) >= 0.9
    assert tp / (tp + fn) >= 0.7


def test_a_duplicate_under_another_name_is_found_with_its_evidence(seeded, session):
    """ "Hammer Grip Incline DB Bench Press" and "Incline Dumbbell Bench With Palms Facing In"
    share few name words; their instructions, equipment and muscles are the same lift."""
    pairs = pairs_by_names(report(session))
    pair = pairs[
        frozenset(
            ("Hammer Grip Incline DB Bench Press", "Incline Dumbbell Bench With Palms Facing In")
        )
    ]
    evidence = pair["evidence"]
    assert evidence["parts"]["instructions"] >= 0.99
    assert evidence["instructionOverlap"] >= 0.9
    assert evidence["equipment"] == {"a": "dumbbell", "b": "dumbbell"}
    assert "same equipment (dumbbell)" in evidence["agrees"]
    assert any(line.startswith("name words:") for line in evidence["differs"])
    assert frozenset(("Barbell Guillotine Bench Press", "Neck Press")) in pairs


def test_a_look_alike_with_another_implement_is_never_a_pair(seeded, session):
    """Same name but the implement: "Barbell Walking Lunge" vs "Bodyweight Walking Lunge"
    (their instructions are copies); excluded and counted, never a candidate."""
    result = report(session)
    assert frozenset(("Barbell Walking Lunge", "Bodyweight Walking Lunge")) not in (
        pairs_by_names(result)
    )
    assert result["excludedEquipment"] > 0
    for pair in result["pairs"]:
        a, b = pair["a"], pair["b"]
        assert not (a["equipment"] and b["equipment"] and a["equipment"] != b["equipment"])


def test_the_embedding_reads_instructions_and_attributes_and_a_change_reembeds(session, store):
    def publish(**fields):
        entry = {"name": "Ring Row", "equipment": "other", "primaryMuscles": ["lats"], **fields}
        body = json.dumps({"format": FORMAT, "movements": [entry]}).encode()
        store.put("lib.json", body, content_type="application/json")

    publish(instructions=["Hang under the rings."], secondaryMuscles=["biceps"])
    seed_library(session, store, LocalEmbedder(), key="lib.json", now=NOW)
    row = session.scalar(select(Movement).where(Movement.slug == "ring-row"))
    assert (row.secondary_muscles, row.mechanic) == (["biceps"], None)
    first = row.embedding
    publish(
        instructions=["Hang under the rings."], secondaryMuscles=["biceps"], mechanic="compound"
    )
    again = seed_library(session, store, LocalEmbedder(), key="lib.json", now=NOW)
    assert (again["embedded"], row.mechanic) == (1, "compound")
    second = row.embedding
    publish(instructions=["Pull the chest to the rings."], mechanic="compound")
    seed_library(session, store, LocalEmbedder(), key="lib.json", now=NOW)
    assert len({first, second, row.embedding}) == 3
