"""Spec A 2.1 / 6.1: "A user can hold a valid provider session and have no row yet (webhook late
or failed). Then ... GET /users/me performs find-or-create"; user.created "find or create the
users row and link it". The first /users/me of a new login and its user.created arrive together
(the app calls /users/me the moment the sign-up finishes). find_or_create guards its own INSERT
against the other door's row (the loser reads the winner's), but not the UPDATE that links a
gym-created profile under the proven address: when /users/me's row for the login commits first,
the webhook's link hits uq_users_identity_id and the public route answers 500."""

from __future__ import annotations

import json
import threading

from sqlalchemy import func, select

from gymctl.db import get_engine, session_factory
from gymctl.identity.webhook_signature import sign
from gymctl.models import User
from tests import factories
from tests.api.test_identity_webhook import provider_user
from tests.conftest import NOW, WEBHOOK_SECRET, wait_for_a_lock_wait
from webhooks.app import create_app

ADDRESS = "walk.in@example.test"
LOGIN = "user_walkin"


def test_user_created_racing_the_first_users_me_is_not_a_500(committed_pg, settings, clock):
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as setup:  # the gym registered the person at the desk: no login yet
        factories.user(setup, identity_id=None, email=ADDRESS, signup_origin="desk")
        setup.commit()
    app = create_app(settings, session_factory=factory, clock=clock)
    body = json.dumps({"type": "user.created", "data": provider_user(LOGIN, ADDRESS)}).encode()
    stamp = int(NOW.timestamp())
    headers = {
        "svix-id": "msg_walkin",
        "svix-timestamp": str(stamp),
        "svix-signature": sign(WEBHOOK_SECRET, "msg_walkin", stamp, body),
    }

    # GET /users/me's find-or-create (identity.users.first_request -> find_or_create): the
    # login's own row, written and about to commit.
    first_request = factory()
    factories.user(first_request, identity_id=LOGIN, email=ADDRESS)

    answers: list[int] = []

    def webhook() -> None:
        answers.append(
            app.test_client()
            .post("/webhooks/identity", data=body, headers=headers, content_type="application/json")
            .status_code
        )

    rival = threading.Thread(target=webhook)
    rival.start()
    wait_for_a_lock_wait(engine, rival=rival)
    first_request.commit()
    first_request.close()
    rival.join(timeout=30)

    assert answers, "the webhook never answered"
    assert answers[0] < 500, answers
    with factory() as check:
        assert (
            check.scalar(select(func.count()).select_from(User).where(User.identity_id == LOGIN))
            == 1
        )
