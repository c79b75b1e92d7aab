"""Two uploads into one slot at once, on PostgreSQL (spec A 4, rule 11: "a failed or repeated
upload leaves at most an unreferenced object, never a changed draft"). The owner's double tap or
the client's retry after its 60 s timeout: both reached the gym's first draft row of the slot
with no row read, both inserted it, and the second answered 500 on the table's key. Each upload
now points the slot under the gym's branding lock, as saves, publishes and restores do."""

from __future__ import annotations

import io
import threading

from sqlalchemy import select

from gymctl.assets import intake
from gymctl.clock import FixedClock
from gymctl.db import get_engine, session_factory
from gymctl.models import MemberAppDraftAsset, Role
from tests import factories
from tests.assets.test_routes import png
from tests.conftest import NOW, wait_for_a_lock_wait
from webhooks.app import create_app


def test_two_first_uploads_into_one_slot_at_once_both_store_and_the_last_is_drafted(
    committed_pg, settings, idp, monkeypatch
):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = factories.make_gym(session, roles=Role, idp=idp)
        session.commit()
    app = create_app(settings, session_factory=factory, clock=FixedClock(NOW))
    real = intake._point_draft
    pointed, go_on = threading.Event(), threading.Event()

    def point_then_hold(session, *args, **kwargs):
        real(session, *args, **kwargs)
        session.flush()
        if not pointed.is_set():  # the first upload holds its pointed slot, uncommitted
            pointed.set()
            assert go_on.wait(30)

    monkeypatch.setattr(intake, "_point_draft", point_then_hold)
    answers: dict[str, tuple[int, dict]] = {}

    def upload(name: str) -> None:
        response = app.test_client().post(
            f"/organizations/{gym.id}/branding/assets/logo",
            data={"file": (io.BytesIO(png()), "a.png")},
            headers=gym[Role.owner].headers,
            content_type="multipart/form-data",
        )
        answers[name] = (response.status_code, response.get_json())

    first = threading.Thread(target=upload, args=("first",))
    first.start()
    assert pointed.wait(30)
    second = threading.Thread(target=upload, args=("second",))
    second.start()
    wait_for_a_lock_wait(get_engine(committed_pg), rival=second)
    go_on.set()
    first.join(30)
    second.join(30)

    assert [answers[name][0] for name in ("first", "second")] == [201, 201], answers
    with factory() as session:
        rows = session.scalars(select(MemberAppDraftAsset)).all()
        assert [(row.slot, str(row.asset_id)) for row in rows] == [
            ("logo", answers["second"][1]["id"])
        ]
