"""What `squirrel-mcp doctor` reports: one check, passed or failed, with the fix.

Its own module so that the `doctor_checks` hook can name the type plugins return
without importing the command line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """One line of `squirrel-mcp doctor`.

    - `name`: what was checked, a few words ("model verified").
    - `ok`: whether it passed.
    - `detail`: what was found: paths, names, counts; never memory text, a key or a passphrase.
    - `fix`: what to do when it failed (empty when it passed).
    """

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        """The check as doctor prints it: ✓ or ✗, the name, what was found, and the fix."""
        mark = "✓" if self.ok else "✗"
        fix = f" → {self.fix}" if self.fix and not self.ok else ""
        return f"{mark} {self.name}: {self.detail}{fix}"
