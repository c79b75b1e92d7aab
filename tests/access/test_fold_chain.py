"""A row a link retired names the row its person goes on as (users.folded_into_id), one step
away even after that row is retired in turn: erasure reads the rows folded into the person
in one step (erasure._retired_rows)."""

from __future__ import annotations

import pytest

from gymctl.access.folding import fold_person
from gymctl.models import User
from tests import factories
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_a_row_retired_into_a_row_retired_later_names_the_last_one(session):
    first, second, last = (factories.user(session) for _ in range(3))
    session.flush()

    fold_person(session, first, second, now=NOW)
    fold_person(session, second, last, now=NOW)
    session.flush()
    session.expire_all()

    assert [session.get(User, row.id).folded_into_id for row in (first, second, last)] == [
        last.id,
        last.id,
        None,
    ]
