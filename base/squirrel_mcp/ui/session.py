"""The page's name and its one session: who traded the printed token, and until when.

The page answers under a host name of its own, `squirrel-<32 hex digits>.localhost`.
Cookies are kept by host name and not by port, so a cookie set for 127.0.0.1 or
localhost would go to every listener on that address, another user's included.
Chromium and Firefox resolve every `*.localhost` name to the loopback address
themselves (RFC 6761 reserves the name; no DNS query leaves the machine), and a
cookie set without a Domain goes to that exact name only. The name is random, so
another user cannot lead the browser to it on a port of theirs.

The session ends after IDLE_VARIABLE seconds without a request (30 minutes by
default), so a cookie copied out of a browser does not open the page for as long as
the page runs.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from enum import Enum

from squirrel_mcp.core.config import ConfigError

IDLE_VARIABLE = "SQUIRREL_UI_IDLE"
# Thirty minutes: a pause to read or think, not an afternoon with the page left open.
DEFAULT_IDLE = 30 * 60.0
NAME_SUFFIX = ".localhost"


def page_name() -> str:
    """A new random host name under .localhost (128 bits): the page's own cookie scope."""
    return f"squirrel-{secrets.token_hex(16)}{NAME_SUFFIX}"


def idle_seconds(environ: Mapping[str, str]) -> float:
    """How long a session lasts without use, from IDLE_VARIABLE; ConfigError if malformed."""
    value = environ.get(IDLE_VARIABLE, "")
    if not value:
        return DEFAULT_IDLE
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise ConfigError(f"{IDLE_VARIABLE} must be a number of seconds, more than 0")
    return seconds


def _clock() -> float:
    # Time spent suspended counts as idle time: a laptop closed for an hour ends the session.
    if hasattr(time, "CLOCK_BOOTTIME"):
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()


def same(given: str, held: str) -> bool:
    """`given` equals `held`, compared in constant time (as bytes: a header may hold any character)."""
    return secrets.compare_digest(given.encode("utf-8", "surrogatepass"), held.encode("utf-8"))


class State(Enum):
    """What a cookie's value is to the page."""

    LIVE = "live"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


class Session:
    """The page's one session (one printed token opens one): its random value and its last use."""

    def __init__(self, idle: float, clock: Callable[[], float] = _clock) -> None:
        """No session yet; `open` makes it when the token is redeemed."""
        self.idle = idle
        self._clock = clock
        self._lock = threading.Lock()
        self._value: str | None = None
        self._ended: str | None = None
        self._last = 0.0

    def open(self) -> str:
        """A new session, used now: its value, for the cookie."""
        with self._lock:
            self._value = secrets.token_urlsafe(32)
            self._last = self._clock()
            return self._value

    def use(self, value: str | None) -> State:
        """LIVE (and used now) when `value` is the session's and it has not been idle too long.

        An expired session is forgotten: using it again never revives it, and it is
        told apart from a forged value only to say why the page is closed.
        """
        if value is None:
            return State.UNKNOWN
        with self._lock:
            now = self._clock()
            if self._value is not None and now - self._last > self.idle:
                self._ended, self._value = self._value, None
            if self._value is not None and same(value, self._value):
                self._last = now
                return State.LIVE
            if self._ended is not None and same(value, self._ended):
                return State.EXPIRED
            return State.UNKNOWN

    def lifetime(self) -> str:
        """The idle lifetime as a person reads it ("30 minutes", "5 seconds")."""
        if self.idle >= 60:
            minutes = round(self.idle / 60)
            return f"{minutes} minute{'s' if minutes != 1 else ''}"
        seconds = round(self.idle)
        return f"{seconds} second{'s' if seconds != 1 else ''}"
