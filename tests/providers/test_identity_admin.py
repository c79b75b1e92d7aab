"""The identity provider's admin API: the HTTP client against the stand-in provider on loopback,
its per-instance invitation limit, bulk invites after a 429, and the embedded default."""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl import db
from gymctl.clock import FixedClock
from gymctl.config import ConfigError, Settings
from gymctl.identity.users import address_keys
from gymctl.models import RateWindow
from gymctl.providers.identity_admin import (
    INVITATION_KEY,
    Account,
    HttpIdentityAdmin,
    IdentityAdminError,
    LocalIdentityAdmin,
    RateLimited,
    identity_admin_from_settings,
)
from tests import factories
from tests.conftest import NOW

REDIRECT = "https://app.example.test/en/sign-up"
METADATA = {"invitationId": "0b6f7c1e-0000-4000-8000-000000000001"}


@pytest.fixture
def admin(idp, clock: FixedClock):
    client = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock)
    yield client
    client.close()


@pytest.fixture
def keys(session):
    """The one address rule the callers pass (identity.users.address_keys)."""
    return functools.partial(address_keys, session)


def invite(session, admin, email: str = "new.person@example.test") -> str:
    return admin.create_invitation(session, email, redirect_url=REDIRECT, metadata=METADATA)


def test_lookup_finds_a_verified_account_case_insensitively(keys, admin, idp) -> None:
    idp.add_account("user_ann", "Ann.Member@Example.test")
    assert admin.find_account("ann.member@example.TEST", keys) == Account(
        identity_id="user_ann", email="Ann.Member@Example.test", email_verified=True
    )
    assert idp.admin_requests == 1


def test_lookup_of_an_unknown_address_is_none(keys, admin, idp) -> None:
    idp.add_account("user_ann", "ann@example.test")
    assert admin.find_account("nobody@example.test", keys) is None


def test_lookup_reports_an_unproven_email(keys, admin, idp) -> None:
    idp.add_account("user_joiner", "joiner@example.test", verified=False)
    account = admin.find_account("joiner@example.test", keys)
    assert account is not None
    assert account.identity_id == "user_joiner"
    assert account.email_verified is False


def test_lookup_prefers_the_verified_holder(keys, admin, idp) -> None:
    idp.add_account("user_unproven", "shared@example.test", verified=False)
    idp.add_account("user_proven", "shared@example.test", verified=True)
    account = admin.find_account("shared@example.test", keys)
    assert account is not None
    assert account.identity_id == "user_proven"


def test_invitation_is_created_at_the_provider(session, admin, idp) -> None:
    invitation_id = invite(session, admin, "new.person@example.test")
    assert invitation_id == "inv_1"
    assert idp.invitations == [
        {
            "id": "inv_1",
            "object": "invitation",
            "email_address": "new.person@example.test",
            "redirect_url": REDIRECT,
            "public_metadata": METADATA,
            "status": "pending",
        }
    ]


def test_private_metadata_of_a_platform_admin_and_of_others(admin, idp) -> None:
    idp.add_account("user_root", "root@example.test", private_metadata={"platformRole": "admin"})
    idp.add_account("user_plain", "plain@example.test")
    assert admin.private_metadata("user_root") == {"platformRole": "admin"}
    assert admin.private_metadata("user_plain") == {}
    assert admin.private_metadata("user_gone") == {}  # 404: no such user, so no admin
    assert admin.private_metadata("user/../v1/jwks") == {}  # the id stays one path segment


def test_the_bearer_secret_is_checked(keys, session, idp, clock) -> None:
    idp.add_account("user_ann", "ann@example.test")
    wrong = HttpIdentityAdmin(idp.url, "sk_test_wrong", clock=clock)
    with pytest.raises(IdentityAdminError, match="answered 401"):
        wrong.find_account("ann@example.test", keys)
    with pytest.raises(IdentityAdminError, match="answered 401"):
        invite(session, wrong)
    with pytest.raises(IdentityAdminError, match="answered 401"):
        wrong.private_metadata("user_ann")
    assert idp.invitations == []


def test_101st_invitation_within_the_hour_is_refused_without_a_call(
    keys, session, admin, idp, clock
) -> None:
    for n in range(100):
        clock.set(NOW + timedelta(seconds=30 * n))  # spread over 49.5 minutes
        invite(session, admin, f"person{n}@example.test")
    assert idp.admin_requests == 100

    with pytest.raises(RateLimited) as refused:
        invite(session, admin, "one.too.many@example.test")
    assert idp.admin_requests == 100  # refused here, the provider never asked
    assert refused.value.code == "rate_limited"
    assert refused.value.status == 429
    assert refused.value.retry_after == 60 * 10 + 30  # the first slot frees at NOW + 1 h
    assert refused.value.to_json()["retryAfter"] == 630

    # Lookups and metadata reads do not spend the invitation budget (the admin guard needs them).
    assert admin.find_account("person1@example.test", keys) is None
    assert admin.private_metadata("user_x") == {}

    clock.set(NOW + timedelta(hours=1))  # the first invitation left the window
    assert invite(session, admin, "one.too.many@example.test") == "inv_101"
    with pytest.raises(RateLimited):
        invite(session, admin)
    clock.set(NOW + timedelta(hours=1, seconds=30))  # and the second one
    assert invite(session, admin) == "inv_102"


def test_the_invitation_budget_is_one_per_provider_instance_not_per_process(
    idp, clock, committed_pg
) -> None:
    """Two API processes (two clients, two database sessions) share the 100 per hour: the
    window is counted in the database (gymctl.ratelimit.take_apart), not in each process's
    memory."""
    factory = db.session_factory(db.get_engine(committed_pg))
    first = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock, limit=3)
    second = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock, limit=3)
    try:
        for n, admin in enumerate((first, second, first)):
            with factory() as session:
                invite(session, admin, f"person{n}@example.test")
                session.commit()
        with factory() as session, pytest.raises(RateLimited) as refused:
            invite(session, second, "one.too.many@example.test")
        assert refused.value.retry_after == 3600
        assert idp.admin_requests == 3
    finally:
        first.close()
        second.close()


def test_an_invitation_waits_for_no_other_invitations_round_trip(idp, clock, committed_pg) -> None:
    """The budget's slot is taken and committed before the provider is called
    (gymctl.ratelimit.take_apart): a second invitation, in another gym's request, takes its
    slot and reaches the provider while the first one's call is still out. In the caller's
    transaction the slot's lock was held through the call, the email and the commit: every
    invitation of the platform one at a time."""
    factory = db.session_factory(db.get_engine(committed_pg))
    admin = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock)
    answers: dict[str, str] = {}

    def request(email: str) -> None:
        with factory() as session:
            answers[email] = invite(session, admin, email)
            session.commit()  # the request's own transaction ends after the call

    idp.invitation_gate.clear()  # the provider holds every invitation it is asked for
    first = threading.Thread(target=request, args=("first@example.test",))
    second = threading.Thread(target=request, args=("second@example.test",))
    try:
        first.start()
        _until(lambda: idp.invitations_asked == 1)
        second.start()
        _until(lambda: idp.invitations_asked == 2)  # while the first is still out
    finally:
        idp.invitation_gate.set()
        first.join(10)
        second.join(10)
        admin.close()
    assert sorted(answers) == ["first@example.test", "second@example.test"]
    with factory() as session:
        assert (
            session.scalar(
                select(func.sum(RateWindow.count)).where(RateWindow.key == INVITATION_KEY)
            )
            == 2
        )


def test_a_slot_stays_spent_when_the_callers_transaction_rolls_back(
    idp, clock, committed_pg
) -> None:
    """The provider counted the call it received, whatever the caller did next (its email
    failed, say, and its transaction rolled back): so does the budget."""
    factory = db.session_factory(db.get_engine(committed_pg))
    admin = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock, limit=1)
    try:
        with factory() as session:
            invite(session, admin, "first@example.test")
            session.rollback()
        with factory() as session, pytest.raises(RateLimited):
            invite(session, admin, "second@example.test")
    finally:
        admin.close()
    assert idp.admin_requests == 1


@pytest.mark.parametrize("fault", ["admin_status", "answer_429_after", "down"])
def test_a_failed_invitation_gives_its_slot_back(idp, clock, committed_pg, fault) -> None:
    """The budget counts the invitations the provider created: a call that failed (an error,
    its own 429, a provider down) returns its slot, committed apart like the take, so an
    outage that staff retry through does not spend the hour's budget."""
    factory = db.session_factory(db.get_engine(committed_pg))
    admin = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock, limit=1)
    setattr(idp, fault, {"admin_status": 500, "answer_429_after": 0, "down": True}[fault])
    try:
        for _ in range(3):
            with factory() as session, pytest.raises(IdentityAdminError):
                invite(session, admin, "first@example.test")
        setattr(idp, fault, {"admin_status": None, "answer_429_after": None, "down": False}[fault])
        with factory() as session:
            assert invite(session, admin, "first@example.test").startswith("inv_")
            session.commit()
            assert (
                session.scalar(
                    select(func.sum(RateWindow.count)).where(RateWindow.key == INVITATION_KEY)
                )
                == 1
            )
    finally:
        admin.close()


def test_a_caller_holding_the_key_itself_is_refused_rather_than_left_waiting(
    committed_pg, monkeypatch
) -> None:
    """A caller whose own transaction took the key's lock (take, then take_apart) would wait
    for itself for ever, a wait PostgreSQL cannot see as a deadlock: the second transaction
    gives up after APART_LOCK_TIMEOUT."""
    from sqlalchemy.exc import OperationalError

    from gymctl import ratelimit

    monkeypatch.setattr(ratelimit, "APART_LOCK_TIMEOUT", "200ms")
    factory = db.session_factory(db.get_engine(committed_pg))
    window = timedelta(hours=1)
    with factory() as session:
        ratelimit.take(session, "test:self", limit=5, window=window, now=NOW)
        with pytest.raises(OperationalError, match="lock timeout"):
            ratelimit.take_apart(session, "test:self", limit=5, window=window, now=NOW)
        session.rollback()


@pytest.fixture
def embedded_url(tmp_path, migrated_sqlite) -> str:
    """A SQLite file of the test's own: these tests commit for real."""
    return migrated_sqlite(tmp_path / "gymctl.db")


def test_the_embedded_default_takes_the_slot_in_the_callers_transaction(
    idp, clock, embedded_url
) -> None:
    """Its one writer is the caller: a transaction of the slot's own would wait for it (a
    second writer in one thread, refused). The slot goes with the caller's transaction."""
    factory = db.session_factory(db.get_engine(embedded_url))
    admin = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock, limit=1)
    try:
        with factory() as session:
            factories.organization(session)  # the caller has written: it holds the write lock
            session.flush()
            assert invite(session, admin, "first@example.test") == "inv_1"
            session.rollback()
        with factory() as session:
            assert invite(session, admin, "second@example.test") == "inv_2"
            session.rollback()
    finally:
        admin.close()


def test_on_the_embedded_default_a_caller_with_no_transaction_open_holds_no_write_lock(
    idp, clock, embedded_url
) -> None:
    """An invitation asks the provider after its transaction ended (decisions s42); the slot
    was then taken in a write transaction the caller's session began, held through the
    provider's round trip (every writer of every process waited on it). It is committed
    apart before the call, and stays spent whatever the caller does next."""
    from tests.embedded_outside_calls import watching

    factory = db.session_factory(db.get_engine(embedded_url))
    admin = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock, limit=1)
    try:
        with factory() as session, watching() as seen:
            assert invite(session, admin, "first@example.test") == "inv_1"
            assert not session.in_transaction()
            session.rollback()
        assert "httpx" in seen.doors()
        assert not seen.calls, seen.report()
        with factory() as session, pytest.raises(RateLimited):
            invite(session, admin, "second@example.test")
    finally:
        admin.close()
    assert idp.admin_requests == 1


def _until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "waited 10 s"
        time.sleep(0.01)


def test_a_provider_429_is_rate_limited_with_retry_after(keys, session, admin, idp) -> None:
    idp.answer_429_after = 0
    with pytest.raises(RateLimited) as refused:
        invite(session, admin)
    assert refused.value.retry_after == 60
    assert refused.value.code == "rate_limited"
    with pytest.raises(RateLimited):
        admin.find_account("ann@example.test", keys)
    assert idp.invitations == []


def test_a_500_is_an_identity_admin_error(keys, session, admin, idp) -> None:
    idp.admin_status = 500
    for call in (
        lambda: admin.find_account("ann@example.test", keys),
        lambda: invite(session, admin, "ann@example.test"),
        lambda: admin.private_metadata("user_ann"),
    ):
        with pytest.raises(IdentityAdminError) as failed:
            call()
        assert not isinstance(failed.value, RateLimited)
        assert "answered 500" in str(failed.value)
        assert "ann@example.test" not in str(failed.value)
        assert failed.value.code == "identity_provider_error"
        assert failed.value.status == 502


def test_a_timeout_is_an_identity_admin_error(keys, idp, clock) -> None:
    idp.admin_delay = 1.0
    admin = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock, timeout=0.2)
    with pytest.raises(IdentityAdminError, match="ReadTimeout") as failed:
        admin.find_account("slow@example.test", keys)
    assert "slow@example.test" not in str(failed.value)
    assert failed.value.__cause__ is None
    assert failed.value.__suppress_context__


def test_provider_down_or_unreachable_is_an_identity_admin_error(keys, idp, clock) -> None:
    idp.down = True
    admin = HttpIdentityAdmin(idp.url, idp.SECRET_KEY, clock=clock)
    with pytest.raises(IdentityAdminError, match="answered 503"):
        admin.find_account("ann@example.test", keys)
    idp.close()
    with pytest.raises(IdentityAdminError, match="ConnectError"):
        admin.private_metadata("user_ann")


def test_the_default_timeout_is_five_seconds(idp) -> None:
    admin = HttpIdentityAdmin(idp.url, idp.SECRET_KEY)
    assert admin._timeout == 5.0


def test_emails_never_reach_the_logs(keys, session, admin, idp, caplog) -> None:
    email = "private.person@example.test"
    idp.add_account("user_private", email)
    with caplog.at_level(logging.DEBUG):
        admin.find_account(email, keys)
        invite(session, admin, email)
        idp.admin_status = 500
        with pytest.raises(IdentityAdminError):
            admin.find_account(email, keys)
    logged = "\n".join(
        caplog.handler.format(record) + json.dumps(vars(record), default=str)
        for record in caplog.records
    )
    assert any("/v1/users" in record.getMessage() for record in caplog.records)  # httpx logged
    assert email not in logged
    assert "private.person%40example.test" not in logged
    assert idp.SECRET_KEY not in logged


# The embedded default: the users table stands in for the provider.


@pytest.mark.embedded
def test_local_lookup_matches_linked_live_rows_case_insensitively(keys, session, session_factory):
    factories.user(session, identity_id="user_ann", email="Ann@Example.test", email_verified_at=NOW)
    factories.user(session, identity_id="user_bo", email="bo@example.test")  # unproven address
    factories.user(session, identity_id=None, email="gym.created@example.test")  # no login yet
    factories.user(session, identity_id="user_gone", email="gone@example.test", deleted_at=NOW)
    local = LocalIdentityAdmin(session_factory, [])

    assert local.find_account("ann@example.TEST", keys) == Account(
        identity_id="user_ann", email="Ann@Example.test", email_verified=True
    )
    assert local.find_account("bo@example.test", keys) == Account(
        identity_id="user_bo", email="bo@example.test", email_verified=False
    )
    assert local.find_account("gym.created@example.test", keys) is None
    assert local.find_account("gone@example.test", keys) is None
    assert local.find_account("nobody@example.test", keys) is None


def test_local_invitation_and_metadata(session, session_factory) -> None:
    local = LocalIdentityAdmin(session_factory, ["user_root"])
    first, second = invite(session, local), invite(session, local)
    assert first.startswith("inv_local_")
    assert len(first) == len("inv_local_") + 32
    assert first != second
    assert local.private_metadata("user_root") == {"platformRole": "admin"}
    assert local.private_metadata("user_other") == {}


def _settings(**values) -> Settings:
    return Settings(
        **{"IDENTITY_API_URL": None, "IDENTITY_SECRET_KEY": None, "GYMCTL_PLATFORM_ADMINS": ""}
        | values
    )


def test_identity_admin_from_settings_picks_each(keys, idp, session_factory, clock) -> None:
    configured = {"IDENTITY_API_URL": idp.url, "IDENTITY_SECRET_KEY": idp.SECRET_KEY}

    http = identity_admin_from_settings(
        _settings(GYMCTL_IDENTITY_ADMIN="http", **configured), session_factory, clock=clock
    )
    assert isinstance(http, HttpIdentityAdmin)
    idp.add_account("user_ann", "ann@example.test")
    assert http.find_account("ann@example.test", keys) is not None  # wired to the provider and key

    auto = identity_admin_from_settings(_settings(**configured), session_factory)
    assert isinstance(auto, HttpIdentityAdmin)

    local = identity_admin_from_settings(
        _settings(
            GYMCTL_IDENTITY_ADMIN="local", GYMCTL_PLATFORM_ADMINS="user_a, user_b", **configured
        ),
        session_factory,
    )
    assert isinstance(local, LocalIdentityAdmin)
    assert local.private_metadata("user_b") == {"platformRole": "admin"}

    for partial in ({}, {"IDENTITY_API_URL": idp.url}, {"IDENTITY_SECRET_KEY": "sk_x"}):
        fallback = identity_admin_from_settings(_settings(**partial), session_factory)
        assert isinstance(fallback, LocalIdentityAdmin)


@pytest.mark.parametrize(
    "values",
    [
        {"GYMCTL_IDENTITY_ADMIN": "http"},
        {"GYMCTL_IDENTITY_ADMIN": "http", "IDENTITY_API_URL": "http://127.0.0.1:9"},
        {"GYMCTL_IDENTITY_ADMIN": "http", "IDENTITY_SECRET_KEY": "sk_x"},
        {"GYMCTL_IDENTITY_ADMIN": "clerk"},
    ],
)
def test_identity_admin_from_settings_refuses_what_cannot_work(values, session_factory) -> None:
    with pytest.raises(ConfigError, match="GYMCTL_IDENTITY_ADMIN"):
        identity_admin_from_settings(_settings(**values), session_factory)
