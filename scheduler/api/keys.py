"""Who is asking: the API key of a request, checked against the followed tenant registry, and
each tenant's request rate.

:class:`KeyIndex` follows ``<ns>.tenants`` in a thread of its own (as ``<ns>.api``) and keeps an
index key id -> (tenant, key) that it replaces whole after each change, so the request threads
read it without a lock: a key created, revoked or whose tenant is removed is seen by every
instance within the follower's poll interval (:data:`POLL_S`) plus the broker's delivery.
"""

from __future__ import annotations

import logging
import math
import threading
import time

from scheduler.apikeys import ApiKey, KeyChecker
from scheduler.principals import as_api
from scheduler.settings import Settings
from scheduler.tenant_registry import TenantRegistry
from scheduler.tenants import Tenant

log = logging.getLogger("ksched.api")
POLL_S = 0.2


class KeyIndex:
    """The tenants' API keys by key id, from the live registry."""

    def __init__(self, settings: Settings, *, start_timeout_s: float = 60) -> None:
        self._tenants: dict[str, Tenant] = {}
        self._registry = TenantRegistry(settings, self._tenants, conn=as_api(settings))
        self._registry.start(start_timeout_s)
        self._by_id: dict[str, tuple[str, ApiKey]] = {}
        self._reindex()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="ksched-api-registry", daemon=True)
        self._thread.start()
        self.checker = KeyChecker(find=self.find)

    def _reindex(self) -> None:
        self._by_id = {k.key_id: (name, k) for name, t in self._tenants.items() for k in t.api_keys}

    def _follow(self) -> None:
        while not self._stopping.wait(POLL_S):
            try:
                if self._registry.poll():
                    self._reindex()
            except Exception as exc:  # the last registry stays in force; logged, retried next poll
                log.warning("tenant registry: %s", exc)

    def find(self, key_id: str) -> tuple[str, ApiKey] | None:
        return self._by_id.get(key_id)

    def tenant(self, name: str) -> Tenant | None:
        return self._tenants.get(name)

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        self._registry.close()


class RateLimiter:
    """A token bucket per tenant: ``rate_per_s`` requests a second, bursts of ``burst``; per
    instance (each API instance limits on its own, docs/api.md)."""

    def __init__(self, rate_per_s: float, burst: float | None = None) -> None:
        self.rate, self.burst = rate_per_s, burst if burst is not None else rate_per_s
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, tenant: str) -> int:
        """0 when the request may go on, else the whole seconds to wait (``Retry-After``)."""
        if self.rate <= 0:
            return 0
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.get(tenant, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1:
                self._buckets[tenant] = (tokens - 1, now)
                return 0
            self._buckets[tenant] = (tokens, now)
            return max(1, math.ceil((1 - tokens) / self.rate))
