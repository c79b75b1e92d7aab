"""A fake of the external gym system's public v3 API on loopback (a real HTTP server in a thread).

It keeps accounts (one per api-key) with users, memberships, classes and registrations, answers
in the usual {"data": ...} envelope except GET /v3/locations (a bare list, as one real route
does), records every call with its arrival time, and can answer 401, 429, 5xx, time out (before
or after applying the change) or be slow. What it can tell went wrong is kept for the tests:
a second user with one email, a second booking of one class, a second bridge membership, a
welcome email asked for, a booking refused because its class was full (max_users), each
user's applied changes in order, and each class's bookings and cancels in order.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from socketserver import StreamRequestHandler, ThreadingTCPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.loopback import serve_in_thread

BASE = "/api/public/v3"


@dataclass
class Call:
    at: float
    account: str | None
    method: str
    path: str
    query: dict[str, str]
    body: dict[str, Any] | None
    agent: str = ""
    status: int = 0


@dataclass
class Account:
    box_id: str
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    memberships: dict[str, dict[str, Any]] = field(default_factory=dict)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    registrations: dict[str, dict[str, Any]] = field(default_factory=dict)
    membership_types: list[dict[str, Any]] = field(default_factory=list)
    foreign_hits: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Fault:
    route: str | None  # "POST /v3/users"; None: any call
    kind: str  # "status", "timeout_before", "timeout_after"
    status: int = 503
    retry_after: float | None = None
    times: int = 1


class _StampingServer(ThreadingTCPServer):
    """A thread per connection, each stamped with its accept time (see `_serve`)."""

    daemon_threads = True

    def __init__(self, *args) -> None:
        self.accepted: dict[Any, float] = {}
        super().__init__(*args)

    def process_request(self, request, client_address) -> None:
        self.accepted[request] = time.monotonic()
        super().process_request(request, client_address)


_REASONS = {status.value: status.phrase for status in HTTPStatus}
_MAX_LINE = 65536  # a request line or header line longer than this is malformed
_MAX_HEADERS = 100


class _BadRequest(Exception):
    pass


class FakeGym:
    def __init__(self, *, timeout_delay: float = 1.5) -> None:
        self.accounts: dict[str, Account] = {}
        self.calls: list[Call] = []
        self.duplicates: list[tuple[str, str]] = []
        self.welcome_emails: list[str] = []
        self.effects: dict[str, list[str]] = {}
        self.class_effects: dict[str, list[str]] = {}  # per class: book:<user>, cancel:<user>
        self.full: list[tuple[str, str]] = []  # (class, user) refused: the class was full
        self.faults: list[Fault] = []
        self.chaos_rate = 0.0
        self.chaos_random = random.Random(7)
        self.delay = 0.0
        self.on_call = None  # called with each Call as it arrives, before it is answered
        self.timeout_delay = timeout_delay
        self.stuck_pages = False  # GET /v3/users names the page just read as the next (a bug)
        self.page_numbers_as_text = False  # GET /v3/users's next_page as "2", not 2
        # route -> the id its answer names instead of the real one (null, "", an object): an
        # odd answer; the write itself is made.
        self.odd_ids: dict[str, Any] = {}
        self._ids = itertools.count(1000)
        self._lock = threading.RLock()
        self._server = _StampingServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = serve_in_thread(self._server)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/api/public"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- set-up ---------------------------------------------------------------------------

    def add_account(self, api_key: str, box_id: str = "777", *, free_types: int = 1) -> Account:
        account = Account(box_id=box_id)
        account.membership_types = [
            {"id": 50, "name": "Monthly", "price": 300, "is_recurring": True},
            *(
                {"id": 60 + n, "name": f"Bridge {n}", "price": 0, "is_recurring": False}
                for n in range(free_types)
            ),
        ]
        self.accounts[api_key] = account
        return account

    def add_user(self, account: Account, email: str, phone: str | None = None, **fields) -> str:
        user_id = str(next(self._ids))
        account.users[user_id] = {
            "first_name": "Existing",
            "last_name": "Member",
            "email": email,
            "phone": phone,
            "active": True,
            **fields,
        }
        return user_id

    def add_class(self, account: Account, day: str, **fields) -> str:
        class_id = str(next(self._ids))
        account.classes[class_id] = {
            "date": day,
            "time": "07:00",
            "end_time": "08:00",
            "name": "WOD",
            "coach_id": 5,
            "location_id": 1,
            "max_users": 20,
            **fields,
        }
        return class_id

    def add_registration(self, account: Account, user_id: str, class_id: str) -> str:
        """A booking made at the external system itself (its own app or desk)."""
        registration_id = str(next(self._ids))
        account.registrations[registration_id] = {
            "user_id": user_id,
            "schedule_id": class_id,
            "membership_user_id": "0",
        }
        return registration_id

    def fail(self, route: str | None, status: int = 503, *, times: int = 1, retry_after=None):
        self.faults.append(Fault(route, "status", status, retry_after, times))

    def time_out(self, route: str | None, *, after_apply: bool, times: int = 1) -> None:
        kind = "timeout_after" if after_apply else "timeout_before"
        self.faults.append(Fault(route, kind, times=times))

    # -- what the tests read --------------------------------------------------------------

    def calls_to(self, route: str) -> list[Call]:
        method, path = route.split(" ", 1)
        return [c for c in self.calls if c.method == method and c.path == path]

    def busiest_second(self, box_id: str, since: float = 0.0) -> int:
        """The most calls of one account that arrived within any one second (a 20 ms margin
        absorbs loopback scheduling jitter between the sender's pacing and our arrival
        stamp)."""
        times = sorted(c.at for c in self.calls if c.account == box_id and c.at >= since)
        most, start = 0, 0
        for end, at in enumerate(times):
            while at - times[start] >= 1.0 - 0.02:
                start += 1
            most = max(most, end - start + 1)
        return most

    # -- the server -----------------------------------------------------------------------

    def _handler(self):
        fake = self

        # A minimal HTTP/1.1 server rather than http.server's: in the benchmark the fake shares
        # two cores with what is measured, and BaseHTTPRequestHandler spends most of its CPU
        # per request parsing headers with email.parser and writing the answer in pieces.
        # This reads the request line and headers with plain readline() on the buffered
        # socket, and sends headers and body in one write.
        class Handler(StreamRequestHandler):
            # TCP_NODELAY: an answer is one write, but one longer than a segment must not have
            # its last piece held back by Nagle's algorithm until the client's delayed ACK.
            disable_nagle_algorithm = True

            def handle(self) -> None:
                try:
                    while self._one_request():
                        pass
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (e.g. it gave up on a timeout)

            def _one_request(self) -> bool:
                """Serves one request; False when the connection is to be closed."""
                line = self.rfile.readline(_MAX_LINE + 1)
                if not line:
                    return False  # the client closed the connection
                # The first request of a connection counts from its accept: spawning the
                # handler thread must not make it look later than it was sent.
                arrived = fake._server.accepted.pop(self.request, None) or time.monotonic()
                try:
                    method, target, version, headers, body = self._read_request(line)
                except _BadRequest:
                    self._send(400, b'{"message": "bad request"}', {}, close=True)
                    return False
                if method not in ("GET", "POST", "PATCH"):  # the routes' methods, as before
                    self._send(501, b'{"message": "unsupported method"}', {}, close=True)
                    return False
                connection = headers.get("connection", "").lower()
                close = connection == "close" or (
                    version == "HTTP/1.0" and connection != "keep-alive"
                )
                self._serve(arrived, method, target, headers, body, close)
                return not close

            def _read_request(self, line: bytes):
                words = line.decode("latin-1").split()
                if len(line) > _MAX_LINE or len(words) != 3 or not words[2].startswith("HTTP/"):
                    raise _BadRequest
                method, target, version = words
                headers: dict[str, str] = {}
                for _ in range(_MAX_HEADERS + 1):
                    line = self.rfile.readline(_MAX_LINE + 1)
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, colon, value = line.decode("latin-1").partition(":")
                    if not colon or len(line) > _MAX_LINE:
                        raise _BadRequest
                    headers.setdefault(name.strip().lower(), value.strip())  # the first wins
                else:
                    raise _BadRequest  # too many headers
                try:
                    length = int(headers.get("content-length") or 0)
                    raw = self.rfile.read(length) if length > 0 else b""
                    body = json.loads(raw) if raw else None
                except ValueError:  # a bad length or not JSON
                    raise _BadRequest from None
                return method, target, version, headers, body

            def _serve(self, arrived, method, target, headers, body, close) -> None:
                # An absolute URI when the fake is used as an HTTP proxy: its path is the path.
                parsed = urlparse(target)
                query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
                path = parsed.path.removeprefix("/api/public")
                account = fake.accounts.get(headers.get("api-key") or "")
                call = Call(arrived, account.box_id if account else None, method, path,
                            query, body, headers.get("user-agent", ""))  # fmt: skip
                with fake._lock:
                    fake.calls.append(call)
                if fake.on_call is not None:
                    fake.on_call(call)
                status, answer, extra = fake._answer(account, call)
                call.status = status
                self._send(status, json.dumps(answer).encode(), extra, close=close)

            def _send(self, status: int, data: bytes, extra: dict[str, str], *, close) -> None:
                head = [
                    f"HTTP/1.1 {status} {_REASONS.get(status, '')}",
                    "Server: fake-gym/1",  # the headers http.server sent, so clients parse as
                    f"Date: {formatdate(usegmt=True)}",  # many as before
                    "Content-Type: application/json",
                    f"Content-Length: {len(data)}",
                    *(f"{name}: {value}" for name, value in extra.items()),
                    *(["Connection: close"] if close else []),
                    "\r\n",
                ]
                self.request.sendall("\r\n".join(head).encode("latin-1") + data)

        return Handler

    def _fault_for(self, route: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.route in (None, route) and fault.times > 0:
                    fault.times -= 1
                    return fault
            if self.chaos_rate and self.chaos_random.random() < self.chaos_rate:
                kind = self.chaos_random.choice(
                    ["500", "503", "429", "timeout_before", "timeout_after"]
                )
                if kind.isdigit():
                    return Fault(route, "status", int(kind), retry_after=0.2)
                return Fault(route, kind)
        return None

    def _answer(self, account: Account | None, call: Call) -> tuple[int, Any, dict[str, str]]:
        if account is None:
            return 401, {"statusCode": 401, "message": "Unauthorized"}, {}
        if call.agent.startswith(("python-", "curl/")):  # as the real one does to default agents
            return 403, {"message": "Forbidden"}, {}
        route = f"{call.method} {call.path}"
        fault = self._fault_for(route)
        if fault is not None and fault.kind == "status":
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else {}
            return fault.status, {"statusCode": fault.status, "message": "injected"}, headers
        if fault is not None and fault.kind == "timeout_before":
            time.sleep(self.timeout_delay)
            return 504, {"message": "too late"}, {}
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            status, answer = self._apply(account, call)
        if fault is not None and fault.kind == "timeout_after":
            time.sleep(self.timeout_delay)
        if status >= 400 or call.path == "/v3/locations":
            return status, answer, {}
        if route == "GET /v3/users":
            rows, more = answer
            page = int(call.query.get("page", 1))
            following = page if self.stuck_pages else page + 1 if more else None
            if self.page_numbers_as_text and following is not None:
                following = str(following)
            return status, {"data": rows, "meta": {"next_page": following}}, {}
        if route in self.odd_ids:
            odd = self.odd_ids[route]
            if isinstance(answer, dict):
                answer = {**answer, "id": odd}
            elif isinstance(answer, list):
                answer = [{**row, "id": odd} for row in answer]
        return status, {"data": answer}, {}

    def _effect(self, user_id: str, what: str) -> None:
        self.effects.setdefault(user_id, []).append(what)

    def _apply(self, account: Account, call: Call) -> tuple[int, Any]:
        body, query = call.body or {}, call.query
        route = f"{call.method} {call.path}"
        if route == "GET /v3/locations":
            return 200, [{"id": 1, "name": "Main hall", "box_id": int(account.box_id)}]
        if route == "GET /v3/membershipTypes":
            return 200, account.membership_types
        if route == "GET /v3/users":
            page = int(query.get("page", 1))
            ids = sorted(account.users)
            rows = [{"id": int(i), **account.users[i]} for i in ids[(page - 1) * 2 : page * 2]]
            return 200, (rows, len(ids) > page * 2)  # two a page: the import must follow pages
        if route == "GET /v3/searchUser":
            field_name, value = next(iter(query.items()))
            hits = [
                {"id": int(i), "box_id": int(account.box_id), "type": "user"}
                for i, user in account.users.items()
                if value and user.get(field_name) == value
            ]
            hits += [h for h in account.foreign_hits if h.get(field_name) == value]
            return 200, [{k: h[k] for k in ("id", "box_id", "type")} for h in hits]
        if route == "POST /v3/users":
            if body.get("send_welcome_email") is not False:
                self.welcome_emails.append(body.get("email") or "")
            if any(u["email"] == body.get("email") for u in account.users.values()):
                self.duplicates.append(("user", body.get("email") or ""))
                return 422, {"message": "email exists"}
            user_id = str(next(self._ids))
            fields = {k: v for k, v in body.items() if k != "send_welcome_email"}
            account.users[user_id] = {**fields, "active": True}
            self._effect(user_id, "created")
            return 201, {"id": int(user_id)}
        if route == "PATCH /v3/users":
            user_id = str(body.get("user_id"))
            if user_id not in account.users:
                return 404, {"message": "no user"}
            account.users[user_id].update({k: v for k, v in body.items() if k != "user_id"})
            self._effect(user_id, f"updated:{body.get('first_name')}")
            return 200, {"id": int(user_id)}
        if route == "GET /v3/users/memberships":
            user_id = str(query.get("user_id"))
            return 200, [
                {"id": int(i), **m}
                for i, m in account.memberships.items()
                if m["user_id"] == user_id
            ]
        if route == "POST /v3/users/memberships":
            user_id = str(body.get("user_id"))
            if user_id not in account.users:
                return 404, {"message": "no user"}
            type_id = str(body.get("membership_type_id"))
            if any(
                m["user_id"] == user_id and m["active"] and str(m["membership_type_id"]) == type_id
                for m in account.memberships.values()
            ):
                self.duplicates.append(("membership", user_id))
            membership_id = str(next(self._ids))
            account.memberships[membership_id] = {
                "user_id": user_id,
                "membership_type_id": int(type_id),
                "active": True,
                "start_date": body.get("start_date"),
                "end_date": body.get("end_date"),
            }
            self._effect(user_id, "membership")
            return 201, {"id": int(membership_id)}
        if route == "POST /v3/users/memberships/cancel":
            membership = account.memberships.get(str(body.get("membership_user_id")))
            if membership is None or not membership["active"]:
                return 404, {"message": "no such active membership"}
            membership["active"] = False
            self._effect(membership["user_id"], "membership_cancelled")
            return 200, {}
        if route == "POST /v3/schedule/bookSession":
            user_id, class_id = str(body.get("user_id")), str(body.get("schedule_id"))
            membership = account.memberships.get(str(body.get("membership_user_id")))
            if class_id not in account.classes or membership is None:
                return 422, {"message": "invalid"}
            if membership["user_id"] != user_id or not membership["active"]:
                return 422, {"message": "membership"}
            booked = [r for r in account.registrations.values() if r["schedule_id"] == class_id]
            if any(r["user_id"] == user_id for r in booked):
                self.duplicates.append(("booking", f"{user_id}:{class_id}"))
                return 422, {"message": "already booked"}
            if len(booked) >= int(account.classes[class_id]["max_users"]):
                self.full.append((class_id, user_id))
                return 422, {"message": "class full"}
            registration_id = str(next(self._ids))
            account.registrations[registration_id] = {
                "user_id": user_id,
                "schedule_id": class_id,
                "membership_user_id": str(body.get("membership_user_id")),
            }
            self._effect(user_id, f"book:{class_id}")
            self.class_effects.setdefault(class_id, []).append(f"book:{user_id}")
            return 201, {"id": int(registration_id)}
        if route == "POST /v3/schedule/cancelUserBooking":
            registration = account.registrations.pop(str(body.get("schedule_user_id")), None)
            if registration is None:
                return 404, {"message": "not booked"}
            self._effect(registration["user_id"], f"cancel:{registration['schedule_id']}")
            self.class_effects.setdefault(registration["schedule_id"], []).append(
                f"cancel:{registration['user_id']}"
            )
            return 200, {}
        if route == "PATCH /v3/schedule":
            item = account.classes.get(str(body.get("schedule_id")))
            if item is None:
                return 404, {"message": "no class"}
            item["coach_id"] = body.get("coach_id")
            return 200, {}
        if route == "GET /v3/schedule":
            first, last = query["from_date"], query["to_date"]
            return 200, [
                {
                    "id": int(i),
                    "registrations": [
                        {
                            "id": int(r),
                            "user_id": int(reg["user_id"]),
                            "membership_user_id": int(reg["membership_user_id"]),
                        }
                        for r, reg in account.registrations.items()
                        if reg["schedule_id"] == i
                    ],
                    **item,  # a class's own fields win: a test's odd id or registrations
                }
                for i, item in account.classes.items()
                if first <= item["date"] <= last
            ]
        return 404, {"message": "no route"}
