"""The lock helper: transaction-scoped, on PostgreSQL (advisory) and SQLite (process lock)."""

from __future__ import annotations

import pytest

from gymctl.db import advisory_lock, lock_key, session_factory


@pytest.mark.embedded
@pytest.mark.parametrize("end", ["commit", "rollback", "close"])
def test_a_lock_is_held_until_the_transaction_ends(engine, end):
    factory = session_factory(engine)
    holder, rival = factory(), factory()
    try:
        assert advisory_lock(holder, "test:lock") is True
        assert advisory_lock(rival, "test:lock", wait=False) is False
        rival.rollback()
        getattr(holder, end)()
        assert advisory_lock(rival, "test:lock", wait=False) is True
        rival.rollback()
    finally:
        holder.close()
        rival.close()


@pytest.mark.embedded
def test_different_names_do_not_block_each_other(engine):
    factory = session_factory(engine)
    with factory() as one, factory() as two:
        assert advisory_lock(one, "test:a", wait=False)
        assert advisory_lock(two, "test:b", wait=False)
        one.rollback()
        two.rollback()


def test_lock_keys_are_stable_signed_64_bit_integers():
    assert lock_key("daemon:event_relay") == lock_key("daemon:event_relay")
    assert lock_key("a") != lock_key("b")
    assert -(2**63) <= lock_key("x") < 2**63


@pytest.mark.embedded
def test_a_transaction_may_take_its_own_lock_again(engine):
    """PostgreSQL's transaction-level advisory locks stack: one unit of work that publishes the
    brand and then the app takes the same lock twice. SQLite's stand-in waited on itself."""
    factory = session_factory(engine)
    with factory() as holder, factory() as rival:
        assert advisory_lock(holder, "test:again", wait=False)
        assert advisory_lock(holder, "test:again", wait=False)
        assert advisory_lock(holder, "test:again")
        assert advisory_lock(rival, "test:again", wait=False) is False
        rival.rollback()
        holder.commit()
        assert advisory_lock(rival, "test:again", wait=False)
        rival.rollback()


def test_a_writer_that_holds_sqlites_lock_in_a_loop_lets_another_writer_in(tmp_path):
    """SQLite's lock is not fair: a loop that commits and begins again took it back within
    microseconds while a waiter slept between polls, so a daemon working a bulk invite an
    address per transaction kept every other writer out until its run ended (30 s, "database
    is locked"). A thread that held the lock over half the last second pauses longer than one
    poll: the waiter gets in while the loop is still running."""
    import threading
    import time

    from gymctl.db import get_engine, release_engine

    url = f"sqlite:///{tmp_path / 'pace.db'}"
    engine = get_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE t (n INTEGER)")
    loops, rounds = [0], 150

    def loop() -> None:
        for _ in range(rounds):
            with engine.begin() as connection:
                connection.exec_driver_sql("INSERT INTO t VALUES (1)")
                time.sleep(0.02)  # a unit's work inside its transaction (a provider call)
            loops[0] += 1

    worker = threading.Thread(target=loop)
    worker.start()
    try:
        while loops[0] < 5:
            time.sleep(0.01)
        with engine.begin() as connection:  # waits on the loop (busy_timeout 30 s)
            connection.exec_driver_sql("INSERT INTO t VALUES (2)")
            got_in_after = loops[0]
    finally:
        worker.join()
        release_engine(url)
    assert got_in_after < rounds, "the waiter got the lock only when the loop ended"


def test_a_file_only_its_own_thread_writes_is_never_paced(tmp_path, monkeypatch):
    """The pause lets other writers in; the forecast's scratch copy has none (its one thread
    writes it), and there the pause was all the pacing did: 7.5 s of sleep in a 120-day
    forecast of 1,000 subscriptions."""
    import gymctl.db as db
    from gymctl.billing.forecast import scratch_engine

    paced = []
    monkeypatch.setattr(db, "_pace_writer", lambda: paced.append(1))
    url = f"sqlite:///{tmp_path / 'scratch.db'}"
    engine = scratch_engine(url)
    try:
        assert engine.get_execution_options()["gymctl_unshared"] is True
        for _ in range(3):
            with engine.begin() as connection:
                connection.exec_driver_sql("UPDATE organizations SET name = name")
    finally:
        db.release_engine(url)
    assert paced == []
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    try:
        with db.get_engine(shared).begin() as connection:
            connection.exec_driver_sql("CREATE TABLE t (n INTEGER)")
    finally:
        db.release_engine(shared)
    assert paced == [1], "a database others may write is still paced"


def test_a_transaction_holding_an_advisory_lock_is_not_ended_for_an_outside_call(tmp_path):
    """release_for_outside_call ends a transaction that only read, on the embedded default;
    one that took an advisory lock keeps it to its end (the caller serialized on it, as
    PostgreSQL's transaction lock would hold): ending it would free the lock mid-work."""
    from gymctl.db import get_engine, release_engine, release_for_outside_call

    url = f"sqlite:///{tmp_path / 'locked.db'}"
    factory = session_factory(get_engine(url))
    try:
        with factory() as holder, factory() as rival:
            holder.connection()
            release_for_outside_call(holder)
            assert not holder.in_transaction()  # only read: ended
            assert advisory_lock(holder, "test:call") is True
            release_for_outside_call(holder)
            assert holder.in_transaction()
            assert advisory_lock(rival, "test:call", wait=False) is False
            rival.rollback()
            holder.rollback()
            assert advisory_lock(rival, "test:call", wait=False) is True
            rival.rollback()
    finally:
        release_engine(url)
