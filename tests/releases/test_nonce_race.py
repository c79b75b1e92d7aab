"""Spec A 5.5: a dispatch nonce is single use, also when the workflow (or a replay of it)
claims twice at the same instant: the operation row is locked, one claim wins."""

from __future__ import annotations

import threading

from gymctl.clock import FixedClock
from gymctl.db import get_engine, session_factory
from gymctl.providers.storage import storage_from_settings
from gymctl.releases import operations
from tests.conftest import NOW
from tests.releases.helpers import gym_with_a_candidate
from webhooks.app import create_app


def test_two_simultaneous_claims_with_one_nonce_get_one_executor_access(committed_pg, settings, ci):
    factory = session_factory(get_engine(committed_pg))
    store = storage_from_settings(settings)
    with factory() as session:
        gym = gym_with_a_candidate(session, store, settings)
        operation, nonce = operations.dispatch(
            session, settings, gym.id, kind="build", platform="ios", now=NOW
        )
        session.commit()
    app = create_app(settings, session_factory=factory, clock=FixedClock(NOW), store=store)
    body = {"operationId": str(operation.id), "dispatchNonce": nonce}
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def claim() -> None:
        token = ci.token(NOW)
        barrier.wait()
        response = app.test_client().post(
            "/ci/releases/claim", json=body, headers={"Authorization": f"Bearer {token}"}
        )
        statuses.append(response.status_code)

    threads = [threading.Thread(target=claim) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(statuses) == [200, 409]
