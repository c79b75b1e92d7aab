"""`gymctl bridge link` through Typer's runner, on both engines: an external id the entity map
cannot hold (empty, blank, past the column's 128 characters, two lines) is refused with its
code before anything is written. It was stored as given: an empty link on SQLite, and a crash
(exit 70, value too long) on PostgreSQL."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from gymctl.cli import app as gymctl_app
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import AuditLog, User
from gymctl.models.bridge import EntityLink
from tests import factories
from tests.conftest import NOW


@pytest.fixture
def world(committed_database, monkeypatch):
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_database)
    with Session(get_engine(committed_database), expire_on_commit=False) as session:
        org = factories.organization(session)
        session.add(User(identity_id="user_ops", email="ops@example.test", created_at=NOW,
                         updated_at=NOW))  # fmt: skip
        member = factories.membership(session, user=factories.user(session), organization=org)
        session.commit()
    return committed_database, org, member


@pytest.mark.parametrize("external_id", ["", "   ", "7" * 129, "77\n78"])
def test_an_external_id_the_map_cannot_hold_is_refused_and_nothing_is_written(world, external_id):
    url, org, member = world
    result = CliRunner().invoke(
        gymctl_app,
        ["bridge", "link", org.slug, "member", str(member.id), external_id,
         "--operator", "user_ops", "--json"],
    )  # fmt: skip
    assert isinstance(result.exception, DomainError), result.output
    assert result.exception.code == "bridge_external_id_invalid"
    with Session(get_engine(url)) as session:
        assert session.scalar(select(func.count()).select_from(EntityLink)) == 0
        assert not session.scalars(
            select(AuditLog.action).where(AuditLog.action == "bridge.linked_by_operator")
        ).all()


def test_the_external_id_is_kept_trimmed(world):
    _, org, member = world
    result = CliRunner().invoke(
        gymctl_app,
        ["bridge", "link", org.slug, "member", str(member.id), " 77 ",
         "--operator", "user_ops", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["externalId"] == "77"
