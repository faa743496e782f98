"""The error every command turns into one line for the user: light, so any command can raise it."""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix; the message says what."""
