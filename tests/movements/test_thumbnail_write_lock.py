"""A gym's thumbnail upload (spec B 4.5 PUT .../thumbnail) decodes and stores its image with no
write lock held: on the embedded default the transaction that checked the movement held the
database's one write lock through the decoding (up to 40 megapixels) and the object store's
put, and every writer of every process waited on it."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.db import get_engine, session_factory
from gymctl.errors import DomainError
from gymctl.models import AuditLog, Movement
from gymctl.movements.own import delete_own
from gymctl.movements.thumbnails import upload_thumbnail
from tests import factories
from tests.conftest import NOW
from tests.movements.fakes import png_bytes
from tests.movements.test_job_write_lock import Watched, could_write


@pytest.fixture
def own(committed_database):
    factory = session_factory(get_engine(committed_database))
    with factory() as session:
        org = factories.organization(session)
        row = Movement(organization_id=org.id, slug="house-special", name="House Special")
        session.add(row)
        session.commit()
        return factory, org.id, row.id


def upload(session, store, settings, org_id, movement_id):
    return upload_thumbnail(
        session,
        store,
        settings,
        organization_id=org_id,
        movement_id=movement_id,
        data=png_bytes((300, 200)),
        now=NOW,
        actor_user_id=None,
    )


def test_an_uploaded_thumbnail_is_stored_with_no_write_lock_held(
    committed_database, own, store, library_settings
):
    factory, org_id, movement_id = own
    calls: list = []
    watched = Watched(store, could_write(committed_database), calls)

    with factory() as session:
        movement = upload(session, watched, library_settings, org_id, movement_id)
        url = movement.thumbnail_url
        session.commit()

    assert [name for name, _ in calls] == ["put"]
    if get_engine(committed_database).dialect.name == "sqlite":
        assert calls == [("put", True)]  # PostgreSQL: only the movement's row stays locked
    assert store.get(url.removeprefix("https://images.example.test/")).startswith(b"\x89PNG")
    with factory() as session:
        assert session.get(Movement, movement_id).thumbnail_url == url
        assert session.scalar(
            select(AuditLog).where(AuditLog.action == "movements.thumbnail_uploaded")
        )


def test_a_movement_deleted_while_its_image_is_stored_is_404(
    committed_database, own, store, library_settings
):
    factory, org_id, movement_id = own

    class DeletedMeanwhile:
        def put(self, *args, **kwargs):
            with factory() as other:
                delete_own(
                    other,
                    organization_id=org_id,
                    movement_id=movement_id,
                    now=NOW,
                    actor_user_id=None,
                )
                other.commit()
            return store.put(*args, **kwargs)

        def delete(self, key):  # the upload removes the object no row will name
            return store.delete(key)

    if get_engine(committed_database).dialect.name != "sqlite":
        pytest.skip("PostgreSQL keeps the row locked: the delete waits for the upload")
    with factory() as session, pytest.raises(DomainError) as refused:
        upload(session, DeletedMeanwhile(), library_settings, org_id, movement_id)
    assert (refused.value.status, refused.value.code) == (404, "movement_not_found")
    with factory() as session:
        assert session.get(Movement, movement_id).thumbnail_url is None
    left = [path for path in (store.root / "movements").rglob("*") if path.is_file()]
    assert left == []  # the object put is removed: no row ever named it
