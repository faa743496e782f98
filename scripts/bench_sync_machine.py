"""What the sync benchmarks read of the machine: CPU time used by processes, and their Environment section.

The CPU time of the server process and of the PostgreSQL backends serving one
database comes from /proc (Linux), so the cluster must run on this machine, as
the `.ci/postgres` one does. On a machine shared with other jobs it is the
steadier figure: the wall clock counts the waits for a core too.
"""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path


def environment_lines(*extra: str) -> list[str]:
    """The "Environment" section the sync benchmarks' reports end with; `extra` lines after the load."""
    return [
        "## Environment",
        "",
        f"- Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs",
        f"- Load average when it finished: {os.getloadavg()[0]:.1f} (other jobs share the machine)",
        *extra,
        "",
    ]


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process `pid` has used (0 if it is gone), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backend_pids(database_url: str) -> list[int]:
    """The PostgreSQL backends serving `database_url`'s database, this query's own left out."""
    if not database_url.startswith("postgresql"):
        return []
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(pid) for (pid,) in rows]


class CpuMeter:
    """CPU seconds used by the server process and its database's backends since the last `lap`."""

    def __init__(self, server_pid: int, database_url: str) -> None:
        self.server_pid, self.database_url = server_pid, database_url
        self.lap()

    def _now(self) -> tuple[float, dict[int, float]]:
        backends = {pid: cpu_seconds(pid) for pid in backend_pids(self.database_url)}
        return cpu_seconds(self.server_pid), backends

    def lap(self) -> tuple[float, float]:
        """(server, database) CPU seconds since the previous lap (or the start)."""
        server, backends = self._now()
        previous = getattr(self, "_last", (server, backends))
        self._last = (server, backends)
        used = sum(seconds - previous[1].get(pid, 0.0) for pid, seconds in backends.items())
        return server - previous[0], used
