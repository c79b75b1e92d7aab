"""0022_s51_page_read_back: the pages abandoned within the read-back window before the revision
are put on the schedule (their first hourly read-back due at once); older ones are left unread;
other pages are untouched."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import sessionmaker

from gymctl import migrate
from gymctl.billing.abandoned_pages import READ_BACK_WINDOW, due_read_backs
from gymctl.db import get_engine


def test_the_revision_schedules_the_pages_abandoned_within_the_window(tmp_path):
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    migrate.upgrade(url, "0021_s48_identity_event_order")
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    pages = {
        "1" * 32: ("abandoned", now - timedelta(days=2)),
        "2" * 32: ("abandoned", now - READ_BACK_WINDOW - timedelta(days=1)),
        "3" * 32: ("completed", now - timedelta(days=1)),
        "4" * 32: ("open", now - timedelta(hours=3)),
    }
    with sqlite3.connect(path) as connection:  # the rows only: no gym or plan behind them
        connection.execute("PRAGMA foreign_keys = OFF")
        connection.executemany(
            "INSERT INTO checkouts (id, organization_id, subscription_id, user_id, operation, "
            "terminal, page_id, amount_in_cents, currency, status, metadata, expires_at, "
            "created_at) VALUES (?, ?, ?, ?, 'ChargeAndCreateToken', '1000', ?, 100, 'ILS', ?, "
            "'{}', ?, ?)",
            [
                (key, key, key, key, f"page-{key[0]}", status, str(at), str(at))
                for key, (status, at) in pages.items()
            ],
        )
    migrate.upgrade(url)
    with sqlite3.connect(path) as connection:
        rows = dict(
            (key, (read_back_at, read_backs))
            for key, read_back_at, read_backs in connection.execute(
                "SELECT id, read_back_at, read_backs FROM checkouts"
            )
        )
    assert rows == {
        "1" * 32: (str(pages["1" * 32][1]), 0),  # its expiry: abandoned within 5 minutes of it
        "2" * 32: (None, 0),
        "3" * 32: (None, 0),
        "4" * 32: (None, 0),
    }
    with sessionmaker(bind=get_engine(url))() as session:
        due = due_read_backs(session, datetime.now(UTC))
    assert [str(checkout_id.hex) for checkout_id, _ in due] == ["1" * 32]
