"""Token buckets for the per-tenant rate quotas (pure, clock passed in)."""

from __future__ import annotations


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` banked. A rate of 0 means no quota."""

    __slots__ = ("_last", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._last: float | None = None

    def _refill(self, clock: float) -> None:
        if self._last is not None and clock > self._last:
            self._tokens = min(self.burst, self._tokens + (clock - self._last) * self.rate)
        self._last = clock if self._last is None or clock > self._last else self._last

    def set_rate(self, rate: float, burst: int, clock: float) -> None:
        """Change the rate (the shard's share moved) keeping the tokens banked, refilled at the
        old rate up to ``clock`` and capped at the new ``burst``: a change never hands out a
        fresh burst. From no limit (rate 0) the bucket starts full."""
        if self.rate > 0:
            self._refill(clock)
            self._tokens = min(self._tokens, float(burst))
        else:
            self._tokens = float(burst)
            self._last = clock
        self.rate = rate
        self.burst = burst

    def available(self, clock: float) -> int:
        if self.rate <= 0:
            return 1 << 62
        self._refill(clock)
        return int(self._tokens)

    def spend(self, n: int, clock: float) -> None:
        if self.rate > 0:
            self._refill(clock)
            self._tokens -= n

    def wait_s(self, clock: float) -> float:
        """Seconds until a token is available (0 if one is, or if there is no quota)."""
        if self.rate <= 0:
            return 0.0
        self._refill(clock)
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate
