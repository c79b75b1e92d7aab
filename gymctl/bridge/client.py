"""The external gym system's public v3 API, header `api-key`: exactly the calls of spec B 4.6.

There is deliberately no method for priced memberships, recurring payments, trials, leads,
messages or deletes: what the bridge may never write, it cannot write. Every call first waits
on the organization's throttle (its token bucket). Errors name the route and the status only,
never a body (it may echo a member's address) or the key.
"""

from __future__ import annotations

import base64
import http.client
import json as jsonlib
import select
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import date
from typing import Any

import certifi

from gymctl.models.bridge import EXTERNAL_ID_LENGTH

USER_AGENT = "gymctl-bridge/1 (+https://gymctl.example/bridge)"  # some default agents get 403


class CallFailure:
    """Kinds of failed calls, each handled differently by the dispatcher."""

    unauthorized = "unauthorized"  # 401: the key is bad or revoked; the connection errors
    rate_limited = "rate_limited"  # 429: the organization's sending pauses, the op is not charged
    server = "server"  # 5xx: the op backs off on the ladder
    timeout = "timeout"  # no answer in time: the call may or may not have happened
    network = "network"  # refused, reset: backs off like a 5xx
    rejected = "rejected"  # 4xx: the same request will be refused again
    not_found = "not_found"  # 404: callers decide (an already-cancelled booking is done)


class ExternalCallError(Exception):
    def __init__(
        self, kind: str, route: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        self.kind = kind
        self.route = route
        self.status = status
        self.retry_after = retry_after
        super().__init__(f"{route}: {status if status is not None else kind}")

    @property
    def transient(self) -> bool:
        """Worth another attempt later (the ladder)."""
        return self.kind in (CallFailure.server, CallFailure.timeout, CallFailure.network)


class Throttle:
    """At most `rate` calls in any one-second window at the wire, for the lock holder's
    organization. Two rules: starts are 1/rate apart (smooth pacing), and a call starts only a
    window after the call `rate` places back has finished. A call leaves somewhere between its
    start and its answer, so the second rule holds whatever the delays in between (a new
    connection, a busy machine). A new holder starts as if `rate` calls had just finished: the
    previous holder's last calls left before it let go (or died). A key check outside the
    lock (`taking_over=False`) starts free."""

    def __init__(
        self,
        rate: float | None,
        *,
        taking_over: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._monotonic = monotonic
        self._sleep = sleep
        now = monotonic()
        self._interval = 0.0 if rate is None else 1.0 / rate
        self._capacity = 0 if rate is None else max(1, int(rate))
        self._window = 0.0 if rate is None else self._capacity / rate
        self._finished: deque[float] = deque(maxlen=self._capacity or None)
        if taking_over:
            self._finished.extend([now] * self._capacity)
        self._next = now
        self.calls = 0
        # Called when a call must wait for its turn: the dispatcher writes what it holds then,
        # in time it would otherwise sleep.
        self.before_wait: Callable[[], None] | None = None

    def acquire(self) -> None:
        start = self._next
        if self._capacity and len(self._finished) == self._capacity:
            start = max(start, self._finished[0] + self._window)
        wait = start - self._monotonic()
        if wait > 0 and self.before_wait is not None:
            self.before_wait()
            wait = start - self._monotonic()
        if wait > 0:
            self._sleep(wait)
        self._next = self._monotonic() + self._interval
        self.calls += 1

    def release(self) -> None:
        """The call is answered (or failed): it has left."""
        if self._capacity:
            self._finished.append(self._monotonic())

    def pause(self, seconds: float) -> None:
        """After a 429: no call for `seconds`."""
        self._next = max(self._next, self._monotonic() + seconds)


@dataclass(frozen=True)
class Hit:
    """One searchUser result; native when it is a user of the connected account itself."""

    external_id: str
    native: bool


class ConnectionPool:
    """Keep-alive HTTP/1.1 connections to the external system, one per thread that calls it
    (a dispatcher thread serves one organization at a time), shared by every organization a
    dispatcher process serves: a connection per organization run would cost a TLS context
    (20 ms of CPU, measured) and a connect.

    On the standard library's http.client rather than httpx: the bridge's calls are small JSON
    requests to one origin, and httpx's layers (its models, httpcore, h11) cost 333 against
    139 microseconds of CPU per request here (measured), which is most of a dispatcher's
    work. Like httpx.Client, it verifies TLS against certifi's roots, goes through the proxy
    the environment names for the base URL's scheme (HTTPS_PROXY, HTTP_PROXY) unless NO_PROXY
    exempts the host, and never reuses a connection the server has closed."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        parts = urllib.parse.urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        proxy = None
        if self._host and not urllib.request.proxy_bypass(self._host):
            proxy = urllib.request.getproxies().get(parts.scheme)
        self._proxy = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}") \
            if proxy else None  # fmt: skip
        self._proxy_headers: dict[str, str] = {}
        if self._proxy is not None and self._proxy.username:
            user = urllib.parse.unquote(self._proxy.username)
            password = urllib.parse.unquote(self._proxy.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._proxy_headers = {"Proxy-Authorization": f"Basic {token}"}
        self._context = ssl.create_default_context(cafile=certifi.where()) if self._https else None
        self._local = threading.local()
        self._made: list[http.client.HTTPConnection] = []
        self._guard = threading.Lock()

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """Status, headers and body of one request to `path` under the base URL. Raises
        TimeoutError, or OSError / http.client.HTTPException when the connection failed."""
        connection = self._connection(timeout)
        target = self._prefix + path
        if self._proxy is not None and not self._https:  # a plain proxy takes the whole URL
            target = f"http://{self._host}:{self._port}{target}"
            headers = {**headers, **self._proxy_headers}
        try:
            connection.request(method, target, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except BaseException:
            connection.close()  # half a request or answer: never reused
            raise
        if response.will_close:
            connection.close()  # the next request connects afresh
        return response.status, response.headers, data

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
        elif connection.sock is not None and _readable(connection.sock):
            connection.close()  # readable while idle: the server closed it (or sent junk)
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        return connection

    def _connect(self) -> http.client.HTTPConnection:
        host, port = self._host, self._port
        if self._proxy is not None:
            host, port = self._proxy.hostname or "", self._proxy.port or 80
        connection: http.client.HTTPConnection
        if self._https:
            connection = http.client.HTTPSConnection(host, port, context=self._context)
            if self._proxy is not None:
                connection.set_tunnel(self._host, self._port, headers=self._proxy_headers)
        else:
            connection = http.client.HTTPConnection(host, port)
        with self._guard:
            self._made.append(connection)
        return connection

    def close(self) -> None:
        with self._guard:
            for connection in self._made:
                connection.close()
            self._made.clear()

    def __enter__(self) -> ConnectionPool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class ExternalGymClient:
    """One organization's client: its key, its throttle, the process's connections."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        throttle: Throttle,
        timeout: float = 10.0,
        account_id: str | None = None,
        pool: ConnectionPool | None = None,
    ) -> None:
        self._owns_pool = pool is None
        self._pool = pool or ConnectionPool(base_url)
        self._headers = {
            "api-key": api_key, "User-Agent": USER_AGENT, "Accept": "application/json",
        }  # fmt: skip
        self._json_headers = {**self._headers, "Content-Type": "application/json"}
        self._timeout = timeout
        self._throttle = throttle
        self.account_id = account_id
        # Entered right before every request and left when its answer is in: the dispatcher
        # ends any transaction still open there, checks the organization is still connected
        # (it may raise to stop the call) and holds it so until the answer (a disconnect waits).
        self.around_call: Callable[[], AbstractContextManager[None]] | None = None

    def close(self) -> None:
        if self._owns_pool:
            self._pool.close()

    def __enter__(self) -> ExternalGymClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- reads ------------------------------------------------------------------------------

    def locations(self) -> list[dict[str, Any]]:
        return self._call("GET", "/locations")

    def membership_types(self) -> list[dict[str, Any]]:
        return self._call("GET", "/membershipTypes")

    def users(self, page: int) -> tuple[list[dict[str, Any]], int | None]:
        """One page of the account's users and the next page number (None at the end)."""
        body = self._call("GET", "/users", params={"page": page}, unwrap=False)
        rows = _data(body)
        if not isinstance(rows, list) or not all(
            isinstance(row, dict) and _is_id(row.get("id")) for row in rows
        ):  # odd, as a class is (schedule_rows): kept, the roster held a user "None"
            raise ExternalCallError(CallFailure.server, "/users")
        meta = body.get("meta", {}) if isinstance(body, dict) else {}
        return rows, meta.get("next_page")

    def user_memberships(self, user_id: str) -> list[dict[str, Any]]:
        return self._call("GET", "/users/memberships", params={"user_id": user_id})

    def schedule(self, from_date: date, to_date: date) -> list[dict[str, Any]]:
        params = {
            "from_date": from_date.isoformat(),
            "to_date": to_date.isoformat(),
            "registration_details": 1,
        }
        return schedule_rows(self._call("GET", "/schedule", params=params))

    def search_user(self, *, email: str | None = None, phone: str | None = None) -> list[Hit]:
        params = {"email": email} if email is not None else {"phone": phone}
        rows = self._call("GET", "/searchUser", params=params)
        hits = []
        for row in rows:
            native = row.get("type", "user") == "user" and str(row.get("box_id")) == str(
                self.account_id
            )
            if native or _is_id(row.get("id") if isinstance(row, dict) else None):
                hits.append(Hit(external_id=external_id_of("GET /searchUser", row), native=native))
            # another account's hit is only counted, never linked: one with an odd id is left out
        return hits

    # -- writes -----------------------------------------------------------------------------

    def create_user(self, fields: dict[str, Any]) -> str:
        """Never sends the welcome email: the member already has the platform's."""
        body = {**fields, "send_welcome_email": False}
        return self._created("/users", body)

    def update_user(self, user_id: str, fields: dict[str, Any]) -> None:
        self._call("PATCH", "/users", json={"user_id": user_id, **fields})

    def assign_membership(
        self, user_id: str, membership_type_id: str, start: date, end: date | None
    ) -> str:
        """The free non-recurring bridge membership type only (the connection names it)."""
        body = {
            "user_id": user_id,
            "membership_type_id": membership_type_id,
            "start_date": start.isoformat(),
            "end_date": end.isoformat() if end else None,
        }
        return self._created("/users/memberships", body)

    def cancel_membership(self, membership_user_id: str) -> None:
        self._call(
            "POST", "/users/memberships/cancel", json={"membership_user_id": membership_user_id}
        )

    def book_session(self, user_id: str, schedule_id: str, membership_user_id: str) -> str:
        body = {
            "user_id": user_id,
            "schedule_id": schedule_id,
            "membership_user_id": membership_user_id,
        }
        return self._created("/schedule/bookSession", body)

    def cancel_booking(self, schedule_user_id: str) -> None:
        self._call(
            "POST", "/schedule/cancelUserBooking", json={"schedule_user_id": schedule_user_id}
        )

    def change_coach(self, schedule_id: str, coach_id: str) -> None:
        """PATCH /v3/schedule carries the coach change only."""
        self._call("PATCH", "/schedule", json={"schedule_id": schedule_id, "coach_id": coach_id})

    # -- transport --------------------------------------------------------------------------

    def _created(self, path: str, body: dict[str, Any]) -> str:
        """POST a write whose answer names what it made: that id (external_id_of)."""
        return external_id_of(f"POST {path}", self._call("POST", path, json=body))

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: dict[str, Any] | None = None,
        unwrap: bool = True,
    ) -> Any:
        route = f"{method} /v3{path}"
        target = f"/v3{path}?{urllib.parse.urlencode(params)}" if params else f"/v3{path}"
        content = None if json is None else _dumps(json)  # before the throttle: may raise
        headers = self._headers if content is None else self._json_headers
        self._throttle.acquire()
        try:
            # After the wait for our turn: the last moment.
            with self.around_call() if self.around_call is not None else nullcontext():
                status, response_headers, data = self._pool.request(
                    method, target, content, headers, self._timeout
                )
        except TimeoutError:
            raise ExternalCallError(CallFailure.timeout, route) from None
        except (OSError, http.client.HTTPException):
            raise ExternalCallError(CallFailure.network, route) from None
        finally:
            self._throttle.release()
        if status >= 400:
            raise ExternalCallError(_kind(status), route, status, _retry_after(response_headers))
        try:
            body = jsonlib.loads(data) if data else {}
        except ValueError:
            raise ExternalCallError(CallFailure.server, route, status) from None
        return _data(body) if unwrap else body


def user_pages(client: ExternalGymClient) -> Iterator[list[dict[str, Any]]]:
    """GET /v3/users, one page of rows at a time. A next page that does not move past the one
    just read (the same page again, an earlier one, not a number; digits as text count) is an
    odd answer of the external system, refused as its failure: the roster import and drift
    asked for the same page for ever, the import holding the organization's dispatch lock."""
    page = 1
    while True:
        rows, following = client.users(page)
        yield rows
        if following is None:
            return
        if isinstance(following, str) and following.isascii() and following.isdigit():
            following = int(following)
        if isinstance(following, bool) or not isinstance(following, int) or following <= page:
            raise ExternalCallError(CallFailure.server, "/users")
        page = following


def external_id_of(route: str, answer: Any) -> str:
    """The id a write answered, or one a read names for a link (a user a search found, an
    assignment or a registration a retry looks for): a number or a non-empty text that
    fits a link (EXTERNAL_ID_LENGTH). Anything else (null, absent, an object, true) is an odd
    answer of the external system, refused as its failure, as an unreadable body is: the op is
    retried the way a write whose answer was lost is (a create searches first), rather than a
    link keeping the id "None"."""
    found = answer.get("id") if isinstance(answer, dict) else None
    if not _is_id(found):
        raise ExternalCallError(CallFailure.server, route)
    return str(found)


def schedule_rows(answer: Any) -> list[dict[str, Any]]:
    """The classes GET /schedule answered, each with an id, its day as a date and its
    registrations with theirs (and a user_id key: a null one, say a lead's registration, names
    no member of ours and is passed over). Anything else is an odd answer of the external
    system, refused as its failure (the poll stays due), as an odd write answer is
    (external_id_of): kept, a null id became the class "None" and a day that is no date failed
    every booking into the class; left out, the class would be taken for one removed there."""
    if not isinstance(answer, list) or not all(map(_is_class, answer)):
        raise ExternalCallError(CallFailure.server, "/schedule")
    return answer


def _is_class(row: Any) -> bool:
    if not isinstance(row, dict) or not _is_id(row.get("id")) or not _is_day(row.get("date")):
        return False
    registrations = row.get("registrations", [])
    return isinstance(registrations, list) and all(
        isinstance(r, dict) and _is_id(r.get("id")) and "user_id" in r for r in registrations
    )


def _is_day(value: Any) -> bool:
    try:
        return isinstance(value, str) and date.fromisoformat(value).isoformat() == value
    except ValueError:
        return False


def _is_id(found: Any) -> bool:
    if isinstance(found, int) and not isinstance(found, bool):
        return True
    return isinstance(found, str) and bool(found.strip()) and len(found) <= EXTERNAL_ID_LENGTH


def _data(body: Any) -> Any:
    """The usual envelope is {"data": ...}; one route answers with the bare value."""
    if isinstance(body, dict) and "data" in body:
        return body["data"]
    return body


def _kind(status: int) -> str:
    if status == 401:
        return CallFailure.unauthorized
    if status == 429:
        return CallFailure.rate_limited
    if status == 404:
        return CallFailure.not_found
    if status >= 500:
        return CallFailure.server
    return CallFailure.rejected


# The longest pause a 429's Retry-After is taken at: "1e400" read as infinity stopped every call
# of the process for good (and its timedelta raised out of the dispatcher's pass).
MAX_RETRY_AFTER = 3600.0


def _retry_after(headers: http.client.HTTPMessage) -> float | None:
    """Retry-After in seconds (a number: the external system sends no HTTP dates), at most
    MAX_RETRY_AFTER; None for anything else (nan, a negative, not a number)."""
    try:
        seconds = float(headers["Retry-After"])
    except (TypeError, ValueError):
        return None
    return min(seconds, MAX_RETRY_AFTER) if seconds >= 0 else None  # nan compares False


def _readable(sock: socket.socket) -> bool:
    """Without waiting; poll(), unlike select(), takes any descriptor number."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _dumps(value: Any) -> bytes:
    """As httpx encodes a json= body: compact UTF-8, no NaN."""
    return jsonlib.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
