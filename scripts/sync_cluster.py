"""Several `squirrel-mcp-sync serve` instances on one database, behind a real haproxy on loopback.

For the load test (scripts/bench_sync_scale.py, tests/sync/test_sync_scale.py):
`Cluster` starts N instances of the installed server on fixed loopback ports,
each told it is one of N (`--instances`, so each keeps 1/N of a key's budget)
and to drain for a moment on SIGTERM (`--drain-seconds`), then Debian's haproxy
in front of them (round robin, a health check on /v1/health), and ends every
process it started, by its pid. `restart(i)` is one step of a rolling restart:
SIGTERM to instance i, wait for it to exit, start it again on the same port, wait
until haproxy sees it healthy.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

SYNC = [sys.executable, "-m", "squirrel_mcp.syncserver"]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
# Long enough for haproxy's health check (every HEALTH_INTERVAL_MS, out after one
# failure) to take a stopping instance out before it stops listening.
DRAIN_SECONDS = 1.0
HEALTH_INTERVAL_MS = 200
# No test here is about budgets: high enough that no client meets one.
UNLIMITED = ("--rate-limit", "1000000", "--burst", "1000000")


def haproxy_binary() -> str | None:
    """The haproxy executable (Debian's package puts it in /usr/sbin), or None."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")


def free_port() -> int:
    """A loopback TCP port free a moment ago (haproxy's configuration needs ports fixed in advance)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Stop:
    """How one instance stopped in a rolling restart."""

    index: int
    returncode: int
    seconds: float  # from SIGTERM to its exit
    drained: bool  # its log says it drained before stopping


class Cluster:
    """N instances over `database_url` behind haproxy; use as a context manager. `url` is haproxy's."""

    def __init__(self, database_url: str, instances: int, workdir: Path) -> None:
        """Prepare (nothing starts before `with`)."""
        binary = haproxy_binary()
        if binary is None:
            raise RuntimeError("haproxy is not installed (apt-get install haproxy; .ci/haproxy does)")
        self.haproxy = binary
        self.database_url = database_url
        self.workdir = workdir
        self.ports = [free_port() for _ in range(instances)]
        self.front = free_port()
        self.url = f"http://127.0.0.1:{self.front}"
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * instances
        self.starts = [0] * instances
        self.balancer: subprocess.Popen[bytes] | None = None
        self.stops: list[Stop] = []

    def __enter__(self) -> Cluster:
        try:
            for index in range(len(self.ports)):
                self._start(index)
            self._start_balancer()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _log(self, index: int) -> Path:
        return self.workdir / f"instance-{index}-{self.starts[index]}.log"

    def _start(self, index: int) -> None:
        self.starts[index] += 1
        log = self._log(index)
        with log.open("wb") as sink:
            self.processes[index] = subprocess.Popen(
                [
                    *SYNC,
                    "serve",
                    "--port",
                    str(self.ports[index]),
                    "--instances",
                    str(len(self.ports)),
                    "--drain-seconds",
                    str(DRAIN_SECONDS),
                    "--no-access-log",
                    *UNLIMITED,
                ],
                env={**os.environ, "SQUIRREL_SYNC_DATABASE": self.database_url},
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self._wait_healthy(f"http://127.0.0.1:{self.ports[index]}", index)

    def _wait_healthy(self, url: str, index: int | None) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            process = self.balancer if index is None else self.processes[index]
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{'haproxy' if index is None else f'instance {index}'} exited early")
            try:
                if requests.get(url + "/v1/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not become healthy within {START_TIMEOUT_S:g} s")
            time.sleep(0.05)

    def _start_balancer(self) -> None:
        servers = "\n".join(
            f"    server s{index} 127.0.0.1:{port} check" for index, port in enumerate(self.ports)
        )
        config = self.workdir / "haproxy.cfg"
        # Retries: a connection refused (an instance between stop and start) goes to
        # another instance (redispatch); so does a 503, which a draining instance
        # answers before its application sees the request, when haproxy still holds
        # the request (small bodies). Larger ones reach the client, which retries.
        config.write_text(
            f"""global
    maxconn 2000
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response 503
frontend sync
    bind 127.0.0.1:{self.front}
    default_backend instances
backend instances
    balance roundrobin
    option httpchk GET /v1/health
    http-check expect status 200
    default-server inter {HEALTH_INTERVAL_MS} fall 1 rise 2
{servers}
"""
        )
        with (self.workdir / "haproxy.log").open("wb") as sink:
            self.balancer = subprocess.Popen(
                [self.haproxy, "-f", str(config), "-db"], stdout=sink, stderr=subprocess.STDOUT
            )
        self._wait_healthy(self.url, None)

    def restart(self, index: int) -> Stop:
        """One step of a rolling restart: stop instance `index` (SIGTERM), start it again; how it stopped."""
        process = self.processes[index]
        assert process is not None
        log = self._log(index)
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=STOP_TIMEOUT_S)
        stop = Stop(index, returncode, time.monotonic() - began, "refusing new requests" in log.read_text())
        self.stops.append(stop)
        self._start(index)
        # Back in haproxy's rotation only after `rise` good checks: wait for them.
        time.sleep(3 * HEALTH_INTERVAL_MS / 1000)
        return stop

    def close(self) -> None:
        """End every process started (haproxy first, then the instances), each by its pid."""
        for process in [self.balancer, *self.processes]:
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
