"""Outcomes are enums and the summaries count them by name (issue 25): renaming an outcome or a
counter fails where it is counted instead of silently no longer counting it."""

from __future__ import annotations

import pytest

from gymctl.billing.attempts import AppliedOutcome, BeganOutcome
from gymctl.billing.collector import Summary
from gymctl.bridge.dispatcher import RunSummary
from gymctl.models.bridge import OpStatus

# The counters of a collector pass (spec B 6) and the outcome each counts.
COUNTED = {"charged", "declined", "pending", "busy", "blocked", "skipped"}


def _changed(before: dict, after: dict) -> dict:
    return {key: after[key] for key in after if after[key] != before[key]}


@pytest.mark.parametrize("outcome", [*BeganOutcome, *AppliedOutcome])
def test_each_outcome_moves_its_own_counter_and_only_that(outcome):
    summary = Summary()
    before = summary.as_dict()
    summary.count(outcome)
    expected = {outcome.value: 1} if outcome.value in COUNTED else {}
    assert _changed(before, summary.as_dict()) == expected


def test_every_counted_outcome_is_an_outcome_and_a_counter():
    outcomes = {member.value for member in [*BeganOutcome, *AppliedOutcome]}
    assert outcomes >= COUNTED
    assert set(Summary().as_dict()) >= COUNTED


@pytest.mark.parametrize(
    ("status", "counter"),
    [
        (OpStatus.succeeded, "succeeded"),
        (OpStatus.failed, "failed"),
        (OpStatus.parked, "parked"),
        (OpStatus.pending, "released"),
    ],
)
def test_a_written_back_op_counts_under_its_status(status, counter):
    summary = RunSummary("org", "corr", "runner")
    before = summary.as_dict()
    summary.count(status)
    assert _changed(before, summary.as_dict()) == {counter: 1}


@pytest.mark.parametrize("status", [OpStatus.in_flight, OpStatus.superseded, OpStatus.dismissed])
def test_an_op_written_back_in_another_status_is_an_error(status):
    summary = RunSummary("org", "corr", "runner")
    before = summary.as_dict()
    with pytest.raises(KeyError):
        summary.count(status)
    assert summary.as_dict() == before
