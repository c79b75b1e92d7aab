"""The `rate_windows_prune` daemon job deletes every rate-limit window that started over an
hour ago ("Rate-limit windows older than an hour are never read again (the longest is 10
minutes)"), but the invitation emails are counted in a day window too (invitations.EMAIL_WINDOWS:
RESENDS_PER_DAY, decisions s48 "Resending an invitation is limited per invitation"). The day's
row starts at midnight UTC, so the hourly prune deletes it within the day and the day's budget
comes back: with the daemons running, staff mail one address far past the day's limit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from daemons.jobs import rate_windows_prune
from gymctl.access.invitations import RESENDS_PER_DAY, RESENDS_PER_HOUR
from gymctl.models import Role
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_the_hourly_prune_does_not_give_back_the_days_resend_budget(
    engine, app, client, session, gym, idp
):
    clock = app.extensions["gymctl"].clock
    created = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "target@x.test", "role": "member"},
        headers=gym[Role.owner].headers,
    )
    assert created.status_code == 201, created.json
    invitation_id = created.json["id"]

    answers = []
    for hour in range(RESENDS_PER_DAY // RESENDS_PER_HOUR + 3):  # all within one UTC day
        instant = NOW + timedelta(hours=hour)
        clock.set(instant)
        headers = {"Authorization": f"Bearer {idp.token('user_owner', now=instant)}"}
        for _ in range(RESENDS_PER_HOUR):
            answers.append(
                client.post(
                    f"/organizations/{gym.id}/invitations/{invitation_id}/resend",
                    headers=headers,
                ).status_code
            )
        rate_windows_prune(session, instant + timedelta(minutes=59), None)  # the hourly job
        session.commit()

    assert answers.count(200) <= RESENDS_PER_DAY, (
        f"{answers.count(200)} resends in one day, the limit is {RESENDS_PER_DAY}"
    )
