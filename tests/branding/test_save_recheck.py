"""Rule 10 re-checks the stored logos a brand draft keeps, with no write lock held while the
object store answers (decision s42). The draft is read, the check runs with the transaction that
only read ended, then the draft is read again: a save in between is the one whose logos are
kept, its new logos checked too. Committed for real on both engines."""

from __future__ import annotations

import pytest

from gymctl.assets.intake import StoredAssetRefused
from gymctl.branding import workspace
from gymctl.db import session_scope
from gymctl.models import BrandDraft
from tests.branding.test_publish_recheck import Racing, _save_logo, setup  # noqa: F401
from tests.conftest import NOW


def _keep_logos(factory, store, gym_id):
    with session_scope(factory) as session:  # as its doors run it: commit at the end
        workspace.save_brand_draft(
            session,
            store,
            gym_id,
            palette={"primaryColor": "#A01C40"},
            actor_user_id=None,
            now=NOW,
        )


def test_logos_kept_are_the_draft_as_read_after_the_check(setup):  # noqa: F811
    factory, store, gym_id, (first, second, _) = setup
    racing = Racing(store, _save_logo(factory, gym_id, second))

    _keep_logos(factory, racing, gym_id)

    assert racing.heads == [first, second]  # the logo saved meanwhile checked in a round
    with factory() as session:
        draft = session.get(BrandDraft, gym_id)
        assert (draft.logos, draft.palette["primaryColor"]) == ({"logo": second}, "#A01C40")


def test_a_logo_saved_meanwhile_that_fails_the_check_refuses_the_save(setup):  # noqa: F811
    factory, store, gym_id, (_, _, jpeg) = setup
    with pytest.raises(StoredAssetRefused) as refused:
        _keep_logos(factory, Racing(store, _save_logo(factory, gym_id, jpeg)), gym_id)
    assert refused.value.code == "brand_asset_stored_invalid"
    with factory() as session:
        assert session.get(BrandDraft, gym_id).logos == {"logo": jpeg}  # the other save kept
