"""Billing alerts (spec B 6): a reason and the ids an operator needs, logged as a warning so
the error tracker and the log pipeline page someone. Never amounts of a card, never tokens."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("gymctl.billing.alerts")


def raise_alert(reason: str, **ids: Any) -> dict[str, str]:
    entry = {"reason": reason, **{key: str(value) for key, value in ids.items()}}
    logger.warning("billing alert %s", entry)
    return entry
