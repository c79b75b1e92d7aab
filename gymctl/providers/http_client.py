"""The HTTP clients of every outside call share one TLS context.

httpx loads the CA bundle into a new SSLContext for each client it makes: 36 ms here
(measured), and an app made two clients (the identity provider's key set and its admin API), a
third of create_app's time. An SSLContext is safe to share between clients and threads; this one
trusts what httpx would (certifi, or SSL_CERT_FILE / SSL_CERT_DIR), read once per process.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def new_client(**options: Any) -> httpx.Client:
    """An httpx.Client with the process's TLS context (options as httpx.Client takes them)."""
    return httpx.Client(verify=tls_context(), **options)
