"""The page's times: how long ago, in the largest whole unit, and the exact time on hover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from squirrel_mcp.ui.when import ago, moment

NOW = datetime(2026, 12, 1, 18, 11, 14, 134000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("before", "said"),
    [
        (timedelta(0), "just now"),
        (timedelta(seconds=59), "just now"),
        (timedelta(seconds=60), "1 minute ago"),
        (timedelta(minutes=59, seconds=59), "59 minutes ago"),
        (timedelta(hours=1), "1 hour ago"),
        (timedelta(hours=3, minutes=40), "3 hours ago"),
        (timedelta(hours=23, minutes=59), "23 hours ago"),
        (timedelta(days=1), "1 day ago"),
        (timedelta(days=29, hours=23), "29 days ago"),
        (timedelta(days=30), "1 month ago"),
        (timedelta(days=364), "12 months ago"),
        (timedelta(days=365), "1 year ago"),
        (timedelta(days=3 * 365 + 10), "3 years ago"),
        # Another machine's clock a little ahead, or far ahead.
        (timedelta(seconds=-30), "just now"),
        (timedelta(minutes=-2), "in 2 minutes"),
        (timedelta(days=-1), "in 1 day"),
    ],
)
def test_how_long_ago(before: timedelta, said: str) -> None:
    assert ago(NOW - before, NOW) == said


def test_the_element_keeps_the_stored_time() -> None:
    element = moment("2026-12-01T15:11:14.134Z", NOW)
    assert element.startswith('<time datetime="2026-12-01T15:11:14.134Z" title="')
    assert element.endswith('">3 hours ago</time>')
