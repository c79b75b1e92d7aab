"""Rule 10 re-checks the stored logos on publish, with no write lock held while the object store
answers (decision s42: on the embedded default that lock holds every writer of every process).
The draft is read, the check runs with no transaction open, then the channel's lock is taken and
the draft read again: a draft saved while the store answered is what goes live, its new logos
checked too, and refused if one fails the check. Committed for real on both engines (the
harness's one shared connection would hide the lock)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.branding import publishing
from gymctl.db import get_engine, session_factory
from gymctl.models import BrandDraft, BrandRevision, MemberAppDraftAsset, MemberAppVersion
from gymctl.providers.storage import FolderObjectStore
from tests.branding.conftest import app_slot, brand_asset, drafts
from tests.conftest import NOW
from tests.factories import make_gym


class Racing:
    """The object store, where someone saves the draft while the first HEAD is answered."""

    def __init__(self, inner, during) -> None:
        self.inner, self.during, self.heads = inner, during, []

    def head(self, key):
        self.heads.append(key)
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return self.inner.head(key)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def setup(committed_database, tmp_path):
    """A gym's drafts (its brand logo stored), a second stored logo, and an unusable one."""
    factory = session_factory(get_engine(committed_database))
    store = FolderObjectStore(tmp_path / "store", url_base="http://x", secret=b"s")
    with factory() as session:
        gym_id = make_gym(session).id
        first = brand_asset(session, store, gym_id)
        second = brand_asset(session, store, gym_id)
        jpeg = brand_asset(session, store, gym_id, content_type="image/jpeg")
        keys = (first.key, second.key, jpeg.key)
        drafts(session, store, gym_id, logos={"logo": str(first.id)})
    return factory, store, gym_id, keys


def _save_logo(factory, gym_id, key):
    def save():
        with factory() as session, session.begin():
            session.get(BrandDraft, gym_id).logos = {"logo": key}

    return save


def _publish(factory, store, gym_id, *channels):
    return publishing.publish_channels(
        factory, store, gym_id, channels, actor_user_id=None, now=NOW
    )


def test_a_logo_saved_while_the_store_answered_is_checked_and_published(setup):
    factory, store, gym_id, (first, second, _) = setup
    racing = Racing(store, _save_logo(factory, gym_id, second))

    [result] = _publish(factory, racing, gym_id, "brand")

    assert (result.result, result.revision) == ("verified", 1)
    assert racing.heads == [first, second]  # the saved logo checked in a second round
    with factory() as session:
        assert session.get(BrandRevision, (gym_id, 1)).logos == {"logo": second}


def test_a_logo_saved_while_the_store_answered_that_fails_the_check_is_refused(setup):
    factory, store, gym_id, (_, _, jpeg) = setup

    [result] = _publish(factory, Racing(store, _save_logo(factory, gym_id, jpeg)), gym_id, "brand")

    assert (result.result, result.error.code) == ("failed", "brand_asset_stored_invalid")
    with factory() as session:
        assert session.scalars(select(BrandRevision)).all() == []
        assert session.get(BrandDraft, gym_id).logos == {"logo": jpeg}  # the draft kept


def test_an_app_slot_pointed_elsewhere_while_the_store_answered_is_what_goes_live(setup):
    factory, store, gym_id, _ = setup
    assert _publish(factory, store, gym_id, "brand")[0].result == "verified"
    with factory() as session:
        other = app_slot(session, store, gym_id, slot="logo")  # a second slot, stored
        session.commit()
        other_id, other_key = other.id, other.key

    def repoint():
        with factory() as session, session.begin():
            session.get(MemberAppDraftAsset, (gym_id, "icon")).asset_id = other_id

    racing = Racing(store, repoint)
    [result] = _publish(factory, racing, gym_id, "app")

    assert result.result == "verified"
    assert racing.heads[-1] == other_key  # checked in a second round
    with factory() as session:
        version = session.get(MemberAppVersion, (gym_id, 1))
        assert version.assets["icon"]["key"] == other_key


def test_no_draft_is_refused_before_the_store_is_asked(committed_database, tmp_path):
    factory = session_factory(get_engine(committed_database))
    with factory() as session:
        gym_id = make_gym(session).id
        session.commit()
    racing = Racing(FolderObjectStore(tmp_path, url_base="http://x", secret=b"s"), None)
    [result] = _publish(factory, racing, gym_id, "brand")
    assert (result.result, result.error.code, racing.heads) == (
        "failed",
        "brand_draft_missing",
        [],
    )
