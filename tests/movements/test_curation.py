"""Seed from free-exercise-db into PostgreSQL, then duplicates, merge and alias change end to
end (spec B 4.5). A wrong merge corrupts workouts: dry runs write nothing, refusals change
nothing, every write leaves an audit row."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gymctl.errors import DomainError
from gymctl.models import AuditLog, Movement, Workout, WorkoutMovement
from gymctl.movements.duplicates import duplicates_report
from gymctl.movements.embeddings import LOCAL_MODEL, LocalEmbedder, decode_all, stored_model
from gymctl.movements.library import FORMAT
from gymctl.movements.merge import alias_change, merge_pairs
from gymctl.movements.seed import seed_library
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW
from tests.movements.conftest import LIBRARY_KEY

EMBEDDER = LocalEmbedder()


def by_slug(session, slug) -> Movement:
    return session.scalar(select(Movement).where(Movement.slug == slug))


def report(session):
    return duplicates_report(session, model=LOCAL_MODEL, threshold=0.92)


def workout_using(session, *movements) -> Workout:
    workout = Workout(organization_id=factories.organization(session).id, title="WOD")
    session.add(workout)
    session.flush()
    for position, movement in enumerate(movements):
        session.add(
            WorkoutMovement(workout_id=workout.id, movement_id=movement.id, position=position)
        )
    session.flush()
    return workout


def test_seed_upserts_every_row_with_a_stored_embedding_and_an_audit(seeded, session):
    assert seeded["created"] == 873
    assert seeded["embedded"] == 873
    rows = session.scalars(select(Movement)).all()
    assert len(rows) == 873
    assert {r.embedding_model for r in rows} == {stored_model(LOCAL_MODEL)}
    vectors = decode_all([r.embedding for r in rows])
    assert vectors.shape == (873, 3 * 256)  # name, instructions, attributes side by side
    assert session.scalar(select(AuditLog).where(AuditLog.action == "movements.library_seeded"))


def test_a_second_seed_changes_nothing_and_embeds_nothing(seeded, session, store):
    again = seed_library(session, store, EMBEDDER, key=LIBRARY_KEY, now=NOW)
    assert (again["unchanged"], again["created"], again["embedded"]) == (873, 0, 0)


def test_rebuild_overwrites_enriched_fields_and_a_plain_seed_only_fills_them(session, store):
    def publish(cues):
        entry = {"name": "Pull-Up", "aliases": ["Pullups"], "cues": cues}
        store.put(
            "lib.json",
            json.dumps({"format": FORMAT, "movements": [entry]}).encode(),
            content_type="application/json",
        )

    publish(["Chest up"])
    seed_library(session, store, EMBEDDER, key="lib.json", now=NOW)
    publish(["Pull elbows down"])
    seed_library(session, store, EMBEDDER, key="lib.json", now=NOW)
    assert by_slug(session, "pull-up").cues == ["Chest up"]
    result = seed_library(session, store, EMBEDDER, key="lib.json", now=NOW, rebuild=True)
    assert by_slug(session, "pull-up").cues == ["Pull elbows down"]
    assert result["embedded"] == 1


def test_duplicates_pair_true_duplicates_and_exclude_variant_look_alikes(seeded, session):
    result = report(session)
    names = {frozenset((p["a"]["name"], p["b"]["name"])) for p in result["pairs"]}
    assert frozenset(("Decline Smith Press", "Smith Machine Decline Press")) in names
    assert (
        frozenset(("Cable Rope Overhead Triceps Extension", "Triceps Overhead Extension with Rope"))
        in names
    )
    # One arm vs two, palms up vs down, incline vs flat: similar embeddings, never a pair.
    assert result["excludedVariantQualifier"] > 0
    for pair in result["pairs"]:
        assert pair["a"]["movementPattern"] == pair["b"]["movementPattern"]
        assert pair["similarity"] >= 0.92
        assert set(pair["references"]) == {pair["a"]["id"], pair["b"]["id"]}
    assert result["dryRun"] is True


def test_a_shared_name_alone_is_never_evidence_it_is_an_alias_collision(seeded, session):
    """ "Squat with Bands" (barbell, bands on the bar) and "Squats - With Bands" (bands only)
    fold to one term but are different movements: a collision, not a pair."""
    result = report(session)
    pairs = {frozenset((p["a"]["slug"], p["b"]["slug"])) for p in result["pairs"]}
    assert frozenset(("squat-with-bands", "squats-with-bands")) not in pairs
    terms = {c["term"]: {m["slug"] for m in c["movements"]} for c in result["aliasCollisions"]}
    assert terms["squatwithband"] == {"squat-with-bands", "squats-with-bands"}


def test_suggested_winner_is_the_row_workouts_use(seeded, session):
    smith = by_slug(session, "smith-machine-decline-press")
    workout_using(session, smith, smith)
    (pair,) = [
        p
        for p in report(session)["pairs"]
        if "decline-smith-press" in (p["a"]["slug"], p["b"]["slug"])
    ]
    assert pair["suggestedWinnerId"] == str(smith.id)
    assert pair["references"][str(smith.id)] == {"workout_movements": 2}


def test_merge_dry_run_counts_and_writes_nothing(seeded, session):
    winner, loser = (
        by_slug(session, "decline-smith-press"),
        by_slug(session, "smith-machine-decline-press"),
    )
    workout_using(session, loser)
    session.commit()
    before = snapshot(session)
    result = merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=True, now=NOW)
    session.commit()
    (pair,) = result["pairs"]
    assert pair["outcome"] == "would_merge"
    assert pair["references"] == {"workout_movements": 1}
    assert "Smith Machine Decline Press" in pair["aliasesAfter"]
    assert snapshot(session) == before


def test_a_merge_dry_run_predicts_the_real_run_pair_by_pair(seeded, session):
    """The dry run applies the pairs in order, as the real run does: a pair whose winner an
    earlier pair merged is refused the same way, a loser merged twice is already_merged, and a
    chain counts the references the earlier pair moved. It writes nothing and embeds nothing."""
    a, b, c = (
        by_slug(session, s)
        for s in ("decline-smith-press", "smith-machine-decline-press", "face-pull")
    )
    workout_using(session, b, b)
    session.commit()
    before = snapshot(session)

    def both(pairs):
        outcomes = []
        for dry_run in (True, False):
            try:
                result = merge_pairs(session, EMBEDDER, pairs, dry_run=dry_run, now=NOW)
            except DomainError as error:
                outcomes.append(error.code)
            else:
                outcomes.append([(p["outcome"], p.get("references")) for p in result["pairs"]])
            session.rollback()
            assert snapshot(session) == before
        return outcomes

    dry, real = both([(a.id, b.id), (b.id, a.id)])
    assert dry == real == "merge_winner_deleted"
    dry, real = both([(a.id, b.id), (a.id, b.id)])
    assert dry == [("would_merge", {"workout_movements": 2}), ("already_merged", None)]
    assert real == [("merged", {"workout_movements": 2}), ("already_merged", None)]
    # B into A, then A into C: the second pair moves the references the first brought to A.
    dry, real = both([(a.id, b.id), (c.id, a.id)])
    assert dry == [("would_merge", {"workout_movements": 2})] * 2
    assert real == [("merged", {"workout_movements": 2})] * 2

    class NoEmbedding:
        def __getattr__(self, name):
            raise AssertionError("a dry run embeds nothing")

    result = merge_pairs(session, NoEmbedding(), [(a.id, b.id)], dry_run=True, now=NOW)
    assert result["pairs"][0]["aliasesAfter"] == ["Smith Machine Decline Press"]
    session.commit()
    assert snapshot(session) == before


def test_merge_repoints_folds_names_soft_deletes_reembeds_and_audits(seeded, session):
    winner, loser = (
        by_slug(session, "decline-smith-press"),
        by_slug(session, "smith-machine-decline-press"),
    )
    workout = workout_using(session, loser)
    # The folded names hold the same words, so the fresh vector may equal the old one: mark the
    # stored one stale to see the merge write it again.
    winner.embedding_model = "stale"
    result = merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)
    assert result["pairs"][0]["outcome"] == "merged"
    line = session.scalar(select(WorkoutMovement).where(WorkoutMovement.workout_id == workout.id))
    assert line.movement_id == winner.id
    assert winner.aliases == ["Smith Machine Decline Press"]
    assert (loser.deleted_at, loser.merged_into_id) == (NOW, winner.id)
    assert winner.embedding_model == stored_model(LOCAL_MODEL)
    audit = session.scalar(select(AuditLog).where(AuditLog.action == "movements.merged"))
    assert audit.data["before"] == []
    assert audit.data["after"] == ["Smith Machine Decline Press"]
    assert audit.data["references"] == {"workout_movements": 1}
    # The merged pair leaves the report; merging it again reports already_merged.
    assert all(loser.slug not in (p["a"]["slug"], p["b"]["slug"]) for p in report(session)["pairs"])
    again = merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)
    assert again["pairs"][0]["outcome"] == "already_merged"


def test_reseeding_never_resurrects_a_merged_loser(seeded, session, store):
    winner, loser = (
        by_slug(session, "decline-smith-press"),
        by_slug(session, "smith-machine-decline-press"),
    )
    merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)
    result = seed_library(session, store, EMBEDDER, key=LIBRARY_KEY, now=NOW)
    assert result["skippedDeleted"] == 1
    assert loser.deleted_at == NOW


def refused(session, call, code, status):
    session.commit()
    before = snapshot(session)
    with pytest.raises(DomainError) as error:
        call()
    session.rollback()
    assert (error.value.code, error.value.status) == (code, status)
    assert snapshot(session) == before


def test_merge_refusals_change_nothing(seeded, session):
    a, b, c, d = (
        by_slug(session, s)
        for s in ("decline-smith-press", "smith-machine-decline-press", "face-pull", "clean-pull")
    )
    import uuid

    refused(
        session,
        lambda: merge_pairs(session, EMBEDDER, [(a.id, a.id)], dry_run=False, now=NOW),
        "merge_pair_invalid",
        400,
    )
    refused(
        session,
        lambda: merge_pairs(session, EMBEDDER, [(a.id, uuid.uuid4())], dry_run=False, now=NOW),
        "movement_not_found",
        404,
    )
    merge_pairs(session, EMBEDDER, [(a.id, b.id)], dry_run=False, now=NOW)
    # The second pair would merge into a loser: the whole request is refused, the first too.
    refused(
        session,
        lambda: merge_pairs(
            session, EMBEDDER, [(a.id, c.id), (b.id, d.id)], dry_run=False, now=NOW
        ),
        "merge_winner_deleted",
        409,
    )


def test_alias_change_removes_every_spelling_keeps_before_and_after_and_reembeds(seeded, session):
    winner, loser = (
        by_slug(session, "decline-smith-press"),
        by_slug(session, "smith-machine-decline-press"),
    )
    merge_pairs(session, EMBEDDER, [(winner.id, loser.id)], dry_run=False, now=NOW)
    winner.aliases = [*winner.aliases, "smith-machine decline presses"]
    winner.embedding_model = "stale"  # the aliases fold to the name's words: see a new write
    session.flush()
    preview = alias_change(
        session,
        EMBEDDER,
        source_id=winner.id,
        alias="SMITH MACHINE DECLINE PRESS",
        dry_run=True,
        now=NOW,
    )
    assert preview["after"] == []
    assert len(preview["removed"]) == 2
    assert len(winner.aliases) == 2  # the dry run wrote nothing
    alias_change(
        session,
        EMBEDDER,
        source_id=winner.id,
        alias="smith machine decline press",
        dry_run=False,
        now=NOW,
    )
    assert winner.aliases == []
    assert winner.embedding_model == stored_model(LOCAL_MODEL)
    audit = session.scalar(select(AuditLog).where(AuditLog.action == "movements.alias_changed"))
    assert audit.data["before"] == ["Smith Machine Decline Press", "smith-machine decline presses"]
    assert audit.data["after"] == []


def test_alias_change_refusals_change_nothing(seeded, session):
    row = by_slug(session, "decline-smith-press")
    refused(
        session,
        lambda: alias_change(
            session, EMBEDDER, source_id=row.id, alias="nothing here", dry_run=False, now=NOW
        ),
        "alias_not_found",
        404,
    )
    refused(
        session,
        lambda: alias_change(
            session,
            EMBEDDER,
            source_id=row.id,
            alias="decline smith presses",
            dry_run=False,
            now=NOW,
        ),
        "alias_is_name",
        409,
    )
    refused(
        session,
        lambda: alias_change(
            session, EMBEDDER, source_id=row.id, alias="--", dry_run=False, now=NOW
        ),
        "alias_invalid",
        400,
    )


def test_seed_refuses_a_missing_file_404_and_writes_nothing(session, store):
    refused(
        session,
        lambda: seed_library(session, store, EMBEDDER, key="nope.json", now=NOW),
        "library_file_not_found",
        404,
    )
