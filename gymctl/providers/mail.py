"""Outgoing email: SMTP in production, a mailbox folder of .eml files in the embedded default.

A setting (GYMCTL_SMTP_URL) picks one. Both build the same RFC 5322 message, so what a test reads
from the mailbox is what an SMTP server would have received. Nothing here logs addresses.
"""

from __future__ import annotations

import contextlib
import os
import smtplib
import ssl
import uuid
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import SMTP as SMTP_POLICY
from email.policy import default as default_policy
from email.utils import format_datetime, make_msgid, parseaddr
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from gymctl import clock as default_clock
from gymctl.clock import Clock
from gymctl.errors import ConfigError

if TYPE_CHECKING:
    from gymctl.config import Settings

SMTP_TIMEOUT = 10.0
TAG_HEADER = "X-Gymctl-Tag"
# Headers the mailer writes itself; a caller may not replace them through `headers`.
_OWN_HEADERS = frozenset({"from", "to", "subject", "date", "message-id", "mime-version"})


class MailError(RuntimeError):
    """A message was not handed over. The message names the server and the cause, never the
    credentials or the recipients, so it is safe to log and to store. `permanent`: the server
    refused it for good (5xx for every recipient): sent again, it is refused again."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class OutgoingEmail:
    to: str | tuple[str, ...]
    subject: str
    text: str
    html: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    tag: str | None = None

    @property
    def recipients(self) -> tuple[str, ...]:
        return (self.to,) if isinstance(self.to, str) else tuple(self.to)


class Mailer(Protocol):
    def send(self, email: OutgoingEmail) -> str:
        """Hand the message over or raise MailError; returns its Message-ID."""
        ...


def build_message(email: OutgoingEmail, sender: str, clock: Clock) -> EmailMessage:
    """The RFC 5322 message: plain text, plus an HTML alternative when given.

    Raises ValueError on a bad header (e.g. a line break in the subject): that is bad input, not
    a delivery failure, and retrying would not help.
    """
    if not email.recipients:
        raise ValueError("an email needs at least one recipient")
    own = sorted(name for name in email.headers if name.lower() in _OWN_HEADERS)
    if own:
        raise ValueError(f"headers set by the mailer itself: {', '.join(own)}")
    message = EmailMessage(policy=default_policy)
    message["From"] = sender
    message["To"] = ", ".join(email.recipients)
    message["Subject"] = email.subject
    message["Date"] = format_datetime(clock.now())
    message["Message-ID"] = make_msgid(domain=_domain(sender))
    if email.tag:
        message[TAG_HEADER] = email.tag
    for name, value in email.headers.items():
        message[name] = value
    message.set_content(email.text)
    if email.html is not None:
        message.add_alternative(email.html, subtype="html")
    return message


def _domain(sender: str) -> str:
    address = parseaddr(sender)[1]
    return address.rpartition("@")[2] or "gymctl.localhost"


class SmtpMailer:
    """Production: one SMTP session per message (smtplib), plain, STARTTLS or implicit TLS.

    URL: smtp://user:pass@host:port?starttls=true, or smtps://... for implicit TLS. User and
    password are optional and percent-decoded.
    """

    def __init__(
        self,
        url: str,
        sender: str,
        *,
        clock: Clock = default_clock,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = SMTP_TIMEOUT,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps"):
            raise ConfigError(
                f"GYMCTL_SMTP_URL: unsupported scheme {parts.scheme or '(none)'!r}; "
                "use smtp://host:port or smtps://host:port"
            )
        if not parts.hostname:
            raise ConfigError("GYMCTL_SMTP_URL: no host")
        try:
            port = parts.port
        except ValueError:
            raise ConfigError("GYMCTL_SMTP_URL: invalid port") from None
        query = parse_qs(parts.query)
        self.implicit_tls = parts.scheme == "smtps"
        self.starttls = query.get("starttls", ["false"])[-1].lower() in ("1", "true", "yes")
        self.host = parts.hostname
        self.port = port or (465 if self.implicit_tls else 25)
        self._user = unquote(parts.username) if parts.username else None
        self._password = unquote(parts.password) if parts.password else None
        self.sender = sender
        self.timeout = timeout
        self._clock = clock
        self._ssl_context = ssl_context

    def send(self, email: OutgoingEmail) -> str:
        message = build_message(email, self.sender, self._clock)
        tls = self.implicit_tls or self.starttls
        context = (self._ssl_context or ssl.create_default_context()) if tls else None
        try:
            if self.implicit_tls:
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                    self.host, self.port, timeout=self.timeout, context=context
                )
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
            with smtp:
                if self.starttls and not self.implicit_tls:
                    smtp.starttls(context=context)
                if self._user is not None:
                    smtp.login(self._user, self._password or "")
                smtp.send_message(message)
        except (smtplib.SMTPException, OSError) as error:
            # Neither str(error) nor the chained cause: a refused-recipients error carries the
            # addresses, and an AUTH exchange may echo what was sent.
            raise MailError(
                f"SMTP {self.where} failed: {_describe(error)}", permanent=_refused_for_good(error)
            ) from None
        return str(message["Message-ID"])

    @property
    def where(self) -> str:
        scheme = "smtps" if self.implicit_tls else "smtp"
        return f"{scheme}://{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"SmtpMailer({self.where!r})"


def _refused_for_good(error: BaseException) -> bool:
    """A 5xx answer to the message, or to each of its recipients; anything else (a 4xx, a
    server down, a timeout) may pass later."""
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        replies = [code for code, _ in error.recipients.values()]
    elif isinstance(error, smtplib.SMTPResponseException):
        replies = [error.smtp_code]
    else:
        return False
    return bool(replies) and all(500 <= code < 600 for code in replies)


def _describe(error: BaseException) -> str:
    if isinstance(error, smtplib.SMTPResponseException):
        return f"{type(error).__name__} {error.smtp_code}"
    return type(error).__name__


class MailboxMailer:
    """The embedded default: each message is an .eml file in a folder (GYMCTL_HOME/mailbox).

    Files are named `<utc timestamp>-<uuid>.eml`, so a sorted listing is in sending order (to the
    microsecond), and appear whole or not at all (written to a hidden temp file, then renamed).
    """

    def __init__(self, folder: Path | str, sender: str, *, clock: Clock = default_clock) -> None:
        self.folder = Path(folder)
        self.sender = sender
        self._clock = clock

    def send(self, email: OutgoingEmail) -> str:
        message = build_message(email, self.sender, self._clock)
        data = message.as_bytes(policy=SMTP_POLICY)
        stamp = self._clock.now().strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"{stamp}-{uuid.uuid4().hex}.eml"
        temp = self.folder / f".{name}.tmp"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with temp.open("xb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, self.folder / name)
        except OSError as error:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            raise MailError(
                f"write to mailbox {self.folder} failed: {error.strerror or type(error).__name__}"
            ) from None
        return str(message["Message-ID"])

    def __repr__(self) -> str:
        return f"MailboxMailer({str(self.folder)!r})"


def read_mailbox(folder: Path | str) -> list[EmailMessage]:
    """Every delivered message in the folder, oldest first (for tests and the quick start)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    parser = BytesParser(policy=default_policy)
    messages: list[EmailMessage] = []
    for path in sorted(folder.glob("*.eml")):
        if path.name.startswith("."):
            continue
        with path.open("rb") as file:
            messages.append(parser.parse(file))
    return messages


def mailer_from_settings(settings: Settings, *, clock: Clock = default_clock) -> Mailer:
    """SMTP when GYMCTL_SMTP_URL is set, otherwise the mailbox under GYMCTL_HOME."""
    if settings.smtp_url is not None and settings.smtp_url.get_secret_value():
        return SmtpMailer(settings.smtp_url.get_secret_value(), settings.mail_from, clock=clock)
    return MailboxMailer(settings.mailbox_path, settings.mail_from, clock=clock)
