"""A gym's thumbnail objects in the public images store (spec B 4.5 PUT .../thumbnail), through
the route, with real commits on both engines and a real S3 endpoint on loopback (moto's server,
tests/providers/test_storage.py):

- an upload whose movement is deleted while its image is stored removes the object it put (no
  row ever named it); before, it stayed in the bucket for ever;
- a replaced thumbnail is deleted after the commit that stops naming it; a replacement that
  fails keeps the old object (its row still names it). Before, every replaced one stayed.

No store call is made while the embedded default's write lock is held (the detector)."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace

import boto3
import pytest

from gymctl.clock import FixedClock
from gymctl.db import get_engine, session_factory
from gymctl.models import Movement, Role
from gymctl.movements import thumbnails
from gymctl.providers.storage import S3ObjectStore
from tests import factories
from tests.conftest import NOW
from tests.embedded_outside_calls import watching
from tests.movements.fakes import png_bytes
from tests.providers.test_storage import BUCKET, s3_endpoint  # noqa: F401 (fixture)
from webhooks.app import create_app

BASE = "https://images.example.test/"


class Store:
    """The S3 store, with a hook run after each put (a rival request, say)."""

    def __init__(self, inner: S3ObjectStore) -> None:
        self.inner = inner
        self.after_put = None

    def put(self, key, data, *, content_type):
        self.inner.put(key, data, content_type=content_type)
        if self.after_put is not None:
            self.after_put()

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def world(committed_database, idp, library_settings, s3_endpoint):  # noqa: F811 (fixture)
    factory = session_factory(get_engine(committed_database))
    with factory() as session:
        gym = factories.make_gym(session, roles=Role, idp=idp)
        row = Movement(organization_id=gym.id, slug="house-special", name="House Special")
        session.add(row)
        session.commit()
        movement_id = row.id
    store = Store(S3ObjectStore(BUCKET, endpoint_url=s3_endpoint, region="us-east-1"))
    app = create_app(library_settings, session_factory=factory, clock=FixedClock(NOW), store=store)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    return SimpleNamespace(
        factory=factory,
        gym=gym,
        movement_id=movement_id,
        store=store,
        client=app.test_client(),
        path=f"/organizations/{gym.id}/exercises/{movement_id}",
        sqlite=get_engine(committed_database).dialect.name == "sqlite",
        objects=lambda: sorted(
            item["Key"]
            for item in s3.list_objects_v2(
                Bucket=BUCKET, Prefix=f"movements/thumbnails/{gym.id}/"
            ).get("Contents", [])
        ),
    )


def upload(world, colour=(30, 90, 200)):
    return world.client.put(
        f"{world.path}/thumbnail",
        data={"file": (io.BytesIO(png_bytes((300, 200), colour)), "t.png")},
        headers=world.gym[Role.coach].headers,
        content_type="multipart/form-data",
    )


def named(world) -> str | None:
    with world.factory() as session:
        return session.get(Movement, world.movement_id).thumbnail_url


def test_an_upload_whose_movement_is_deleted_meanwhile_leaves_no_object(world):
    if not world.sqlite:
        pytest.skip("PostgreSQL keeps the row locked: the delete waits for the upload")
    answers = []

    def delete_meanwhile():  # another request, on its own thread, while the image is stored
        rival = threading.Thread(
            target=lambda: answers.append(
                world.client.delete(world.path, headers=world.gym[Role.owner].headers)
            )
        )
        rival.start()
        rival.join(30)

    world.store.after_put = delete_meanwhile
    with watching() as seen:
        refused = upload(world)
    assert [answer.status_code for answer in answers] == [200], answers[0].json
    assert (refused.status_code, refused.json["code"]) == (404, "movement_not_found")
    assert world.objects() == []  # before: the upload's object, named by no row, for ever
    assert named(world) is None
    assert seen.calls == [], seen.report()
    assert "boto" in seen.doors()


def test_a_replaced_thumbnail_is_deleted_after_the_commit_that_stops_naming_it(world):
    first = upload(world)
    assert first.status_code == 200, first.json
    old = first.json["thumbnailUrl"].removeprefix(BASE)
    assert world.objects() == [old]

    with watching() as seen:
        second = upload(world, colour=(200, 40, 40))
    assert second.status_code == 200, second.json
    new = second.json["thumbnailUrl"].removeprefix(BASE)
    assert new != old
    assert named(world) == BASE + new
    assert world.objects() == [new]  # before: [new, old], the old one never deleted
    assert seen.calls == [], seen.report()  # the delete ran after the commit, outside the lock


def test_a_failed_replacement_keeps_the_object_its_row_still_names(world, monkeypatch):
    first = upload(world)
    old = first.json["thumbnailUrl"].removeprefix(BASE)

    def fail(*_args, **_kwargs):
        raise RuntimeError("the write phase fails after the put")

    monkeypatch.setattr(thumbnails, "emit", fail)
    world.client.application.testing = False  # the fault is answered 500, as in production
    failed = upload(world, colour=(200, 40, 40))
    assert failed.status_code == 500
    assert named(world) == BASE + old
    assert old in world.objects()  # rolled back: the row still names it, so it stays
    monkeypatch.undo()

    third = upload(world, colour=(10, 200, 40))  # the next commit deletes only what it replaced
    assert third.status_code == 200, third.json
    new = third.json["thumbnailUrl"].removeprefix(BASE)
    assert old not in world.objects()
    assert new in world.objects()


def test_a_thumbnail_from_elsewhere_is_never_deleted(world):
    """Only this gym's own upload keys for the movement are deleted: a URL the row got another
    way (a canonical key, another host) names an object that is not the upload's to remove."""
    canonical = thumbnails.thumbnail_key("house-special")
    world.store.inner.put(canonical, png_bytes(), content_type="image/png")
    with world.factory() as session:
        session.get(Movement, world.movement_id).thumbnail_url = BASE + canonical
        session.commit()
    assert upload(world).status_code == 200
    assert world.store.inner.head(canonical) is not None
    world.store.inner.delete(canonical)


def test_a_savepoint_released_is_not_the_commit_that_stops_naming_the_object():
    """SQLAlchemy tells `after_commit` of a savepoint's release too: the object went while the
    transaction that stops naming it could still roll back (and did). Only the commit of the
    session's own transaction deletes it; a rollback keeps it."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    deleted: list[str] = []
    store = SimpleNamespace(delete=deleted.append)
    with Session(create_engine("sqlite://")) as session:
        session.execute(text("SELECT 1"))
        thumbnails.delete_after_commit(session, store, "movements/thumbnails/o/a-0123456789ab.png")
        with session.begin_nested():
            session.execute(text("SELECT 1"))
        assert deleted == []
        session.rollback()
        assert deleted == []
        session.execute(text("SELECT 1"))
        thumbnails.delete_after_commit(session, store, "movements/thumbnails/o/b-0123456789ab.png")
        with session.begin_nested():
            session.execute(text("SELECT 1"))
        session.commit()
    assert deleted == ["movements/thumbnails/o/b-0123456789ab.png"]
