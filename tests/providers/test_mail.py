"""Mail: SMTP against a real aiosmtpd server on loopback, and the embedded default's mailbox."""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Iterator
from datetime import timedelta
from email.parser import BytesParser
from email.policy import default as default_policy
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gymctl.clock import FixedClock
from gymctl.config import ConfigError, Settings
from gymctl.providers.mail import (
    TAG_HEADER,
    MailboxMailer,
    MailError,
    OutgoingEmail,
    SmtpMailer,
    mailer_from_settings,
    read_mailbox,
)
from tests.conftest import NOW

SENDER = "gymctl <no-reply@gymctl.example.test>"
PASSWORD = "s3cr3t/p@ss"  # percent-encoded in URLs: s3cr3t%2Fp%40ss
URL_PASSWORD = "s3cr3t%2Fp%40ss"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Recorder:
    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []

    async def handle_DATA(self, server, session, envelope: Envelope) -> str:
        self.envelopes.append(envelope)
        return "250 OK"

    def message(self, index: int = -1):
        return BytesParser(policy=default_policy).parsebytes(self.envelopes[index].content)


class Logins:
    """Accepts one user; remembers what was tried."""

    def __init__(self) -> None:
        self.tried: list[tuple[str, str]] = []

    def __call__(self, server, session, envelope, mechanism, auth_data) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        login, password = auth_data.login.decode(), auth_data.password.decode()
        self.tried.append((login, password))
        # handled=False: let the server answer 535 itself on a refusal.
        return AuthResult(success=(login, password) == ("mailer", PASSWORD), handled=False)


def start(handler: Recorder, **kwargs) -> Controller:
    controller = Controller(handler, hostname="127.0.0.1", port=free_port(), **kwargs)
    controller.start()
    return controller


@pytest.fixture
def smtp() -> Iterator[tuple[Controller, Recorder]]:
    recorder = Recorder()
    controller = start(recorder)
    yield controller, recorder
    controller.stop()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1: (cert, key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - timedelta(days=1))
        .not_valid_after(NOW + timedelta(days=3650))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return context


def client_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate[0]))


def invitation(**fields) -> OutgoingEmail:
    return OutgoingEmail(
        **{
            "to": "invitee@example.test",
            "subject": "You are invited to Gym 1",
            "text": "Open the link to join.",
            **fields,
        }
    )


def test_smtp_delivers_subject_recipients_body_and_headers(smtp) -> None:
    controller, recorder = smtp
    mailer = SmtpMailer(f"smtp://127.0.0.1:{controller.port}", SENDER, clock=FixedClock(NOW))
    email = invitation(
        to=("invitee@example.test", "copy@example.test"),
        html="<p>Open the <a href='https://x.example.test'>link</a>.</p>",
        headers={"X-Invitation-Id": "inv_1"},
        tag="invitation",
    )

    message_id = mailer.send(email)

    [envelope] = recorder.envelopes
    assert envelope.mail_from == "no-reply@gymctl.example.test"
    assert envelope.rcpt_tos == ["invitee@example.test", "copy@example.test"]
    message = recorder.message()
    assert message["Subject"] == "You are invited to Gym 1"
    assert message["Message-ID"] == message_id
    assert message_id.startswith("<")
    assert message_id.endswith("@gymctl.example.test>")
    assert message["X-Invitation-Id"] == "inv_1"
    assert message[TAG_HEADER] == "invitation"
    assert message["Date"] == "Sat, 21 Nov 2026 09:00:00 +0000"
    assert message.get_body(("plain",)).get_content().strip() == "Open the link to join."
    assert "href='https://x.example.test'" in message.get_body(("html",)).get_content()


def test_smtp_text_only_message_is_single_part(smtp) -> None:
    controller, recorder = smtp
    SmtpMailer(f"smtp://127.0.0.1:{controller.port}", SENDER).send(invitation())
    message = recorder.message()
    assert not message.is_multipart()
    assert message.get_content_type() == "text/plain"


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_smtp_logs_in_when_the_url_has_credentials() -> None:
    recorder, logins = Recorder(), Logins()
    controller = start(recorder, authenticator=logins, auth_require_tls=False)
    try:
        url = f"smtp://mailer:{URL_PASSWORD}@127.0.0.1:{controller.port}"
        SmtpMailer(url, SENDER).send(invitation())
        assert logins.tried == [("mailer", PASSWORD)]
        assert len(recorder.envelopes) == 1

        wrong = f"smtp://mailer:wrong-{URL_PASSWORD}@127.0.0.1:{controller.port}"
        with pytest.raises(MailError) as caught:
            SmtpMailer(wrong, SENDER).send(invitation())
        assert "SMTPAuthenticationError 535" in str(caught.value)
        assert "wrong" not in str(caught.value)
        assert "mailer" not in str(caught.value)
        assert len(recorder.envelopes) == 1
    finally:
        controller.stop()


def test_smtp_starttls(certificate) -> None:
    recorder = Recorder()
    controller = start(recorder, tls_context=server_tls(certificate), require_starttls=True)
    try:
        url = f"smtp://127.0.0.1:{controller.port}?starttls=true"
        SmtpMailer(url, SENDER, ssl_context=client_tls(certificate)).send(invitation())
        assert len(recorder.envelopes) == 1

        # Without STARTTLS this server refuses the message; the error says so, nothing more.
        with pytest.raises(MailError) as caught:
            SmtpMailer(f"smtp://127.0.0.1:{controller.port}", SENDER).send(invitation())
        assert "invitee@example.test" not in str(caught.value)
        assert len(recorder.envelopes) == 1
    finally:
        controller.stop()


def test_smtps_implicit_tls(certificate) -> None:
    recorder = Recorder()
    controller = start(recorder, ssl_context=server_tls(certificate))
    try:
        mailer = SmtpMailer(
            f"smtps://127.0.0.1:{controller.port}", SENDER, ssl_context=client_tls(certificate)
        )
        mailer.send(invitation())
        assert recorder.message()["Subject"] == "You are invited to Gym 1"
        # An untrusted certificate is a failure, not a silent downgrade.
        with pytest.raises(MailError, match="SSLCertVerificationError"):
            SmtpMailer(f"smtps://127.0.0.1:{controller.port}", SENDER).send(invitation())
    finally:
        controller.stop()


def test_server_down_is_a_mail_error_without_credentials() -> None:
    port = free_port()  # nothing listens here
    mailer = SmtpMailer(f"smtp://mailer:{URL_PASSWORD}@127.0.0.1:{port}", SENDER)
    with pytest.raises(MailError) as caught:
        mailer.send(invitation())
    message = str(caught.value)
    assert f"smtp://127.0.0.1:{port}" in message
    assert "ConnectionRefusedError" in message
    for secret in (PASSWORD, URL_PASSWORD, "mailer:", "invitee@example.test"):
        assert secret not in message
    assert caught.value.__cause__ is None
    assert URL_PASSWORD not in repr(mailer)


def test_refused_recipient_is_a_mail_error_without_the_address() -> None:
    class Refuse(Recorder):
        async def handle_RCPT(self, server, session, envelope, address, options) -> str:
            return "550 no such user"

    refusing = start(Refuse())
    try:
        with pytest.raises(MailError) as caught:
            SmtpMailer(f"smtp://127.0.0.1:{refusing.port}", SENDER).send(invitation())
        assert "SMTPRecipientsRefused" in str(caught.value)
        assert "invitee@example.test" not in str(caught.value)
    finally:
        refusing.stop()


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:25", "smtp://", "smtp://127.0.0.1:notaport", "127.0.0.1:25"],
)
def test_bad_smtp_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError):
        SmtpMailer(url, SENDER)


def test_smtp_url_defaults() -> None:
    assert SmtpMailer("smtp://mail.example.test", SENDER).port == 25
    secure = SmtpMailer("smtps://mail.example.test", SENDER)
    assert (secure.port, secure.implicit_tls) == (465, True)
    submission = SmtpMailer("smtp://u:p@mail.example.test:587?starttls=true", SENDER)
    assert (submission.port, submission.starttls) == (587, True)


def test_headers_the_mailer_owns_and_line_breaks_are_refused(tmp_path: Path) -> None:
    mailer = MailboxMailer(tmp_path, SENDER)
    with pytest.raises(ValueError, match="Subject"):
        mailer.send(invitation(headers={"Subject": "other"}))
    with pytest.raises(ValueError):
        mailer.send(invitation(subject="Hi\r\nBcc: victim@example.test"))
    with pytest.raises(ValueError):
        mailer.send(invitation(to=()))
    assert list(tmp_path.iterdir()) == []


def test_mailbox_writes_parseable_eml_files_in_order(tmp_path: Path) -> None:
    clock = FixedClock(NOW)
    folder = tmp_path / "mailbox"
    mailer = MailboxMailer(folder, SENDER, clock=clock)

    first = mailer.send(invitation(tag="invitation", html="<p>Join</p>"))
    clock.set(NOW + timedelta(seconds=1))
    second = mailer.send(invitation(to="other@example.test", subject="Second"))

    names = sorted(path.name for path in folder.iterdir())
    assert len(names) == 2
    assert names[0].startswith("20261121T090000.000000Z-")
    assert names[0].endswith(".eml")
    assert names[1].startswith("20261121T090001.000000Z-")
    messages = read_mailbox(folder)
    assert [m["Message-ID"] for m in messages] == [first, second]
    assert messages[0]["To"] == "invitee@example.test"
    assert messages[0][TAG_HEADER] == "invitation"
    assert messages[0]["From"] == SENDER
    assert messages[0].get_body(("plain",)).get_content().strip() == "Open the link to join."
    assert messages[0].get_body(("html",)).get_content().strip() == "<p>Join</p>"
    assert messages[1]["Subject"] == "Second"
    raw = (folder / names[0]).read_bytes()
    assert b"\r\n" in raw  # RFC 5322 line endings


def test_mailbox_ignores_temp_files_and_missing_folder(tmp_path: Path) -> None:
    assert read_mailbox(tmp_path / "nothing-here") == []
    (tmp_path / ".20261121T090000.000000Z-x.eml.tmp").write_bytes(b"Subject: half\r\n")
    MailboxMailer(tmp_path, SENDER).send(invitation())
    assert len(read_mailbox(tmp_path)) == 1


def test_mailbox_write_failure_is_a_mail_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(MailError, match="write to mailbox"):
        MailboxMailer(blocker / "mailbox", SENDER).send(invitation())


def test_mailer_from_settings_picks_smtp_or_the_mailbox(tmp_path: Path) -> None:
    embedded = mailer_from_settings(Settings(GYMCTL_HOME=str(tmp_path)))
    assert isinstance(embedded, MailboxMailer)
    assert embedded.folder == tmp_path / "mailbox"
    assert embedded.sender == "gymctl <no-reply@gymctl.localhost>"

    configured = mailer_from_settings(
        Settings(
            GYMCTL_HOME=str(tmp_path),
            GYMCTL_SMTP_URL=f"smtp://mailer:{URL_PASSWORD}@mail.example.test:2525?starttls=true",
            GYMCTL_MAIL_FROM=SENDER,
        )
    )
    assert isinstance(configured, SmtpMailer)
    assert (configured.host, configured.port, configured.starttls) == (
        "mail.example.test",
        2525,
        True,
    )
    assert configured.sender == SENDER
    assert URL_PASSWORD not in repr(configured)


def test_mailer_from_settings_delivers_to_the_mailbox(tmp_path: Path) -> None:
    mailer = mailer_from_settings(Settings(GYMCTL_HOME=str(tmp_path)))
    mailer.send(invitation())
    [message] = read_mailbox(Settings(GYMCTL_HOME=str(tmp_path)).mailbox_path)
    assert message["Subject"] == "You are invited to Gym 1"
