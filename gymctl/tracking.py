"""Error tracking through sentry-sdk, only when SENTRY_DSN is set: unset, nothing is sent.

Unhandled exceptions and error-level log lines become events (sentry's logging integration), so
domain code reports by logging and never imports sentry itself.
"""

from __future__ import annotations

from typing import Any

import sentry_sdk

from gymctl import __version__
from gymctl.config import Settings


def init_error_tracking(settings: Settings, *integrations: Any) -> bool:
    """Start the client for this process; False (and nothing sent) when SENTRY_DSN is unset."""
    if settings.sentry_dsn is None:
        return False
    sentry_sdk.init(
        dsn=settings.sentry_dsn.get_secret_value(),
        environment=settings.env.value,
        release=f"gymctl@{__version__}",
        integrations=list(integrations),
    )
    return True
