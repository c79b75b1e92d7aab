"""A fake card provider on loopback: the simulator core (gymctl/providers/card_simulator.py), the
same rules as the sandbox, served over real HTTP like the real provider, with faults the tests
script per endpoint and counters of what really happened.

    server.inject(CHARGE, Fault.answer_lost)        # the next charge is made, its answer dropped
    server.inject(GET_PAGE, Fault.error, times=None)  # every read-back answers 503 until cleared
    server.charge_count("attempt-1")                # money moved under that unique id: 0 or 1
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gymctl.providers.card import Terminal
from gymctl.providers.card_http import (
    API_PREFIX,
    CHARGE,
    CREATE_PAGE,
    GET_PAGE,
    LOOKUP_CHARGE,
    REFUND,
    HttpCardProvider,
)
from gymctl.providers.card_simulator import CardSimulator, Charge, CompletedPage, Delivery
from tests.loopback import serve_in_thread

ENDPOINTS = (CREATE_PAGE, GET_PAGE, CHARGE, LOOKUP_CHARGE, REFUND)


class Fault(StrEnum):
    delay = "delay"  # wait `seconds`, then answer normally
    hang = "hang"  # wait `seconds` (past the client's timeout), close unanswered; nothing done
    error = "error"  # answer `status` (a 5xx); nothing done
    drop = "drop"  # close the connection at once, unanswered; nothing done
    answer_lost = "answer_lost"  # do the work (a charge is made), then close unanswered


@dataclass
class _Script:
    fault: Fault
    remaining: int | None  # None: every request until clear_faults()
    seconds: float
    status: int


class FakeCardProvider:
    """Terminals are any positive number (TERMINAL is the provider's example test terminal); a
    page or a token is only known on the terminal that made it."""

    TERMINAL = Terminal("1000", "test2025")
    HANG_SECONDS = 5.0  # far past the clients' test timeouts; cut short by close()

    def __init__(self, state_dir: Path) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.simulator = CardSimulator(state_dir / "card-provider.sqlite3", f"{self.url}/pay/")
        self.errors: list[str] = []  # simulator crashes, answered 500; the fixture fails on any
        self._scripts: dict[str, list[_Script]] = {endpoint: [] for endpoint in ENDPOINTS}
        self._requests: Counter[str] = Counter()
        self._received: dict[str, list[Any]] = {endpoint: [] for endpoint in ENDPOINTS}
        self._lookups_from: dict[str, str] = {}  # asked terminal -> the one that answers
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._clients: list[HttpCardProvider] = []
        self._thread = serve_in_thread(self._server)

    def inject(
        self,
        endpoint: str,
        fault: Fault,
        *,
        times: int | None = 1,
        seconds: float | None = None,
        status: int = 503,
    ) -> None:
        """Apply `fault` to the next `times` requests to `endpoint` (None: all of them until
        clear_faults()). Scripts queue up in order. `seconds`: for delay (default 0.2) and hang
        (default HANG_SECONDS); `status`: for error."""
        if endpoint not in self._scripts:
            raise ValueError(f"not an endpoint of the provider: {endpoint!r}")
        default = self.HANG_SECONDS if fault is Fault.hang else 0.2
        script = _Script(fault, times, default if seconds is None else seconds, status)
        with self._lock:
            self._scripts[endpoint].append(script)

    def answer_lookups_from(self, asked: str, terminal: str) -> None:
        """A charge lookup asked on terminal `asked` is answered with what `terminal` holds, its
        deal reported on `terminal`: a provider that finds a charge on another terminal of the
        merchant than the one asked."""
        with self._lock:
            self._lookups_from[asked] = terminal

    def clear_faults(self) -> None:
        with self._lock:
            for scripts in self._scripts.values():
                scripts.clear()

    def requests(self, endpoint: str) -> int:
        """Requests received on `endpoint`, faulted ones included."""
        with self._lock:
            return self._requests[endpoint]

    def received(self, endpoint: str) -> list[Any]:
        """The JSON bodies received on `endpoint`, numbers with a fraction read as Decimal."""
        with self._lock:
            return list(self._received[endpoint])

    def charges(self, unique_id: str | None = None) -> list[Charge]:
        return self.simulator.charges(unique_id)

    def charge_count(self, unique_id: str) -> int:
        """Times money really moved under `unique_id`: exactly-once means 1."""
        return self.simulator.charge_count(unique_id)

    def complete_page(self, page_id: str, card_number: str, **expiry: int) -> CompletedPage:
        """Finish a hosted page as the member would (card_month=, card_year= optional)."""
        return self.simulator.complete_page(page_id, card_number, **expiry)

    def provider(self, timeout: float = 3.0) -> HttpCardProvider:
        """The real HTTP client pointed here (closed with the server). The default gives a
        loopback answer room on a loaded 2-core machine (a setup page once took over 1 s); a
        test about timeouts passes its own, under HANG_SECONDS."""
        client = HttpCardProvider(self.url, timeout=timeout)
        self._clients.append(client)
        return client

    def close(self) -> None:
        self._closing.set()
        for client in self._clients:
            client.close()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _take(self, endpoint: str, raw: bytes) -> _Script | None:
        """Count the request and take the next scripted fault for its endpoint, if any."""
        try:
            body = json.loads(raw, parse_float=Decimal)
        except ValueError:
            body = None
        with self._lock:
            self._requests[endpoint] += 1
            if endpoint not in self._scripts:
                return None
            self._received[endpoint].append(body)
            scripts = self._scripts[endpoint]
            if not scripts:
                return None
            script = scripts[0]
            if script.remaining is not None:
                script.remaining -= 1
                if script.remaining <= 0:
                    scripts.pop(0)
            return script

    def _answered_on(self, endpoint: str, raw: bytes) -> bytes:
        """The request as the simulator answers it: a lookup on the terminal that answers."""
        if endpoint != LOOKUP_CHARGE:
            return raw
        body = json.loads(raw)
        with self._lock:
            terminal = self._lookups_from.get(str(body.get("TerminalNumber")))
        return (
            raw if terminal is None else json.dumps({**body, "TerminalNumber": terminal}).encode()
        )


def _handler(fake: FakeCardProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            endpoint = urlsplit(self.path).path.removeprefix(API_PREFIX)
            script = fake._take(endpoint, raw)
            raw = fake._answered_on(endpoint, raw)
            fault = script.fault if script else None
            if script is not None and fault in (Fault.delay, Fault.hang):
                fake._closing.wait(script.seconds)
            if fault in (Fault.hang, Fault.drop):
                return  # unanswered: the connection closes with this handler
            if script is not None and fault is Fault.error:
                self._send(script.status, {"Message": "An error has occurred."})
                return
            try:
                answer = fake.simulator.answer(urlsplit(self.path).path, raw)
            except Exception as error:
                fake.errors.append(repr(error))
                self._send(500, {"Message": "simulator error"})
                return
            if answer.delivery is Delivery.never_arrived:
                fake._closing.wait(fake.HANG_SECONDS)  # the timeout test card
                return
            if fault is Fault.answer_lost or answer.delivery is Delivery.answer_lost:
                return
            self._send(answer.status, answer.body)

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass  # request lines would only be noise in test output

    return Handler
