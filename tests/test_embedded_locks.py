"""The embedded default's named locks (`job_lock`, `session_lock`) across processes.

The API (`gymctl serve`), the daemons and operators' commands are processes of their own on one
SQLite file. A threading lock stood in for PostgreSQL's advisory lock, so two daemons, or a
daemon and an operator running the same sweep by hand, both held `daemon:<job>` and ran it
twice at once. Each name now also has a lock file beside the database (flock), which the kernel
drops when its process dies. The holder here is a real second process (subprocess), synchronized
through its pipes: it says "held" and keeps the lock until its stdin says "release" (or it is
killed)."""

from __future__ import annotations

import fcntl
import select
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from gymctl import db
from gymctl.db import job_lock, session_lock

HOLDER = """
import sys
from gymctl.db import get_engine, job_lock, session_lock

url, name, kind = sys.argv[1:4]
engine = get_engine(url)
lock = job_lock(engine, name) if kind == "job" else session_lock(engine, name)
with lock as held:
    print("held" if held else "refused", flush=True)
    sys.stdin.readline()
"""
PIPE_LIMIT_SECONDS = 20  # a broken holder fails the test instead of hanging it


class Holder:
    """A second process holding the lock `name` on the database at `url`."""

    def __init__(self, url: str, name: str, kind: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, url, name, kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready, _, _ = select.select([self.process.stdout], [], [], PIPE_LIMIT_SECONDS)
        assert ready, "the holder process never answered"
        assert self.process.stdout.readline().strip() == "held"

    def release(self) -> None:
        self.process.stdin.write("release\n")
        self.process.stdin.close()
        assert self.process.wait(PIPE_LIMIT_SECONDS) == 0

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(PIPE_LIMIT_SECONDS)


@pytest.fixture
def url(tmp_path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'gymctl.db'}"
    yield url
    db.release_engine(url)


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        if holder.process.poll() is None:
            holder.kill()


def held(url: str, name: str, kind: str, wait_seconds: float = 0.0) -> bool:
    engine = db.get_engine(url)
    if kind == "job":
        with job_lock(engine, name) as taken:
            return taken
    with session_lock(engine, name, wait_seconds=wait_seconds) as connection:
        return connection is not None


@pytest.mark.parametrize("kind", ["job", "session"])
def test_a_lock_another_process_holds_is_refused_until_it_releases(url, holders, kind):
    holders.append(Holder(url, "daemon:sweep", kind))
    assert held(url, "daemon:sweep", kind) is False, "two processes held one lock"
    holders[0].release()
    assert held(url, "daemon:sweep", kind) is True


def test_a_waiter_gets_the_lock_when_the_other_process_releases_it(url, holders, monkeypatch):
    """session_lock(wait_seconds=...) polls the lock file: refused while the holder runs, then
    held once it releases, within its wait."""
    holders.append(Holder(url, "bridge:dispatch:org", "session"))
    refused = threading.Event()
    flock = fcntl.flock

    def watched(descriptor: int, operation: int) -> None:
        try:
            flock(descriptor, operation)
        except BlockingIOError:
            refused.set()
            raise

    monkeypatch.setattr(fcntl, "flock", watched)
    outcome: list[bool] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(held(url, "bridge:dispatch:org", "session", 15.0))
    )
    waiter.start()
    try:
        assert refused.wait(PIPE_LIMIT_SECONDS), "the waiter was never refused"
        holders[0].release()
    finally:
        waiter.join(PIPE_LIMIT_SECONDS)
    assert outcome == [True]


def test_a_lock_is_freed_when_its_process_is_killed(url, holders):
    """A crashed daemon never leaves its job locked: the kernel drops a dead process's flock."""
    holders.append(Holder(url, "daemon:sweep", "job"))
    assert held(url, "daemon:sweep", "job") is False
    holders[0].kill()
    assert held(url, "daemon:sweep", "job") is True


def test_different_names_do_not_contend_across_processes(url, holders):
    holders.append(Holder(url, "daemon:sweep", "job"))
    assert held(url, "daemon:relay", "job") is True
    assert held(url, "daemon:sweep", "job") is False


@pytest.mark.parametrize("database", ["gymctl.db", None])
def test_threads_of_one_process_still_exclude_each_other(tmp_path, database):
    """On a file and in memory (one process's own: no lock folder)."""
    url = f"sqlite:///{tmp_path / database}" if database else "sqlite://"
    engine = db.get_engine(url)
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with job_lock(engine, "daemon:sweep") as holding:
            assert holding
            taken.set()
            done.wait(PIPE_LIMIT_SECONDS)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(PIPE_LIMIT_SECONDS)
        assert held(url, "daemon:sweep", "job") is False
        assert held(url, "daemon:sweep", "session") is False
    finally:
        done.set()
        holder.join(PIPE_LIMIT_SECONDS)
    assert held(url, "daemon:sweep", "job") is True
    db.release_engine(url)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".locks")] == (
        ["gymctl.db.locks"] if database else []
    )
