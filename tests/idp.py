"""A stand-in identity provider for tests: RSA keys made here, tokens minted here, and its key
set served over real HTTP on loopback (with a switch to take it down)."""

from __future__ import annotations

import functools
import json
import threading
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


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
    """Mints session tokens and serves GET /v1/jwks (bearer secret checked) on loopback."""

    SECRET_KEY = "sk_test_identity"

    def __init__(self) -> None:
        self.keys = [SigningKey("kid-1")]
        self.down = False
        self.jwks_requests = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                provider.jwks_requests += 1
                if provider.down or self.path != "/v1/jwks":
                    self.send_response(503 if provider.down else 404)
                    self.end_headers()
                    return
                if self.headers.get("Authorization") != f"Bearer {provider.SECRET_KEY}":
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"keys": [k.jwk() for k in provider.keys]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

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
        self._server.shutdown()
        self._server.server_close()
