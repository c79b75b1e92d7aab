"""The bridge client's keep-alive connections (client.ConnectionPool): a connection the server
closed while it sat idle is never reused, and one that broke mid-answer is dropped, so the next
call gets a fresh one instead of a spurious failure."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import pytest

from gymctl.bridge.client import (
    CallFailure,
    ConnectionPool,
    ExternalCallError,
    ExternalGymClient,
    Throttle,
)

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]"


def _read_request(connection: socket.socket) -> bytes:
    """One request's head; empty when the client closed the connection."""
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = connection.recv(65536)
        if not chunk:
            return b""
        request += chunk
    return request


@pytest.fixture
def listen():
    """A loopback listener served by `serve(listener)` in a thread; returns its port."""
    listeners = []

    def start(serve: Callable[[socket.socket], None]) -> int:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        threading.Thread(target=serve, args=(listener,), daemon=True).start()
        return listener.getsockname()[1]

    yield start
    for listener in listeners:
        listener.close()


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}/api/public"


def test_a_connection_the_server_closed_while_idle_is_not_reused(listen):
    accepted, closed = [], threading.Semaphore(0)

    def serve(listener: socket.socket) -> None:
        for _ in range(2):  # one request a connection, then closed without saying so
            connection, _ = listener.accept()
            accepted.append(connection)
            with connection:
                _read_request(connection)
                connection.sendall(ANSWER)
            closed.release()

    url = _url(listen(serve))
    with ExternalGymClient(url, "key", throttle=Throttle(None)) as client:
        assert client.locations() == []
        assert closed.acquire(timeout=5)
        assert client.locations() == []
    assert len(accepted) == 2


def test_a_call_timed_out_mid_answer_leaves_its_connection_behind(listen):
    """The rest of a late answer must never be read as the answer to the next call."""
    accepted = []

    def serve(listener: socket.socket) -> None:
        late, _ = listener.accept()
        accepted.append(late)
        _read_request(late)
        late.sendall(ANSWER[:-1])  # all but the last byte of the body, then a stall
        fresh, _ = listener.accept()
        accepted.append(fresh)
        with fresh:
            _read_request(fresh)
            fresh.sendall(ANSWER)
        late.sendall(ANSWER[-1:])
        late.close()

    url = _url(listen(serve))
    with ExternalGymClient(url, "key", throttle=Throttle(None), timeout=0.2) as client:
        with pytest.raises(ExternalCallError) as late:
            client.locations()
        assert late.value.kind == CallFailure.timeout
        assert client.locations() == []
    assert len(accepted) == 2


def test_each_thread_keeps_its_own_connection(listen):
    """A dispatcher process shares one pool between its threads: two threads calling at once
    each have their own keep-alive connection (an http.client connection is not thread-safe)."""
    accepted = []

    def keep_alive(connection: socket.socket) -> None:
        with connection:
            while _read_request(connection):
                connection.sendall(ANSWER)

    def serve(listener: socket.socket) -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(connection)
            threading.Thread(target=keep_alive, args=(connection,), daemon=True).start()

    url = _url(listen(serve))
    together = threading.Barrier(2)
    answers = []

    def calls(pool: ConnectionPool) -> None:
        client = ExternalGymClient(url, "key", throttle=Throttle(None), pool=pool)
        for _ in range(3):
            together.wait(timeout=5)
            answers.append(client.locations())

    with ConnectionPool(url) as pool:
        threads = [threading.Thread(target=calls, args=(pool,)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
    assert answers == [[]] * 6
    assert len(accepted) == 2


def test_a_plain_proxy_gets_the_whole_url_and_the_credentials_its_url_carries(listen, monkeypatch):
    """As httpx.Client would: HTTP_PROXY=http://user:pass@host:port."""
    seen = []

    def serve(listener: socket.socket) -> None:
        connection, _ = listener.accept()
        with connection:
            seen.append(_read_request(connection).decode("latin-1"))
            connection.sendall(ANSWER)

    monkeypatch.setenv("HTTP_PROXY", f"http://bridge%40ops:s3cret@127.0.0.1:{listen(serve)}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with ExternalGymClient("http://gym.invalid/api/public", "key",
                           throttle=Throttle(None)) as client:  # fmt: skip
        assert client.locations() == []
    (request,) = seen
    assert request.startswith("GET http://gym.invalid:80/api/public/v3/locations HTTP/1.1\r\n")
    assert "Proxy-Authorization: Basic YnJpZGdlQG9wczpzM2NyZXQ=\r\n" in request  # bridge@ops:s3cret
