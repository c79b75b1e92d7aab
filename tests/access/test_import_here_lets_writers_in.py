"""`gymctl members import` beside other writers of the same SQLite file (the embedded default).

The CLI registered the whole roster in one transaction: on the embedded default it held the
database's one write lock (BEGIN IMMEDIATE) from its first row to its commit, and every other
writer of every process, every gym's request and every daemon job, waited for it; past the 30 s
busy timeout the API answered 503 database_busy and the jobs failed "database is locked"
(1,200 rows held it for 8 s, 4,000 past 30 s, 20,000 for three minutes). It now queues the
rows as the HTTP door does and registers them a chunk a transaction
(member_imports.import_here, which the command runs): between two chunks another writer begins
at once, and sees the import half done."""

from __future__ import annotations

import sqlite3

from sqlalchemy import func, select

from gymctl.access import member_imports
from gymctl.access.registrations import Registrar
from gymctl.db import get_engine, release_engine, session_factory
from gymctl.models import Membership, Organization, Role
from gymctl.models.organizations import Tier
from tests import factories
from tests.conftest import NOW

ROWS = member_imports.CHUNK_ROWS * 3


def test_another_writer_begins_between_two_chunks_of_an_import(migrated_sqlite, tmp_path):
    path = tmp_path / "gymctl.db"
    url = migrated_sqlite(path)
    factory = session_factory(get_engine(url))
    with factory() as session:
        gym = factories.organization(session, name="Roster Gym", tier=Tier.elite)
        owner = factories.user(session, email="owner.roster@example.test")
        staff = factories.membership(session, organization=gym, user=owner, role=Role.owner)
        session.commit()
        registrar = Registrar(session.get(Organization, gym.id), owner.id, None, "cli", None)
    seen = []

    def between_chunks(done: int, total: int) -> None:
        if 0 < done < total:
            writer = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                writer.execute("BEGIN IMMEDIATE")  # refused at once if a chunk held the lock
                seen.append(
                    writer.execute(
                        "SELECT count(*) FROM memberships WHERE organization_id = ?",
                        (gym.id.hex,),
                    ).fetchone()[0]
                )
                writer.execute("ROLLBACK")
            finally:
                writer.close()

    rows = [{"email": f"r{n}@roster.example", "name": ""} for n in range(ROWS)]
    done = member_imports.import_here(
        factory, registrar, staff.id, rows, now=lambda: NOW, progress=between_chunks
    )

    assert (done["status"], len(done["results"]["members"]["created"])) == ("finished", ROWS)
    # The owner, then each chunk's members (50 rows, or fewer past 2 s on a loaded machine).
    assert len(seen) >= 2
    assert seen == sorted(set(seen))
    assert all(1 < members < 1 + ROWS for members in seen)
    with factory() as session:
        count = select(func.count()).where(Membership.organization_id == gym.id)
        assert session.scalar(count) == 1 + ROWS
    release_engine(url)
