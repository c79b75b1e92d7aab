"""Two first changes of an organization's billing settings at once (no settings row yet): the
second waits for the first and applies on top of it, never a unique violation (a 500)."""

from __future__ import annotations

import threading

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.billing import org_settings
from gymctl.db import get_engine
from gymctl.models import BillingSettings
from tests.billing import factories as bf
from tests.conftest import NOW


def test_two_first_settings_changes_at_once_both_apply(committed_pg):
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        session.commit()
        organization_id = gym.organization.id
    first = factory()
    org_settings.update_settings(
        first, organization_id, grace_days=10, actor_user_id=None, now=NOW
    )  # flushed, not committed: the second change finds no row either
    outcome: dict[str, object] = {}

    def second() -> None:
        with factory() as session:
            try:
                outcome["answer"] = org_settings.update_settings(
                    session, organization_id, timezone="Asia/Jerusalem", actor_user_id=None, now=NOW
                )
                session.commit()
            except Exception as error:  # reported by the assertion below
                outcome["error"] = error

    rival = threading.Thread(target=second)
    rival.start()
    rival.join(timeout=1)  # it waits on the first change's transaction
    first.commit()
    first.close()
    rival.join(timeout=30)
    assert "error" not in outcome, outcome
    with factory() as session:
        row = session.scalar(
            select(BillingSettings).where(BillingSettings.organization_id == organization_id)
        )
        assert (row.billing_grace_days, row.timezone) == (10, "Asia/Jerusalem")
