"""gunicorn's sync worker, answering gunicorn's own refusals (a request line or headers over
its limits, a malformed request) in the API's JSON envelope instead of gunicorn's HTML page:
clients parse every error body as `{"code", "message"}`."""

from __future__ import annotations

import json

from gunicorn import util
from gunicorn.workers.sync import SyncWorker

CODES = {
    400: "bad_request",
    403: "forbidden",
    414: "request_line_too_long",
    417: "expectation_failed",
    431: "headers_too_large",
    500: "internal_error",
    501: "transfer_coding_unsupported",
}


def write_json_error(sock, status_int: int, reason: str, _mesg: str) -> None:
    """gunicorn's util.write_error with a JSON body (its message, which may echo the request,
    is left out)."""
    body = json.dumps({"code": CODES.get(status_int, "bad_request"), "message": reason.lower()})
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, (head + body).encode("latin1"))


class JsonErrorWorker(SyncWorker):
    def init_process(self) -> None:
        # The worker's error path calls util.write_error by name; in this worker process it
        # writes JSON. (The master never answers requests.)
        util.write_error = write_json_error
        super().init_process()
