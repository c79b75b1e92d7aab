"""Test harness: a real PostgreSQL migrated once per session, every test in a rolled-back
savepoint, and a SQLite pass for tests marked `embedded`.

GYMCTL_TEST_DATABASE_URL names the PostgreSQL server (default: the local one); the harness
creates and migrates a database of its own on it (`gymctl_test_<pid>`: each pytest-xdist worker
has its own), so nothing else there is touched.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

os.environ["GYMCTL_ENV"] = "test"
os.environ.setdefault("GYMCTL_HOME", tempfile.mkdtemp(prefix="gymctl-test-home-"))
# pytest-xdist's workers start with COLUMNS=80 and LINES=24, which a plain run does not have:
# rich's console fixes its width from them when the CLI is imported, and a CLI test that sets
# its own COLUMNS would see 80 columns. Every test sees the same terminal either way.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

from gymctl import clock as gymctl_clock
from gymctl import migrate
from gymctl.clock import FixedClock
from gymctl.config import get_settings
from gymctl.db import get_engine, release_engine

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TEST_DB_NAME = f"gymctl_test_{os.getpid()}"  # concurrent runs never share a database
NOW = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)


def _loopback_only(original):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            if not (host.startswith("127.") or host in ("::1", "localhost")):
                raise OSError(f"tests may not reach the network beyond loopback: {host}")
        return original(self, address)

    return connect


@pytest.fixture(scope="session", autouse=True)
def _block_network() -> Iterator[None]:
    original = socket.socket.connect
    socket.socket.connect = _loopback_only(original)  # type: ignore[method-assign]
    yield
    socket.socket.connect = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


_REPLAY_HEADER = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Hypothesis: derandomized in CI, one printed, replayable seed elsewhere (tests/replay.py)."""
    from tests import replay

    config.stash[_REPLAY_HEADER] = replay.configure(config.getoption("hypothesis_seed", None))


def pytest_report_header(config: pytest.Config) -> str:
    return config.stash.get(_REPLAY_HEADER, "")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked `embedded` run on PostgreSQL and on the embedded SQLite default."""
    if "engine" in metafunc.fixturenames and metafunc.definition.get_closest_marker("embedded"):
        metafunc.parametrize("engine", ["postgresql", "sqlite"], indirect=True)


# The files that take longest (seconds of one worker, measured in one full run on this 2-core
# machine), started first: pytest-xdist hands a worker a whole file (--dist loadfile) in
# collection order (--no-loadscope-reorder; its default orders files by their number of tests,
# which left the 114 s chaos test, one test, to start last while the other worker sat idle).
SLOWEST_FILES = (
    "tests/api/test_openapi.py",  # 163 s
    "tests/test_cli_workflows_s48.py",  # 129 s
    "tests/test_readme.py",  # 116 s
    "tests/bridge/test_chaos.py",  # 114 s
    "tests/movements/test_cli_operator.py",  # 105 s
    "tests/billing/test_forecast_cli.py",  # 83 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first (SLOWEST_FILES), the rest in their order.

    `embedded` on a test that never reaches the engine fixture would run it once, silently
    on PostgreSQL only: refuse the whole run instead (a test that asks for `committed_pg` is
    PostgreSQL by its own signature, inside a module marked for both).

    Schemathesis' items (one per operation) all carry their function's node id on pytest 9
    (schemathesis 4 sets the `_nodeid` pytest 9 no longer has): each gets its own from its name
    ("...[GET /health]"), or pytest-xdist, which knows a test by its node id, runs only one."""
    for item in items:
        if not item.nodeid.endswith(item.name):
            item._id = item.parent.id.child(item.name)
    first = {path: rank for rank, path in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: first.get(item.nodeid.partition("::")[0], len(first)))
    unbound = [
        item.nodeid
        for item in items
        if item.get_closest_marker("embedded")
        and not {"engine", "committed_pg", "committed_database"}
        & set(getattr(item, "fixturenames", ()))
    ]
    if unbound:
        raise pytest.UsageError(
            "marked embedded but not using the engine fixture: " + ", ".join(unbound[:20])
        )


def _pg_admin_url() -> str:
    return os.environ.get("GYMCTL_TEST_DATABASE_URL", DEFAULT_PG)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test session, dropped at its end."""
    admin = create_engine(_pg_admin_url(), isolation_level="AUTOCOMMIT")
    drop = text(f"DROP DATABASE IF EXISTS {TEST_DB_NAME} WITH (FORCE)")
    with admin.connect() as connection:
        connection.execute(drop)
        connection.execute(text(f"CREATE DATABASE {TEST_DB_NAME}"))
    url = make_url(_pg_admin_url()).set(database=TEST_DB_NAME).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        yield url
    finally:  # a migration that failed (the server out of lock slots, say) leaves none behind
        get_engine(url).dispose()
        with admin.connect() as connection:
            connection.execute(drop)
        admin.dispose()


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'gymctl.db'}"
    migrate.upgrade(url)
    return url


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Engine:
    backend = getattr(request, "param", "postgresql")
    url = request.getfixturevalue("pg_url" if backend == "postgresql" else "sqlite_url")
    return get_engine(url)


@pytest.fixture
def connection(engine: Engine) -> Iterator:
    """One outer transaction per test, rolled back at the end: tests never see each other."""
    with engine.connect() as connection:
        outer = connection.begin()
        yield connection
        outer.rollback()


@pytest.fixture
def session_factory(connection) -> sessionmaker[Session]:
    """Sessions that commit into savepoints of the test's outer transaction."""
    return sessionmaker(
        bind=connection, expire_on_commit=False, join_transaction_mode="create_savepoint"
    )


@pytest.fixture
def session(session_factory: sessionmaker[Session]) -> Iterator[Session]:
    with session_factory() as session:
        yield session


class Statements:
    """Data statements (SELECT, INSERT, UPDATE, ...) run on the test's connection: `seen` their
    verbs, `text` each statement on one line."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.text: list[str] = []

    def __call__(self, _conn, _cursor, statement, _params, _context, _many) -> None:
        verb = statement.split(None, 1)[0].upper()
        if verb not in ("SAVEPOINT", "RELEASE"):  # the test harness's own transaction nesting
            self.seen.append(verb)
            self.text.append(" ".join(statement.split()))

    def clear(self) -> None:
        self.seen.clear()
        self.text.clear()


@pytest.fixture
def statements(connection) -> Iterator[Statements]:
    counter = Statements()
    event.listen(connection, "before_cursor_execute", counter)
    yield counter
    event.remove(connection, "before_cursor_execute", counter)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(NOW)


@pytest.fixture
def frozen_clock(monkeypatch, clock) -> FixedClock:
    """The process's one clock (gymctl.clock) stands at NOW: for a command run through Typer's
    runner, which reads it, against rows the test dated from NOW. On the system clock such a
    test went stale as the calendar passed NOW (a charge moved to NOW + 9 days was refused as
    in the past from that day on)."""
    monkeypatch.setattr(gymctl_clock, "clock", clock)
    return clock


@pytest.fixture
def committed_pg(pg_url: str) -> Iterator[str]:
    """For tests that need real commits seen by other connections or processes: the URL of the
    session database, emptied after the test."""
    yield pg_url
    engine = get_engine(pg_url)
    from gymctl.models import Base

    tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=["postgresql", "sqlite"])
def committed_database(request, tmp_path) -> str:
    """For workflows whose transactions commit for real on both engines: PostgreSQL
    (committed_pg) and the embedded default (a SQLite file of its own, as the quick start
    makes it, with its real write lock rather than the savepoints of one test connection)."""
    if request.param == "postgresql":
        return request.getfixturevalue("committed_pg")
    return request.getfixturevalue("migrated_sqlite")(tmp_path / "gymctl.db")


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], str]:
    """A SQLite file at the path given, migrated to head: a copy of one file this session
    migrated (0.9 s a migration here; a copy, 1 ms). The migrations themselves are
    tests/test_migrations*.py's."""
    template = tmp_path_factory.mktemp("sqlite-template") / "gymctl.db"
    template_url = f"sqlite:///{template}"
    migrate.upgrade(template_url)
    release_engine(template_url)  # every connection closed: the file holds the whole database

    def at(path: Path) -> str:
        shutil.copyfile(template, path)
        return f"sqlite:///{path}"

    return at


WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def idp():
    """The stand-in identity provider: keys, tokens and a JWKS endpoint on loopback."""
    from tests.idp import IdentityProvider

    provider = IdentityProvider()
    yield provider
    provider.close()


@pytest.fixture
def gym(session):
    """A gym with an owner and a member; areas override it with the traits they need."""
    from tests.factories import make_gym

    return make_gym(session)


@pytest.fixture
def settings(idp):
    return deployment_settings(idp)


def deployment_settings(idp):
    """Settings of a configured deployment: in-process PEM key, JWKS fallback, webhook secret
    (also the benchmarks' that stand in for a deployment)."""
    from gymctl.config import Settings

    return Settings(
        GYMCTL_ENV="test",
        IDENTITY_JWT_KEY=idp.key.public_pem,
        IDENTITY_API_URL=idp.url,
        IDENTITY_SECRET_KEY=idp.SECRET_KEY,
        IDENTITY_WEBHOOK_SECRET=WEBHOOK_SECRET,
        INVITE_SECRET="invite-secret-for-tests-0123456789abcdef",
        FRONTEND_URL="https://app.example.test",
        GYMCTL_PROXY_HOPS=1,  # behind one load balancer, as deployed
    )


@pytest.fixture
def mailbox(tmp_path):
    """The folder the app's mail lands in (read it with gymctl.providers.mail.read_mailbox)."""
    return tmp_path / "mailbox"


@pytest.fixture
def app(settings, session_factory, clock, mailbox):
    from gymctl.providers.mail import MailboxMailer
    from webhooks.app import create_app

    mailer = MailboxMailer(mailbox, settings.mail_from, clock=clock)
    return create_app(settings, session_factory=session_factory, clock=clock, mailer=mailer)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def fake_gym():
    """The external gym system's fake (tests/bridge) on loopback, for the route suites."""
    from tests.bridge.fake_gym import FakeGym

    server = FakeGym()
    yield server
    server.close()


@pytest.fixture
def suite_app(settings, session_factory, clock, mailbox, card_server, tmp_path, fake_gym):
    """The route suites' app (tests/api/suite.py): the permission matrix and the cross-tenant
    probes; `card_server` comes from the requesting module (tests/billing/conftest.py)."""
    from tests.api.suite import build_app

    return build_app(settings, session_factory, clock, mailbox, card_server, tmp_path, fake_gym)


def wait_for_a_lock_wait(
    engine: Engine,
    timeout: float = 10.0,
    *,
    rival: threading.Thread | None = None,
    count: int = 1,
) -> None:
    """Return once a session of the test database waits on a lock (PostgreSQL; `count` of them
    when a chain of waits is the scene): the moment a race test lets the holder go. With
    `rival`, also once that thread has ended without waiting (it lost the race before reaching
    the lock)."""
    deadline = time.monotonic() + timeout
    with engine.connect() as probe:
        while time.monotonic() < deadline:
            if rival is not None and not rival.is_alive():
                return
            waiting = probe.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
            probe.rollback()
            if waiting >= count:
                return
            time.sleep(0.02)
    raise AssertionError("nothing waited on a lock")
