"""Where the relay delivers outbox events: a JSON-lines file (embedded default) or an HTTP
capture endpoint. A setting (GYMCTL_EVENT_SINK) picks one by its URL scheme."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit
from urllib.request import url2pathname

import httpx

from gymctl.errors import ConfigError
from gymctl.providers import http_client


class SinkError(RuntimeError):
    """A batch was not accepted. The message names the sink and the cause, never event content,
    so it is safe to store in outbox_events.last_error and to log."""


class EventSink(Protocol):
    def deliver(self, events: list[dict[str, Any]]) -> None:
        """Deliver the whole batch or raise; a raise means the batch counts as not delivered."""
        ...


class JsonLinesSink:
    """Appends one JSON object per line, flushed and fsynced before `deliver` returns."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def deliver(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        data = "".join(json.dumps(event, ensure_ascii=False) + "\n" for event in events).encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as file:
                start = file.seek(0, os.SEEK_END)
                try:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                except OSError:
                    # All or nothing: a half-written batch would be delivered again after the
                    # retry, so cut the file back to where the batch began.
                    file.truncate(start)
                    raise
        except OSError as error:
            raise SinkError(f"write to {self.path} failed: {error.strerror or error}") from error

    def __repr__(self) -> str:
        return f"JsonLinesSink({str(self.path)!r})"


class HttpSink:
    """POSTs `{"events": [...]}` as JSON; any answer other than 2xx means not delivered."""

    def __init__(self, url: str, client: httpx.Client | None = None, timeout: float = 10) -> None:
        self.url = url
        self.client = client
        self.timeout = timeout

    def deliver(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        try:
            if self.client is not None:
                response = self.client.post(self.url, json={"events": events})
            else:
                with http_client.new_client(timeout=self.timeout) as client:
                    response = client.post(self.url, json={"events": events})
        except httpx.HTTPError as error:
            raise SinkError(f"POST {_redacted(self.url)} failed: {type(error).__name__}") from error
        if not response.is_success:
            raise SinkError(f"POST {_redacted(self.url)} answered {response.status_code}")

    def __repr__(self) -> str:
        return f"HttpSink({_redacted(self.url)!r})"


def _redacted(url: str) -> str:
    """The URL without credentials or query string (which may carry a token)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def sink_from_url(url: str) -> EventSink:
    """file:///path.jsonl -> JsonLinesSink; http(s)://... -> HttpSink."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"GYMCTL_EVENT_SINK: file URL must be local, got host {parts.netloc}")
        return JsonLinesSink(Path(url2pathname(parts.path)))
    if parts.scheme in ("http", "https"):
        return HttpSink(url)
    raise ConfigError(
        f"GYMCTL_EVENT_SINK: unsupported scheme {parts.scheme or '(none)'!r}; "
        "use file:///path.jsonl or http(s)://..."
    )
