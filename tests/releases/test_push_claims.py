"""A member push is claimed (committed), sent with no transaction open, then its outcome
recorded (decision s42: no write lock is held while the push service answers). The claim is
leased: a run stopped between its claim and its outcome neither loses the push nor lets the
next runs push it again before LEASE has passed; after it the push goes again (at least once)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import Role
from gymctl.models.releases import PushNotice
from gymctl.providers.push import LocalPushProvider, PushMessage
from gymctl.releases.push_notices import CLAIMED, LEASE, push_notices
from tests.releases import test_push_notices as notices
from tests.releases.test_push_notices import SOON, _cancel, _pushed

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

waitlist = notices.waitlist  # a fixture: a class of one seat, its member waiting

NOTHING = {"pushed": 0, "unreached": 0, "failed": 0, "skipped": 0}


class Killed(LocalPushProvider):
    """The process is killed at the push: before it is sent, or just after (`after`)."""

    def __init__(self, folder, *, after: bool) -> None:
        super().__init__(folder)
        self.after = after

    def send(self, message: PushMessage):
        if self.after:
            super().send(message)
        raise SystemExit("killed")


def _records(session) -> list[int]:
    session.expire_all()
    return list(session.scalars(select(PushNotice.sent)))


@pytest.mark.parametrize("after", [False, True], ids=["before the push", "after the push"])
def test_a_run_killed_at_the_push_leaves_a_claim_taken_again_after_its_lease(
    client, session, session_factory, settings, gym, waitlist, after
):
    """Killed before the push, the push is late, never lost; killed after it, the member gets
    it twice (pushes are at least once). Either way no run pushes it while the claim is
    leased: a second daemon, or the next minute's run, does not push it beside the first."""
    _cancel(client, gym, waitlist[Role.admin], Role.admin)
    folder = settings.home / "push"
    with pytest.raises(SystemExit):
        push_notices(session_factory, Killed(folder, after=after), now=SOON)
    assert _records(session) == [CLAIMED]
    assert len(_pushed(settings)) == int(after)

    provider = LocalPushProvider(folder)
    assert push_notices(session_factory, provider, now=SOON + timedelta(minutes=1)) == NOTHING
    assert push_notices(session_factory, provider, now=SOON + LEASE - timedelta(seconds=1)) == (
        NOTHING
    )
    assert len(_pushed(settings)) == int(after)

    taken_again = push_notices(session_factory, provider, now=SOON + LEASE)
    assert taken_again == {**NOTHING, "pushed": 1}
    assert _records(session) == [1]
    assert len(_pushed(settings)) == int(after) + 1
    assert push_notices(session_factory, provider, now=SOON + LEASE * 2) == NOTHING


def test_a_provider_error_gives_the_claim_back_for_the_next_run(
    client, session, session_factory, settings, gym, waitlist
):
    """The retry of s40 kept: a provider error leaves no claim, so the next run (a minute
    later, not a lease later) pushes it."""

    class Down(LocalPushProvider):
        def send(self, message: PushMessage):
            raise ConnectionError("the push service is down")

    _cancel(client, gym, waitlist[Role.admin], Role.admin)
    assert push_notices(session_factory, Down(settings.home / "down"), now=SOON) == {
        **NOTHING,
        "failed": 1,
    }
    assert _records(session) == []
    retried = push_notices(
        session_factory, LocalPushProvider(settings.home / "push"), now=SOON + timedelta(minutes=1)
    )
    assert retried == {**NOTHING, "pushed": 1}
    assert _records(session) == [1]


def test_a_run_whose_claim_was_taken_over_records_nothing(
    client, session, session_factory, settings, gym, waitlist
):
    """A run slower than the lease: another run took its claim and pushed; the slow run's
    outcome is not written over the other's record (the claim is the record's id)."""
    _cancel(client, gym, waitlist[Role.admin], Role.admin)
    folder = settings.home / "push"

    class Slow(LocalPushProvider):
        def send(self, message: PushMessage):
            outcome = super().send(message)
            if not hasattr(self, "overtaken"):
                self.overtaken = push_notices(
                    session_factory, LocalPushProvider(folder), now=SOON + LEASE
                )
            return outcome

    slow = Slow(folder)
    assert push_notices(session_factory, slow, now=SOON) == {**NOTHING, "pushed": 1}
    assert slow.overtaken == {**NOTHING, "pushed": 1}
    [record] = session.scalars(select(PushNotice)).all()
    session.refresh(record)
    assert (record.sent, record.created_at) == (1, SOON + LEASE)  # the other run's claim
    assert len(_pushed(settings)) == 2
