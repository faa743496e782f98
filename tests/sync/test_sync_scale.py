"""The load test, short: 2 instances of the sync server on one PostgreSQL, behind haproxy, a restart mid-run.

10 accounts × 3 machines (the project's RemoteStorage, each in a thread)
append, correct the same memories from several machines at once and pull for a
few seconds through a real haproxy on loopback, while one instance is stopped
(SIGTERM: it drains, finishes, exits) and started again. Then the database is
read directly: every acknowledged record is stored once with its bytes, every
machine's hash chain, built pull by pull, is the chain of the server's log, and
every 409 was resolved. scripts/bench_sync_scale.py runs the same for minutes
with 1, 2 and 3 instances and writes docs/benchmarks/sync-scale.md.

Needs haproxy (Debian's package; `nox -s tests` installs it through .ci/haproxy):
without it the test is skipped, or fails where PostgreSQL is required (CI).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tests.sync.conftest import POSTGRES_REQUIRED_ENV, fresh_postgres_database

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from sync_cluster import haproxy_binary
from sync_load import SHARED_MEMORIES, run_load

LOAD_SECONDS = 5.0


def test_two_instances_through_a_restart_lose_nothing_and_agree_with_every_client(tmp_path: Path) -> None:
    if haproxy_binary() is None:
        if os.environ.get(POSTGRES_REQUIRED_ENV) == "1":
            pytest.fail("haproxy is not installed (bash .ci/haproxy installs it)")
        pytest.skip("haproxy is not installed (bash .ci/haproxy installs it)")
    with fresh_postgres_database() as database_url:
        result = run_load(database_url, tmp_path, instances=2, seconds=LOAD_SECONDS, restart=1)
    assert result.failures == []
    assert result.lost == 0
    assert result.duplicates == 0
    assert result.chain_mismatches == 0
    assert result.unresolved == 0
    # The run did what it is for: records from every account, conflicts met and resolved,
    # one instance stopped by SIGTERM after draining.
    assert result.appended > 0
    assert result.conflicts > 0
    assert [(stop.index, stop.returncode, stop.drained) for stop in result.stops] == [
        (0, -signal.SIGTERM, True)
    ]
    # Nothing stored that no machine acknowledged but the accounts' first records.
    assert result.stored == result.appended + result.accounts * SHARED_MEMORIES
