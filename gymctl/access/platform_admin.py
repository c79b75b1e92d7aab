"""The platform-admin guard (spec A 5.2): platformRole "admin" in the provider's private metadata.

The metadata is read through the provider's admin API and cached per process for a minute, both
answers alike, so an admin screen does not spend the provider's rate limit; a revoked admin loses
access within that minute. When the provider cannot answer, a cached answer (even stale) stands;
with none, the guard fails closed with 503.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from gymctl.access import codes
from gymctl.clock import Clock
from gymctl.errors import forbidden, unavailable
from gymctl.providers.identity_admin import IdentityAdmin, IdentityAdminError

CACHE_TTL = timedelta(seconds=60)


class PlatformAdmins:
    def __init__(self, admin: IdentityAdmin, clock: Clock) -> None:
        self._admin = admin
        self._clock = clock
        self._cache: dict[str, tuple[bool, datetime]] = {}
        self._lock = threading.Lock()

    def is_admin(self, identity_id: str) -> bool:
        now = self._clock.now()
        with self._lock:
            cached = self._cache.get(identity_id)
        if cached is not None and now - cached[1] < CACHE_TTL:
            return cached[0]
        try:
            metadata = self._admin.private_metadata(identity_id)
        except IdentityAdminError:
            if cached is not None:
                return cached[0]
            raise unavailable(
                codes.IDENTITY_ADMIN_UNAVAILABLE, "cannot confirm platform admin now"
            ) from None
        answer = metadata.get("platformRole") == "admin"
        with self._lock:
            self._cache[identity_id] = (answer, now)
        return answer

    def require(self, identity_id: str) -> None:
        if not self.is_admin(identity_id):
            raise forbidden(codes.PLATFORM_ADMIN_REQUIRED, "this needs a platform admin")
