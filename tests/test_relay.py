"""The outbox relay: at least once, in id order, all or nothing per batch, failures recorded; no
transaction open while the sink is called, each batch committed as it is delivered."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gymctl.clock import FixedClock
from gymctl.config import ConfigError
from gymctl.events import EventKind, emit
from gymctl.models import OutboxEvent
from gymctl.providers.event_sink import HttpSink, JsonLinesSink, SinkError, sink_from_url
from gymctl.relay import relay_events
from tests.factories import emit_committed


def _emit_three(session: Session, clock: FixedClock) -> list[int]:
    org = uuid.uuid4()
    gym, member = str(uuid.uuid4()), str(uuid.uuid4())
    events = [
        emit(session, EventKind.domain, "gym.created", at=clock.now(), aggregate_type="gym",
             aggregate_id=gym, organization_id=org, payload={"name": "North"}),
        emit(session, EventKind.analytics, "member.joined", at=clock.now(),
             aggregate_type="member", aggregate_id=member, payload={"plan": "monthly"}),
        emit(session, EventKind.audit, "gym.renamed", at=clock.now(), aggregate_type="gym",
             aggregate_id=gym, organization_id=org, payload={"secret_note": "PAYLOAD-MARKER"}),
    ]  # fmt: skip
    session.flush()
    return [event.id for event in events]


def _rows(session: Session, ids: list[int]) -> list[OutboxEvent]:
    session.expire_all()
    query = select(OutboxEvent).where(OutboxEvent.id.in_(ids)).order_by(OutboxEvent.id)
    return list(session.scalars(query))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.embedded
def test_relay_delivers_in_id_order_once_and_marks_delivered(
    session: Session, session_factory: sessionmaker[Session], clock: FixedClock, tmp_path: Path
) -> None:
    ids = _emit_three(session, clock)
    path = tmp_path / "nested" / "events.jsonl"

    result = relay_events(session_factory, JsonLinesSink(path), now=clock.now())

    assert (result.delivered, result.failed, result.error) == (3, 0, None)
    lines = _lines(path)
    assert [line["id"] for line in lines] == sorted(ids) == ids
    assert lines[0]["aggregateType"] == "gym"
    assert lines[0]["payload"] == {"name": "North"}
    assert lines[0]["occurredAt"] == clock.now().isoformat()
    assert lines[1]["organizationId"] is None
    assert all(row.delivered_at == clock.now() and row.attempts == 1 for row in _rows(session, ids))

    again = relay_events(session_factory, JsonLinesSink(path), now=clock.now())

    assert (again.delivered, again.failed) == (0, 0)
    assert len(_lines(path)) == 3


@pytest.mark.embedded
def test_relay_runs_in_bounded_batches_and_continues_next_run(
    session: Session, session_factory: sessionmaker[Session], clock: FixedClock, tmp_path: Path
) -> None:
    ids = _emit_three(session, clock)
    sink = JsonLinesSink(tmp_path / "events.jsonl")

    first = relay_events(session_factory, sink, now=clock.now(), batch_size=1, max_batches=2)
    second = relay_events(session_factory, sink, now=clock.now(), batch_size=1, max_batches=2)

    assert (first.delivered, second.delivered) == (2, 1)
    assert [line["id"] for line in _lines(tmp_path / "events.jsonl")] == ids


@pytest.mark.embedded
def test_an_unexpected_sink_error_keeps_payload_out_of_last_error(
    session: Session, session_factory: sessionmaker[Session], clock: FixedClock
) -> None:
    ids = _emit_three(session, clock)

    class LeakySink:
        def deliver(self, events: list[dict]) -> None:
            raise ValueError(f"cannot send {events[-1]['payload']}")

    result = relay_events(session_factory, LeakySink(), now=clock.now())

    assert (result.delivered, result.failed) == (0, 3)
    assert "PAYLOAD-MARKER" not in (result.error or "")
    rows = _rows(session, ids)
    assert all(row.delivered_at is None and row.attempts == 1 for row in rows)
    assert all(row.last_error == "ValueError from the sink" for row in rows)


Server = Callable[[int], tuple[str, list[dict]]]


@pytest.fixture
def http_server() -> Iterator[Server]:
    """Start loopback HTTP servers answering POSTs with `status`; each records the bodies."""
    servers: list[ThreadingHTTPServer] = []

    def start(status: int) -> tuple[str, list[dict]]:
        bodies: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/events", bodies

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_failing_http_sink_delivers_nothing_then_a_working_one_gets_all_in_order(
    session: Session, session_factory: sessionmaker[Session], clock: FixedClock, http_server: Server
) -> None:
    ids = _emit_three(session, clock)
    failing_url, _ = http_server(500)

    failed = relay_events(session_factory, HttpSink(failing_url), now=clock.now())

    assert (failed.delivered, failed.failed) == (0, 3)
    rows = _rows(session, ids)
    assert all(row.delivered_at is None and row.attempts == 1 for row in rows)
    assert all("answered 500" in (row.last_error or "") for row in rows)
    assert all("PAYLOAD-MARKER" not in (row.last_error or "") for row in rows)

    working_url, bodies = http_server(204)
    delivered = relay_events(session_factory, sink_from_url(working_url), now=clock.now())

    assert (delivered.delivered, delivered.failed) == (3, 0)
    assert len(bodies) == 1
    assert [event["id"] for event in bodies[0]["events"]] == ids
    assert bodies[0]["events"][2]["payload"] == {"secret_note": "PAYLOAD-MARKER"}
    assert all(row.delivered_at == clock.now() and row.attempts == 2 for row in _rows(session, ids))


def test_sink_is_chosen_by_url_scheme(tmp_path: Path) -> None:
    file_sink = sink_from_url((tmp_path / "e.jsonl").as_uri())
    assert isinstance(file_sink, JsonLinesSink)
    assert file_sink.path == tmp_path / "e.jsonl"
    assert isinstance(sink_from_url("https://capture.example.test/in"), HttpSink)
    with pytest.raises(ConfigError, match="unsupported scheme 'ftp'"):
        sink_from_url("ftp://example.test/x")


def test_http_sink_error_names_no_credentials() -> None:
    sink = HttpSink("http://user:hunter2@127.0.0.1:9/in?token=abc", timeout=0.5)
    with pytest.raises(SinkError, match="failed: ConnectError") as raised:
        sink.deliver([{"id": 1}])
    assert "hunter2" not in str(raised.value)
    assert "abc" not in str(raised.value)


@pytest.fixture
def committed_factory(committed_database: str) -> Iterator[sessionmaker[Session]]:
    """Sessions that commit for real, on PostgreSQL and on an embedded default file."""
    from gymctl.db import get_engine, release_engine
    from gymctl.db import session_factory as factory_of

    yield factory_of(get_engine(committed_database))
    release_engine(committed_database)


def test_no_transaction_is_open_while_the_sink_is_called(
    committed_database: str, committed_factory: sessionmaker[Session], clock: FixedClock
) -> None:
    """A writer that comes while the sink is slow is not held behind it. On the embedded default
    the relay's transaction held the database's one write lock through the call (in one thread
    a second writer is refused outright: SecondWriterError)."""
    first = emit_committed(committed_database, 1)
    written_during_delivery: list[int] = []

    class SlowSink:
        def deliver(self, events: list[dict]) -> None:
            if not written_during_delivery:
                written_during_delivery.extend(emit_committed(committed_database, 1))

    first_run = relay_events(committed_factory, SlowSink(), now=clock.now())
    next_run = relay_events(committed_factory, SlowSink(), now=clock.now())

    assert (first_run.delivered, next_run.delivered) == (1, 1)
    with committed_factory() as session:
        rows = _rows(session, first + written_during_delivery)
        assert [row.delivered_at for row in rows] == [clock.now(), clock.now()]


def test_a_relay_killed_midway_keeps_the_batches_it_delivered(
    committed_database: str, committed_factory: sessionmaker[Session], clock: FixedClock
) -> None:
    """Each batch is marked as it is delivered: a relay killed at its third batch redelivers that
    one only (at least once), where one transaction for the run forgot the first two too."""
    ids = emit_committed(committed_database, 3)
    calls: list[list[int]] = []

    class DyingSink:
        def deliver(self, events: list[dict]) -> None:
            calls.append([event["id"] for event in events])
            if len(calls) == 3:
                raise KeyboardInterrupt  # the process stopped (not a sink error)

    with pytest.raises(KeyboardInterrupt):
        relay_events(committed_factory, DyingSink(), now=clock.now(), batch_size=1)

    with committed_factory() as session:
        rows = _rows(session, ids)
        assert [row.delivered_at is not None for row in rows] == [True, True, False]
        assert [row.attempts for row in rows] == [1, 1, 0]
    sink = JsonLinesSinkRecorder()
    assert relay_events(committed_factory, sink, now=clock.now()).delivered == 1
    assert sink.ids == ids[2:]


class JsonLinesSinkRecorder:
    """A sink that keeps the ids it was given."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    def deliver(self, events: list[dict]) -> None:
        self.ids.extend(event["id"] for event in events)
