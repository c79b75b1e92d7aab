"""A repeat erasure later that finds nothing left writes nothing (s62): the ended
membership kept its row but took the repeat's instant as its updated_at (s59 noticed it), so
a change feed or an export read by updated_at saw an ended member change again."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models import Role
from tests.access.conftest import snapshot
from tests.access.test_erasure import desk_member, erase  # noqa: F401 (a fixture)
from tests.conftest import NOW


@pytest.mark.embedded  # the demo gym reaches erasure: both engines
@pytest.mark.parametrize("who", ["desk profile", "member with a login"])
def test_a_repeat_later_rewrites_no_updated_at(
    engine,
    client,
    clock,
    session,
    gym,
    desk_member,  # noqa: F811
    who,
):
    person = desk_member if who == "desk profile" else gym[Role.member].user
    assert erase(client, gym, person.id).status_code == 200
    before = snapshot(session)
    clock.set(NOW + timedelta(seconds=30))  # the owner's token still good

    again = erase(client, gym, person.id)

    assert again.status_code == 200, again.json
    assert snapshot(session) == before
