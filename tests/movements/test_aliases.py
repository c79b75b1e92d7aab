"""Alias folding (spec B 2.7: case, spaces, apostrophes, dashes and plurals folded) and the
variant qualifiers that keep look-alikes apart (spec B 4.5)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gymctl.movements.aliases import (
    canonical_name,
    fold,
    merge_aliases,
    qualifiers,
    same_variant,
    singular,
)

# Words whose plural is the word plus "s" (no s, u or i endings, whose "us" and "is" stay).
WORD = st.text(alphabet="abcdfgklmnoprtuvw", min_size=3, max_size=8).filter(
    lambda w: not w.endswith(("s", "u", "i")) and singular(w) == w
)
SEPARATOR = st.sampled_from([" ", "  ", "-", " - ", "_", "\u2013", "/"])


@given(st.lists(WORD, min_size=1, max_size=4), st.data())
def test_fold_ignores_case_separators_apostrophes_and_plurals(words, data):
    plain = " ".join(words)
    varied = ""
    for index, word in enumerate(words):
        if index:
            varied += data.draw(SEPARATOR)
        if data.draw(st.booleans()):
            word = word.upper() if data.draw(st.booleans()) else word.title()
        if data.draw(st.booleans()):
            word += "s"
        if data.draw(st.booleans()):
            word = word[:1] + "'" + word[1:]
        varied += word
    assert fold(varied) == fold(plain)


@given(st.text(max_size=40))
def test_fold_is_idempotent_and_never_keeps_separators(text):
    folded = fold(text)
    assert fold(folded) == folded
    assert not any(c in folded for c in " -_'")


def test_fold_examples_from_the_library():
    assert fold("Pull-Ups") == fold("pull up") == fold("Pullup")
    assert fold("Farmer's Walk") == fold("Farmers Walk") == fold("farmer\u2019s walks")
    assert fold("Squats - With Bands") == fold("Squat with Bands")
    assert fold("Dumbbell Flyes") == fold("dumbbell fly")
    assert fold("Bench Presses") == fold("bench press")


def test_merge_aliases_keeps_one_spelling_per_term_and_never_the_name():
    merged = merge_aliases(
        ["Pull-up"], ["pullups", "Chin Up", "PULL UP", "Pull Ups!"], name="Pull Up"
    )
    assert merged == ["Chin Up"]
    assert merge_aliases(["Chin-up"], ["chinups", "Chin up bar"], name="x") == [
        "Chin-up",
        "Chin up bar",
    ]


def test_qualifiers_tell_grip_side_angle_posture_and_load_apart():
    assert not same_variant("Pronated Barbell Row", "Supinated Barbell Row")
    assert not same_variant("Barbell Row", "Pronated Barbell Row")  # only one has a qualifier
    assert not same_variant("One-Arm Kettlebell Row", "Two-Arm Kettlebell Row")
    assert not same_variant("Dumbbell Flyes", "Incline Dumbbell Flyes")
    assert not same_variant("Squat", "Squat with Bands")
    assert not same_variant(
        "Seated Dumbbell Palms-Down Wrist Curl", "Seated Dumbbell Palms-Up Wrist Curl"
    )
    assert same_variant("Decline Smith Press", "Smith Machine Decline Press")
    assert qualifiers("Single-arm banded row") == {("side", "one"), ("load", "band")}


def test_qualifiers_read_the_common_phrasings_of_grip_support_and_lift():
    """Issue 22: "palms facing in" is a grip qualifier; a hammer grip is the same grip."""
    assert qualifiers("Dumbbell Bench With Palms Facing In") == {("grip", "neutral")}
    assert same_variant(
        "Hammer Grip Incline DB Bench Press", "Incline Dumbbell Bench With Palms Facing In"
    )
    assert same_variant("Decline Push-Up", "Push-Ups With Feet Elevated")
    assert not same_variant("Dumbbell Squat", "Dumbbell Squat To A Bench")
    assert not same_variant("One-Arm Kettlebell Clean and Jerk", "One-Arm Kettlebell Jerk")
    assert not same_variant("Jogging, Treadmill", "Running, Treadmill")
    assert not same_variant("Machine Bench Press", "Smith Machine Bench Press")
    # The default angle and grip are no qualifier: stating them names no other movement.
    assert same_variant("Flat Bench Leg Pull-In", "Leg Pull-In")
    assert same_variant("Incline Push-Up", "Incline Push-Up Medium")


def test_canonical_name_says_each_thing_one_way_and_the_implement_once():
    assert canonical_name("Hammer Grip Incline DB Bench Press", "dumbbell") == (
        "neutral incline bench press"
    )
    assert canonical_name("Incline Dumbbell Bench With Palms Facing In", "dumbbell") == (
        "incline bench with neutral"
    )
    assert canonical_name("Barbell Guillotine Bench Press", "barbell") == "neck bench press"
    assert canonical_name("Barbell Guillotine Bench Press") == "barbell neck bench press"
