"""`gymctl members import` beside other writers of the same SQLite file (the embedded default).

The CLI registered the whole roster in one transaction: on the embedded default it held the
database's one write lock (BEGIN IMMEDIATE) from its first row to its commit, and every other
writer of every process, every gym's request and every daemon job, waited for it; past the 30 s
busy timeout the API answered 503 database_busy and the jobs failed "database is locked"
(1,200 rows held it for 8 s, 4,000 past 30 s, 20,000 for three minutes). It now queues the
rows as the HTTP door does and registers them a chunk a transaction
(member_imports.import_here): another writer gets in between chunks, and sees the import half
done.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

ROWS = 600  # twelve chunks of 50


def _env(home):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GYMCTL_", "IDENTITY_"))}
    return {**base, "GYMCTL_HOME": str(home), "GYMCTL_ENV": "development"}


def _gymctl(env, *args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "gymctl", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


@pytest.fixture
def home(tmp_path):
    home = tmp_path / ".gymctl"
    env = _env(home)
    assert _gymctl(env, "quickstart", "--json").returncode == 0
    tier = _gymctl(env, "members", "tier", "demo-gym", "elite", "--operator", "user_demo_owner")
    assert tier.returncode == 0, tier.stderr
    return home


def _seen_by_a_writer(database: str, done: threading.Event) -> list[int]:
    """Until `done`, begin a write as a request would (waiting up to 5 s for the lock) and
    count the roster's people it sees: what each write that got in saw."""
    seen = []
    while not done.is_set():
        probe = sqlite3.connect(database, timeout=5, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            seen.append(
                probe.execute(
                    "SELECT count(*) FROM users WHERE email LIKE 'cli%@roster.example'"
                ).fetchone()[0]
            )
            probe.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass  # 5 s without the lock: seen nothing
        finally:
            probe.close()
        time.sleep(0.05)
    return seen


def test_another_writer_gets_in_while_a_cli_import_runs(home, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "email,name\n" + "".join(f"cli{i}@roster.example,Member {i}\n" for i in range(ROWS))
    )
    database = str(home / "gymctl.db")
    done, seen = threading.Event(), []
    prober = threading.Thread(
        target=lambda: seen.extend(_seen_by_a_writer(database, done)), daemon=True
    )
    prober.start()
    imported = _gymctl(_env(home), "members", "import", "demo-gym", str(roster), "--json")
    done.set()
    prober.join(10)
    assert imported.returncode == 0, imported.stderr[-2000:]
    result = json.loads(imported.stdout)
    assert (result["status"], len(result["members"]["created"])) == ("finished", ROWS)
    assert any(0 < count < ROWS for count in seen), (
        f"no other write began while the import ran (it saw {sorted(set(seen))})"
    )
