"""Push delivery: a small interface, and the local implementation of the embedded default.

No vendor is wired yet (the spec names none); a real one (APNs, FCM) implements `PushProvider`.
The local provider appends each message to `<GYMCTL_HOME>/push/outbox.jsonl` (the token shown
only as its digest) and answers `unregistered` for tokens it was told are gone, as APNs and FCM
do for an uninstalled app.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

Outcome = Literal["sent", "unregistered"]


@dataclass(frozen=True)
class PushMessage:
    app_id: str
    platform: str
    token: str
    title: str
    body: str
    data: dict[str, Any] = field(default_factory=dict)


class PushProvider(Protocol):
    def send(self, message: PushMessage) -> Outcome:
        """Deliver one message; `unregistered` when the token is no longer valid."""
        ...


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class LocalPushProvider:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.unregistered: set[str] = set()
        self.sent: list[PushMessage] = []
        self._lock = threading.Lock()

    def send(self, message: PushMessage) -> Outcome:
        if message.token in self.unregistered:
            return "unregistered"
        line = {
            "appId": message.app_id,
            "platform": message.platform,
            "tokenSha256": token_digest(message.token),
            "title": message.title,
            "body": message.body,
            "data": message.data,
        }
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            with (self.folder / "outbox.jsonl").open("a", encoding="utf-8") as out:
                out.write(json.dumps(line, sort_keys=True) + "\n")
            self.sent.append(message)
        return "sent"


def push_provider_from_settings(settings: Any) -> PushProvider:
    return LocalPushProvider(settings.home / "push")
