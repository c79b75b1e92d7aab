"""The bridge client's keep-alive connections (client.ConnectionPool): a connection the server
closed while it sat idle is never reused, and one that broke mid-answer is dropped, so the next
call gets a fresh one instead of a spurious failure."""

from __future__ import annotations

import socket
import threading

import pytest

from gymctl.bridge.client import (
    CallFailure,
    ConnectionPool,
    ExternalCallError,
    ExternalGymClient,
    Throttle,
)

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]"


def _read_request(connection: socket.socket) -> bool:
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = connection.recv(65536)
        if not chunk:
            return False
        request += chunk
    return True


class OneShotServer:
    """Answers `answers[n]` on its n-th connection (one request each), then closes that
    connection without saying so, as a server ending an idle keep-alive connection does."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = answers
        self.connections = 0
        self.closed = threading.Semaphore(0)
        self.sock = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/api/public"

    def _serve(self) -> None:
        for answer in self.answers:
            connection, _ = self.sock.accept()
            self.connections += 1
            with connection:
                _read_request(connection)
                connection.sendall(answer)
            self.closed.release()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server(request):
    made = OneShotServer(request.param)
    yield made
    made.close()


@pytest.mark.parametrize("server", [[ANSWER, ANSWER]], indirect=True)
def test_a_connection_the_server_closed_while_idle_is_not_reused(server):
    with ExternalGymClient(server.url, "key", throttle=Throttle(None)) as client:
        assert client.locations() == []
        assert server.closed.acquire(timeout=5)
        assert client.locations() == []
    assert server.connections == 2


def test_a_call_timed_out_mid_answer_leaves_its_connection_behind():
    """The rest of a late answer must never be read as the answer to the next call."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve() -> None:
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

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/api/public"
    with ExternalGymClient(url, "key", throttle=Throttle(None), timeout=0.2) as client:
        with pytest.raises(ExternalCallError) as late:
            client.locations()
        assert late.value.kind == CallFailure.timeout
        assert client.locations() == []
    listener.close()
    assert len(accepted) == 2


def test_each_thread_keeps_its_own_connection():
    """A dispatcher process shares one pool between its threads: two threads calling at once
    each have their own keep-alive connection (an http.client connection is not thread-safe)."""
    accepted = []
    listener = socket.create_server(("127.0.0.1", 0))

    def keep_alive(connection: socket.socket) -> None:
        with connection:
            while _read_request(connection):
                connection.sendall(ANSWER)

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(connection)
            threading.Thread(target=keep_alive, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/api/public"
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
    listener.close()
    assert answers == [[]] * 6
    assert len(accepted) == 2


def test_a_plain_proxy_gets_the_whole_url_and_the_credentials_its_url_carries(monkeypatch):
    """As httpx.Client would: HTTP_PROXY=http://user:pass@host:port."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen = []

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            request = b""
            while b"\r\n\r\n" not in request:
                request += connection.recv(65536)
            seen.append(request.decode("latin-1"))
            connection.sendall(ANSWER)

    threading.Thread(target=serve, daemon=True).start()
    proxy = f"http://bridge%40ops:s3cret@127.0.0.1:{listener.getsockname()[1]}"
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with ExternalGymClient("http://gym.invalid/api/public", "key",
                           throttle=Throttle(None)) as client:  # fmt: skip
        assert client.locations() == []
    listener.close()
    (request,) = seen
    assert request.startswith("GET http://gym.invalid:80/api/public/v3/locations HTTP/1.1\r\n")
    assert "Proxy-Authorization: Basic YnJpZGdlQG9wczpzM2NyZXQ=\r\n" in request  # bridge@ops:s3cret
