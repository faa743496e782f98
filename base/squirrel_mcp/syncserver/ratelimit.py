"""Request budgets: one token bucket per API key, and one per client address for bad keys.

A bucket holds up to `burst` tokens and refills at `rate` per second; each
request takes one. An empty bucket means 429 with Retry-After, the whole seconds
until a token is back. Budgets live in this process's memory: a restart refills
them, which is harmless for a limit meant to stop a runaway client, not to bill.
Several instances behind one load balancer each keep their own, so each is given
1/N of every budget (`serve --instances N`, app.Limits.share).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

# Past this many tracked buckets, the full ones (idle clients) are forgotten, then
# if need be the oldest, so a stream of new addresses cannot grow the table
# without bound. Forgetting a bucket only ever refills it.
MAX_BUCKETS = 10_000


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Token buckets keyed by anything hashable (a slot id, a client address).

    Not thread-safe: the server touches it only from the event loop.
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        """`rate` tokens per second, at most `burst` held."""
        if rate <= 0 or burst < 1:
            raise ValueError("a rate limit needs a positive rate and a burst of at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[Hashable, _Bucket] = {}

    def take(self, key: Hashable) -> int | None:
        """Spend one token of `key`'s bucket: None if there was one, else the seconds to wait."""
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._forget_full(now)
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return None
        return max(1, math.ceil((1 - bucket.tokens) / self.rate))

    def give_back(self, key: Hashable) -> None:
        """Return one token taken from `key`'s bucket (never past `burst`)."""
        bucket = self._buckets.get(key)
        if bucket is not None:
            bucket.tokens = min(float(self.burst), bucket.tokens + 1)

    def _forget_full(self, now: float) -> None:
        for key in [
            k for k, b in self._buckets.items() if b.tokens + (now - b.updated) * self.rate >= self.burst
        ]:
            del self._buckets[key]
        # Dicts keep insertion order: the first keys are the longest tracked.
        while len(self._buckets) >= MAX_BUCKETS:
            del self._buckets[next(iter(self._buckets))]
