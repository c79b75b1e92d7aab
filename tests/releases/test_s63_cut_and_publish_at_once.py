"""An operator's candidate cut and the owner's brand publish at once (PostgreSQL, committed).
Spec A 3: "Release candidate | current | new publish, config or intake revision | superseded |
new candidate replaces it"; candidates.replace_after_publish: "The replacement keeps the
superseded snapshot's source commit, app and configuration and binds the branding live now".
A hunt in s63 found the two superseding the same candidate in opposite lock orders (a deadlock:
a 500 for the owner, or a crashed `releases candidate create`), and a publish replacing the
operator's fresh cut with a rebuild of the older commit: the publish now takes the release
request's lock first, as the cut does."""

from __future__ import annotations

import threading
import time

from sqlalchemy import select

from gymctl.branding import publishing, workspace
from gymctl.db import get_engine, session_factory
from gymctl.models.releases import CandidateSupersession, ReleaseCandidate
from gymctl.providers.storage import storage_from_settings
from gymctl.releases import candidates
from tests.conftest import NOW
from tests.releases.helpers import _waiting_on_a_lock, gym_with_a_candidate

NEW_COMMIT = "b" * 40


def _gym(factory, store, settings):
    with factory() as session:
        gym = gym_with_a_candidate(session, store, settings)
        workspace.save_brand_draft(
            session,
            store,
            gym.id,
            palette={"primaryColor": "#A01C40"},
            actor_user_id=None,
            now=NOW,
        )
        session.commit()
        return gym.id


def test_a_cut_and_a_publish_at_once_both_go_through(committed_pg, settings, monkeypatch):
    """The operator cuts a new source commit (holding the release request's lock) while the
    owner publishes the brand: the publish waits for the cut, then supersedes the operator's
    candidate (its brand moved) with one that builds the operator's commit on the new brand."""
    factory = session_factory(get_engine(committed_pg))
    engine = get_engine(committed_pg)
    store = storage_from_settings(settings)
    gym_id = _gym(factory, store, settings)
    real_inputs = candidates.inputs_from
    cut_read, publish_waits = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def inputs_from(session, ahead, settings_, organization_id):
        inputs = real_inputs(session, ahead, settings_, organization_id)
        cut_read.set()
        publish_waits.wait(timeout=20)
        return inputs

    monkeypatch.setattr(candidates, "inputs_from", inputs_from)

    def cut() -> None:
        try:
            with factory() as operator:
                candidates.cut_candidate(
                    operator, store, settings, gym_id, source_commit=NEW_COMMIT, now=NOW
                )
                operator.commit()
        except BaseException as error:
            errors.append(error)

    def publish() -> None:
        try:
            with factory() as owner:
                publishing.publish_brand(owner, store, gym_id, actor_user_id=None, now=NOW)
                owner.commit()
        except BaseException as error:
            errors.append(error)

    cutter = threading.Thread(target=cut)
    cutter.start()
    assert cut_read.wait(timeout=20)
    publisher = threading.Thread(target=publish)
    publisher.start()
    deadline = time.monotonic() + 10
    while not _waiting_on_a_lock(engine) and time.monotonic() < deadline:
        time.sleep(0.02)
    publish_waits.set()
    cutter.join(timeout=60)
    publisher.join(timeout=60)
    assert [type(error).__name__ + ": " + str(error).splitlines()[0] for error in errors] == []

    with factory() as session:
        rows = session.scalars(
            select(ReleaseCandidate)
            .where(ReleaseCandidate.organization_id == gym_id)
            .order_by(ReleaseCandidate.generation)
        ).all()
        superseded = set(session.scalars(select(CandidateSupersession.candidate_id)))
        history = [(row.generation, row.snapshot["sourceCommit"][:4]) for row in rows]
        current = [row for row in rows if row.id not in superseded]
        assert len(current) == 1, history
        # The replacement builds the operator's new commit on the brand just published.
        assert current[0].snapshot["sourceCommit"] == NEW_COMMIT, history
        assert current[0].snapshot["branding"]["brand"]["palette"]["primaryColor"] == "#A01C40"
