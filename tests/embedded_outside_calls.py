"""A detector of outside calls made while the embedded default's write lock is held.

On SQLite every write transaction begins BEGIN IMMEDIATE (gymctl.db._sqlite_begin), so a thread
that calls an outside system inside one holds every writer of every process for the call
(decisions s41/s42: no write lock is held while an outside system answers). While active, the
detector wraps the low-level doors (httpx, http.client: the bridge's client, smtplib,
botocore) and the embedded default's own
stand-ins for the peers (the mailbox for SMTP, the push outbox, the folder store for S3, the
local identity admin): a call made by a thread that holds the lock
(`gymctl.db._sqlite_writers`) is recorded with its target and the gymctl/webhooks/daemons
frames that led to it. Loopback fakes and stand-ins count: they stand for real peers.
"""

from __future__ import annotations

import functools
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from gymctl import db

OWN_FRAMES = ("/gymctl/", "/webhooks/", "/daemons/")


@dataclass(frozen=True)
class OutsideCall:
    door: str
    target: str
    stack: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.door} -> {self.target}\n    " + "\n    ".join(self.stack)


@dataclass
class Detector:
    calls: list[OutsideCall] = field(default_factory=list)  # made holding the lock
    reached: list[str] = field(default_factory=list)  # every door called, lock or not
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _inside: threading.local = field(default_factory=threading.local)

    def note(self, door: str, target: str) -> None:
        """Record the call if this thread holds the write lock (a wrapped door calling another
        wrapped door, the folder store's put through its own helpers, counts once)."""
        thread = threading.get_ident()
        with self._guard:
            self.reached.append(door)
        with db._sqlite_writers_guard:
            holds = thread in db._sqlite_writers.values()
        if not holds:
            return
        with self._guard:
            self.calls.append(OutsideCall(door, target, _own_stack()))

    def report(self) -> str:
        return "\n".join(str(call) for call in self.calls)

    def doors(self) -> set[str]:
        """The doors reached (the walk called the peer at all: a silent area proves nothing)."""
        return set(self.reached)


def _own_stack(limit: int = 8) -> tuple[str, ...]:
    frames = [
        f"{frame.filename.split('/work/main/')[-1]}:{frame.lineno} {frame.name}"
        for frame in traceback.extract_stack()[:-3]
        if any(part in frame.filename for part in OWN_FRAMES) and "/.venv/" not in frame.filename
    ]
    return tuple(frames[-limit:])


def _wrap(
    detector: Detector, door: str, original: Callable[..., Any], target: Callable[..., str]
) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(detector._inside, "depth", 0)
        if depth == 0:
            detector.note(door, _safe(target, args, kwargs))
        detector._inside.depth = depth + 1
        try:
            return original(*args, **kwargs)
        finally:
            detector._inside.depth = depth

    return wrapped


def _safe(target: Callable[..., str], args: tuple, kwargs: dict) -> str:
    try:
        return target(*args, **kwargs)
    except Exception:  # the record is a hint, never a failure of the call
        return "?"


def _doors() -> list[tuple[Any, str, str, Callable[..., str]]]:
    """(owner, attribute, door name, target of a call) for every door to wrap."""
    import http.client
    import smtplib

    import httpx
    from botocore.endpoint import Endpoint

    from gymctl.providers.identity_admin import LocalIdentityAdmin
    from gymctl.providers.mail import MailboxMailer
    from gymctl.providers.push import LocalPushProvider
    from gymctl.providers.storage import FolderObjectStore

    def request_url(_self, request, *a, **k) -> str:
        return f"{request.method} {request.url}"

    def http_target(self, method, url, *a, **k) -> str:
        return f"{method} {self.host}:{self.port}{url}"

    def smtp_host(self, *a, **k) -> str:
        return f"smtp {getattr(self, '_host', '?')}"

    def boto_url(self, operation_model, request_dict, *a, **k) -> str:
        return f"{operation_model.name} {request_dict.get('url', self.host)}"

    def folder_key(self, key, *a, **k) -> str:
        return f"folder store {key}"

    doors: list[tuple[Any, str, str, Callable[..., str]]] = [
        (httpx.Client, "send", "httpx", request_url),
        (httpx.AsyncClient, "send", "httpx async", request_url),
        (http.client.HTTPConnection, "request", "http.client", http_target),
        (smtplib.SMTP, "send_message", "smtp", smtp_host),
        (smtplib.SMTP, "sendmail", "smtp", smtp_host),
        (Endpoint, "make_request", "boto", boto_url),
        (MailboxMailer, "send", "mailbox (SMTP stand-in)", lambda s, e, *a, **k: f"mail {e.to}"),
        (LocalPushProvider, "send", "push outbox (push stand-in)", lambda *a, **k: "push"),
        (LocalIdentityAdmin, "find_account", "local identity admin", lambda *a, **k: "find"),
        (LocalIdentityAdmin, "create_invitation", "local identity admin", lambda *a, **k: "invite"),
    ]
    doors += [
        (FolderObjectStore, name, "folder store (S3 stand-in)", folder_key)
        for name in ("put", "get", "head", "delete")
    ]
    return doors


@pytest.fixture
def factory(tmp_path, migrated_sqlite):
    """Sessions on a SQLite file of their own, committed for real (BEGIN IMMEDIATE each): the
    `session` fixtures hold one outer transaction, which blinds the detector."""
    from sqlalchemy.orm import sessionmaker

    url = migrated_sqlite(tmp_path / "gymctl.db")
    return sessionmaker(bind=db.get_engine(url), expire_on_commit=False)


@pytest.fixture
def mailer(tmp_path, clock):
    """The embedded default's mailbox (SMTP stand-in) in the test's folder."""
    from gymctl.providers.mail import MailboxMailer

    return MailboxMailer(tmp_path / "mailbox", "gym <no-reply@gym.example>", clock=clock)


@contextmanager
def watching() -> Iterator[Detector]:
    """The detector, active for the block."""
    detector = Detector()
    with pytest.MonkeyPatch.context() as patch:
        for owner, name, door, target in _doors():
            patch.setattr(owner, name, _wrap(detector, door, getattr(owner, name), target))
        yield detector
