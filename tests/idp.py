"""A stand-in identity provider for tests: RSA keys made here, tokens minted here, its key set
and the admin API the toolkit uses served over real HTTP on loopback (with switches for faults)."""

from __future__ import annotations

import functools
import json
import threading
import time
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.loopback import serve_in_thread


@functools.cache
def _private_key(name: str) -> rsa.RSAPrivateKey:
    """RSA keys are slow to make: one per name for the whole test session."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class SigningKey:
    def __init__(self, kid: str, *, name: str | None = None) -> None:
        self.kid = kid
        self.private = _private_key(name or kid)

    @property
    def public_pem(self) -> str:
        return (
            self.private.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )

    def jwk(self) -> dict[str, Any]:
        data = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        return {**data, "kid": self.kid, "alg": "RS256", "use": "sig"}


class IdentityProvider:
    """Mints session tokens and serves, on loopback with the bearer secret checked on every route:
    GET /v1/jwks, and the admin API the toolkit uses (GET /v1/users?email_address=,
    GET /v1/users/{id}, POST /v1/invitations) over an in-memory set of accounts.

    Key-set faults: `.down` answers 503 everywhere; `.jwks_gate.clear()` holds every key-set
    answer until `.jwks_gate.set()` (a slow provider; `.jwks_asked` is set when one arrives);
    `.jwks_trickle = s` sends the key set one byte every s seconds; `.jwks_body` is answered
    instead of the key set when set.

    Switches: `.answer_429_after = N` answers 429 (Retry-After: 60)
    to every admin call after the first N; `.admin_status` answers that status to every admin call;
    `.admin_delay` sleeps that many seconds before answering an admin call;
    `.invitation_gate.clear()` holds every POST /v1/invitations until `.invitation_gate.set()`
    (`.invitations_asked` counts the ones that arrived).
    """

    SECRET_KEY = "sk_test_identity"

    def __init__(self) -> None:
        self.keys = [SigningKey("kid-1")]
        self.down = False
        self.jwks_requests = 0
        self.jwks_gate = threading.Event()
        self.jwks_gate.set()
        self.jwks_asked = threading.Event()
        self.jwks_trickle = 0.0
        self.jwks_body: Any = None
        self.accounts: dict[str, dict[str, Any]] = {}
        self.invitations: list[dict[str, Any]] = []
        self.admin_requests = 0
        self.answer_429_after: int | None = None
        self.admin_status: int | None = None
        self.admin_delay = 0.0
        self.invitation_gate = threading.Event()
        self.invitation_gate.set()
        self.invitations_asked = 0
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != "/v1/jwks":
                    self._admin("GET", parts.path, parse_qs(parts.query))
                    return
                with provider._lock:
                    provider.jwks_requests += 1
                provider.jwks_asked.set()
                provider.jwks_gate.wait()
                if provider.down:
                    self._answer(503)
                    return
                if not self._authorized():
                    self._answer(401)
                    return
                if provider.jwks_body is not None:
                    self._answer(200, provider.jwks_body)
                    return
                self._answer(200, {"keys": [k.jwk() for k in provider.keys]})

            def _trickle(self, data: bytes) -> None:
                try:
                    for byte in data:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(provider.jwks_trickle)
                except OSError:
                    pass  # the client gave up: what a trickle is for

            def do_POST(self) -> None:
                parts = urlsplit(self.path)
                if parts.path == "/v1/invitations":
                    with provider._lock:
                        provider.invitations_asked += 1
                    provider.invitation_gate.wait()
                self._admin("POST", parts.path, parse_qs(parts.query))

            def _admin(self, method: str, path: str, query: dict[str, list[str]]) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                with provider._lock:
                    provider.admin_requests += 1
                    number = provider.admin_requests
                if provider.admin_delay:
                    time.sleep(provider.admin_delay)
                if provider.down:
                    self._answer(503)
                elif not self._authorized():
                    self._answer(401, _error("authentication_invalid"))
                elif provider.answer_429_after is not None and number > provider.answer_429_after:
                    self._answer(429, _error("too_many_requests"), {"Retry-After": "60"})
                elif provider.admin_status is not None:
                    self._answer(provider.admin_status, _error("forced"))
                else:
                    status, body = provider._route(method, path, query, raw)
                    self._answer(status, body)

            def _authorized(self) -> bool:
                return self.headers.get("Authorization") == f"Bearer {provider.SECRET_KEY}"

            def _answer(
                self, status: int, body: Any = None, headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if provider.jwks_trickle and self.path.startswith("/v1/jwks"):
                    self._trickle(data)
                else:
                    self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = serve_in_thread(self._server)

    def add_account(
        self,
        identity_id: str,
        email: str,
        verified: bool = True,
        private_metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A provider user shaped like the webhook's user objects."""
        address_id = f"idn_{len(self.accounts) + 1}"
        user = {
            "id": identity_id,
            "object": "user",
            "primary_email_address_id": address_id,
            "email_addresses": [
                {
                    "id": address_id,
                    "object": "email_address",
                    "email_address": email,
                    "verification": {
                        "status": "verified" if verified else "unverified",
                        "strategy": "email_code",
                    },
                }
            ],
            "image_url": None,
            "public_metadata": {},
            "private_metadata": dict(private_metadata or {}),
        }
        with self._lock:
            self.accounts[identity_id] = user
        return user

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], raw: bytes
    ) -> tuple[int, Any]:
        if method == "GET" and path == "/v1/users":
            wanted = {address.lower() for address in query.get("email_address", [])}
            with self._lock:
                users = list(self.accounts.values())
            return 200, [
                user
                for user in users
                if any(a["email_address"].lower() in wanted for a in user["email_addresses"])
            ]
        if method == "GET" and path.startswith("/v1/users/"):
            user = self.accounts.get(unquote(path.removeprefix("/v1/users/")))
            return (200, user) if user is not None else (404, _error("resource_not_found"))
        if method == "POST" and path == "/v1/invitations":
            try:
                body = json.loads(raw)
            except ValueError:
                return 400, _error("form_param_format_invalid")
            if not isinstance(body, dict) or not body.get("email_address"):
                return 422, _error("form_param_missing")
            with self._lock:
                invitation = {
                    "id": f"inv_{len(self.invitations) + 1}",
                    "object": "invitation",
                    "email_address": body["email_address"],
                    "redirect_url": body.get("redirect_url"),
                    "public_metadata": body.get("public_metadata") or {},
                    "status": "pending",
                }
                self.invitations.append(invitation)
            return 200, invitation
        return 404, _error("resource_not_found")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def key(self) -> SigningKey:
        return self.keys[0]

    def rotate(self) -> SigningKey:
        """Publish a new key first in the set (the old one stays, as providers do)."""
        new = SigningKey(f"kid-{len(self.keys) + 1}")
        self.keys.insert(0, new)
        return new

    def token(
        self,
        sub: str = "user_alice",
        *,
        now: datetime,
        key: SigningKey | None = None,
        lifetime: timedelta = timedelta(seconds=60),
        omit: tuple[str, ...] = (),
        **claims: Any,
    ) -> str:
        key = key or self.key
        payload = {
            "sub": sub,
            "sid": "sess_1",
            "iat": int(now.timestamp()),
            "nbf": int(now.timestamp()),
            "exp": int((now + lifetime).timestamp()),
            "azp": "https://app.example.test",
            **claims,
        }
        for name in omit:
            payload.pop(name, None)
        return jwt.encode(payload, key.private, algorithm="RS256", headers={"kid": key.kid})

    def close(self) -> None:
        self.jwks_gate.set()
        self.invitation_gate.set()
        self._server.shutdown()
        self._server.server_close()


def _error(code: str) -> dict[str, Any]:
    return {"errors": [{"code": code, "message": code.replace("_", " ")}]}
