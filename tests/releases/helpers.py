"""Steps of the release flow shared by the tests: the owner's intake and its approval, then an
operator's candidate."""

from __future__ import annotations

from gymctl.models import Role
from gymctl.releases import candidates
from tests.conftest import NOW
from tests.releases.conftest import COMMIT, SUBMISSION


def owner_call(client, gym, method, path, **kwargs):
    return client.open(
        f"/organizations/{gym.id}{path}", method=method, headers=gym[Role.owner].headers, **kwargs
    )


def approved_intake(client, gym, submission=None) -> int:
    """Save the intake and approve it; returns the revision."""
    saved = owner_call(
        client,
        gym,
        "PUT",
        "/releases/submission",
        json={"submission": submission or SUBMISSION, "revision": _revision(client, gym)},
    )
    assert saved.status_code == 200, saved.json
    revision = saved.json["revision"]
    approved = owner_call(
        client,
        gym,
        "POST",
        "/releases/approvals",
        json={"purpose": "submission_intake", "revision": revision},
    )
    assert approved.status_code == 201, approved.json
    return revision


def _revision(client, gym) -> int:
    from gymctl.releases.requests import find_request
    from webhooks.context import Services

    services: Services = client.application.extensions["gymctl"]
    with services.session_factory() as session:
        request = find_request(session, gym.id)
        return request.submission_revision if request else 0


def cut(session, store, settings, gym, *, commit=COMMIT, at=NOW):
    candidate = candidates.cut_candidate(
        session, store, settings, gym.id, source_commit=commit, now=at
    )
    session.commit()
    return candidate
