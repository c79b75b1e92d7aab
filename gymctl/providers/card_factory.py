"""The choice of card provider from the settings. Its own module: the interface (card.py) that
both implementations import imports neither of them."""

from __future__ import annotations

from gymctl.config import Settings
from gymctl.errors import ConfigError
from gymctl.providers.card import CardProvider


def card_provider_from_settings(settings: Settings) -> CardProvider:
    """GYMCTL_CARD_PROVIDER_URL set: the provider's HTTP client; unset: the in-process sandbox
    under GYMCTL_HOME, which production refuses (it would take no money)."""
    from gymctl.providers.card_http import HttpCardProvider  # loaded when chosen, as before
    from gymctl.providers.card_sandbox import SandboxCardProvider

    if settings.card_provider_url:
        return HttpCardProvider(settings.card_provider_url, timeout=settings.card_provider_timeout)
    if settings.is_production:
        raise ConfigError("GYMCTL_CARD_PROVIDER_URL is not set (production takes no sandbox)")
    return SandboxCardProvider(settings.home)
