"""One application ID maps one gym (spec A 2.12: "A dedicated native app has an immutable
application-ID mapping"; the public lookup answers one gym for an ID). The database's unique keys
are per column, so an Apple ID equal to another gym's Android package is refused only by
create_app's read (branded_app_id_taken). A hunt in s63 found two mappings made at once both
committing, that read seeing neither: mappings are now made one at a time (PostgreSQL,
committed: the second waits for the first)."""

from __future__ import annotations

from sqlalchemy import or_, select

from gymctl.db import get_engine, session_factory
from gymctl.errors import DomainError
from gymctl.models import Organization
from gymctl.models.organizations import Tier
from gymctl.models.releases import BrandedApp
from gymctl.releases import branded_apps
from tests import factories
from tests.conftest import NOW
from tests.releases.helpers import race_writes, two_writers

SHARED = "com.example.shared"


def test_an_apple_id_and_another_gyms_android_package_mapped_at_once_map_one_gym(
    committed_pg, settings
):
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as session:
        first_gym = factories.organization(session, tier=Tier.elite)
        second_gym = factories.organization(session, tier=Tier.elite)
        session.commit()
        ids = first_gym.id, second_gym.id
    answers: list[str] = []

    with two_writers(engine) as (first, second):
        branded_apps.create_app(
            first, settings, first.get(Organization, ids[0]), apple_bundle_id=SHARED, now=NOW
        )

        def second_mapping() -> None:
            try:
                branded_apps.create_app(second, settings, second.get(Organization, ids[1]),
                                        android_package=SHARED, now=NOW)  # fmt: skip
                second.commit()
                answers.append("created")
            except DomainError as refused:
                answers.append(refused.code)

        assert race_writes(engine, first, second_mapping) == []

    assert answers == ["branded_app_id_taken"]
    with factory() as session:
        holders = session.scalars(
            select(BrandedApp.organization_id).where(
                or_(BrandedApp.apple_bundle_id == SHARED, BrandedApp.android_package == SHARED)
            )
        ).all()
    assert holders == [ids[0]]
