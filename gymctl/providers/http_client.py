"""The HTTP clients of every outside call share one TLS context.

httpx loads the CA bundle into a new SSLContext for each client it makes: 36 ms here
(measured), and an app made two clients (the identity provider's key set and its admin API), a
third of create_app's time. An SSLContext is safe to share between clients and threads; this one
trusts what httpx would (certifi, or SSL_CERT_FILE / SSL_CERT_DIR), read once per process.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def new_client(
    *, base_url: str = "", headers: dict[str, str] | None = None, timeout: float = 5.0
) -> httpx.Client:
    """An httpx.Client (HTTP/1.1, httpx's 5 s timeout by default) with the process's TLS context.
    Only these options: httpcore sets the ALPN protocols on the context it connects with, and
    httpx loads a client certificate into it, so a client asking for HTTP/2 or a certificate
    would change every client's context (such a client makes its own)."""
    return httpx.Client(verify=tls_context(), base_url=base_url, headers=headers, timeout=timeout)
