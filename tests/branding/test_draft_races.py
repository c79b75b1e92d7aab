"""Two saves of one gym's drafts at once on PostgreSQL (decisions s43): each save takes the
gym's branding lock (`branding.lock.lock_branding`), as publish and restore do. Without it the
second save read before the first committed: it computed the same website revision, or
inserted the first brand or app draft row again, and failed on the key once the first
committed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gymctl import db
from gymctl.branding import workspace
from tests import factories
from tests.branding.conftest import CONTENT
from tests.conftest import NOW


def _second_save_while_the_first_is_open(
    committed_pg: str, save: Callable[[Any, Any], Any]
) -> dict[str, Any]:
    """`save(session, organization_id)` once in a transaction left open, then again from
    another thread; the first commits while the second waits. What the second answered."""
    factory = db.session_factory(db.get_engine(committed_pg))
    with factory() as session:
        organization_id = factories.organization(session).id
        session.commit()
    answered: dict[str, Any] = {}

    def second() -> None:
        with factory() as session:
            try:
                answered["saved"] = save(session, organization_id)
                session.commit()
            except Exception as error:  # the test reads what failed
                answered["error"] = error

    with factory() as first:
        save(first, organization_id)
        thread = threading.Thread(target=second)
        thread.start()
        thread.join(0.5)  # it waits: for the lock, or (before) for the first's uncommitted key
        assert thread.is_alive()
        first.commit()
    thread.join(10)
    return answered


def test_a_website_draft_saved_during_another_takes_the_next_revision(committed_pg):
    answered = _second_save_while_the_first_is_open(
        committed_pg,
        lambda session, org_id: (
            workspace.save_website_draft(
                session, org_id, content=CONTENT, actor_user_id=None, now=NOW
            ).draft_revision
        ),
    )
    assert answered == {"saved": 2}


def test_a_first_brand_draft_saved_twice_at_once_is_one_draft_saved_twice(committed_pg):
    answered = _second_save_while_the_first_is_open(
        committed_pg,
        lambda session, org_id: (
            workspace.save_brand_draft(
                session,
                None,
                org_id,
                palette={"primaryColor": "#1C40A0"},
                name="Iron Temple",
                logos={},
                actor_user_id=None,
                now=NOW,
            ).name
        ),
    )
    assert answered == {"saved": "Iron Temple"}


def test_a_first_app_draft_saved_twice_at_once_is_one_draft_saved_twice(committed_pg):
    answered = _second_save_while_the_first_is_open(
        committed_pg,
        lambda session, org_id: (
            workspace.save_app_draft(session, org_id, display_name="Iron", now=NOW).display_name
        ),
    )
    assert answered == {"saved": "Iron"}
