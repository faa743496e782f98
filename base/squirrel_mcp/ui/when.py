"""Times on the page: how long ago ("3 hours ago"), with the exact time on hover.

Both are written by the server, so they read the same without JavaScript. The
exact time is in this computer's time zone: the page answers only on this
computer, so that is the zone of the person reading it.
"""

from __future__ import annotations

from datetime import datetime

from squirrel_mcp.core.models import parse_iso
from squirrel_mcp.ui.html import Html, html

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR
# Each unit is used below the next one's threshold: 59 minutes, then 1 hour; 29 days, then 1 month.
UNITS = (
    (HOUR, MINUTE, "minute"),
    (DAY, HOUR, "hour"),
    (30 * DAY, DAY, "day"),
    (365 * DAY, 30 * DAY, "month"),
)


def ago(then: datetime, now: datetime) -> str:
    """How long before `now` `then` was, in the largest whole unit: "just now", "3 hours ago".

    A time after `now` (another machine's clock, through a sync account) reads "in 2 minutes".
    """
    seconds = (now - then).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < MINUTE:
        return "just now"
    size, unit = next(((size, unit) for below, size, unit in UNITS if seconds < below), (365 * DAY, "year"))
    amount = int(seconds // size)
    phrase = f"{amount} {unit}" + ("" if amount == 1 else "s")
    return f"in {phrase}" if future else f"{phrase} ago"


def exact(then: datetime) -> str:
    """`then` to the second in this computer's time zone: "Tue 1 Dec 2026, 18:11:14 UTC"."""
    local = then.astimezone()
    return f"{local:%a} {local.day} {local:%b %Y, %H:%M:%S} {local:%Z}"


def moment(timestamp: str, now: datetime) -> Html:
    """A stored timestamp as a <time> element: how long ago, the exact time on hover."""
    then = parse_iso(timestamp)
    return html(
        '<time datetime="{at}" title="{exact}">{ago}</time>',
        at=timestamp,
        exact=exact(then),
        ago=ago(then, now),
    )
