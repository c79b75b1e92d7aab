"""`gymctl billing charges move --to ""`: an empty value is a mistake (a script's unset
variable, `--to "$NEW_DATE"`), not a way of asking for the default. It was read as --to left out
and moved the renewal's charge to the gym's next lifecycle day, audited. It is refused now,
timestamp_not_utc as any --to that is no ISO time, and nothing is moved; leaving --to out still
moves to the next lifecycle day (the documented default)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from gymctl.errors import DomainError
from gymctl.models import AuditLog, BillingSettings, Subscription
from tests.billing_ops.test_cli_settings import _run, world  # noqa: F401 (a fixture)


def _move(gym, renewal, expected: str, *to: str):
    return _run(
        "charges", "move", str(gym.organization.id), str(renewal.id), "--expected", expected,
        *to, "--operator", str(gym.owner.id), "--json",
    )  # fmt: skip


def _moves(session) -> int:
    query = select(func.count()).where(AuditLog.action.like("%charge_date%"))
    return session.scalar(query.select_from(AuditLog))


@pytest.fixture
def lifecycle_day(world):  # noqa: F811
    """The gym charges on the 5th: a move without --to goes there."""
    factory, gym, renewal = world
    with factory() as session:
        session.add(BillingSettings(organization_id=gym.organization.id, billing_lifecycle_day=5))
        session.commit()
    return factory, gym, renewal


@pytest.mark.parametrize("empty", ["", " "], ids=["empty", "blank"])
def test_an_empty_to_is_refused_and_moves_nothing(lifecycle_day, empty):
    factory, gym, renewal = lifecycle_day
    expected = renewal.next_charge_date.isoformat()
    with factory() as session:
        audited = _moves(session)

    refused = _move(gym, renewal, expected, "--to", empty)

    assert refused.exit_code != 0, refused.output  # it was 0: moved to the 5th
    assert isinstance(refused.exception, DomainError), refused.output
    assert refused.exception.code == "timestamp_not_utc"
    assert "--to" in refused.exception.message
    with factory() as session:
        row = session.get(Subscription, renewal.id)
        assert row.next_charge_date == renewal.next_charge_date
        assert _moves(session) == audited


def test_to_left_out_still_moves_to_the_next_lifecycle_day(lifecycle_day):
    factory, gym, renewal = lifecycle_day

    moved = _move(gym, renewal, renewal.next_charge_date.isoformat())

    assert moved.exit_code == 0, moved.output
    answer = json.loads(moved.stdout)
    with factory() as session:
        row = session.get(Subscription, renewal.id)
        assert row.next_charge_date.isoformat() == answer["nextChargeDate"]
        assert row.next_charge_date != renewal.next_charge_date
