"""One client measuring sync servers side by side: its requests, their timing, the figures it reports.

Part of scripts/bench_sync.py. Each server under measurement gets a client with
a keep-alive session on a new account; `measure` makes every request of one
server take turns with the same request to the others, so that what else runs
on the machine meets them alike.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import statistics
import time
from collections.abc import Callable, Iterator

import requests
from bench_sync_machine import CpuMeter

RECORD_BYTES = 400
WARMUP = 20

JSON_TYPE = {"Content-Type": "application/json"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def nearest_rank(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(share * len(ordered)) - 1)]


def record_body(count: int) -> bytes:
    """The JSON body of an append of `count` new memories' first revisions, of RECORD_BYTES each."""
    records = [
        {"memoryId": secrets.token_hex(8), "revision": 1, "ciphertext": b64(os.urandom(RECORD_BYTES))}
        for _ in range(count)
    ]
    return json.dumps({"records": records}).encode()


class Client:
    """One server under measurement: a keep-alive session on a new account, and what it measured."""

    def __init__(self, url: str, key: str, meter: CpuMeter) -> None:
        self.url, self.meter = url, meter
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"
        account = {
            "id": secrets.token_hex(16),
            "kdf": {"alg": "scrypt", "salt": b64(os.urandom(16)), "n": 2**17, "r": 8, "p": 1},
            "wrappedDataKey": b64(os.urandom(61)),
        }
        self.session.post(url + "/v1/account", json=account).raise_for_status()
        self.ms: dict[str, list[float]] = {"account": [], "append": []}
        self.seconds = {"batch": 0.0, "pull": 0.0}
        self.cpu = {"batch": (0.0, 0.0), "pull": (0.0, 0.0)}
        self.pulled, self.pages, self.cursor, self.more = 0, 0, 0, True

    def single(self, kind: str, keep: bool) -> None:
        """One GET /v1/account ("account") or append of one record ("append"), timed if `keep`."""
        body = record_body(1)
        start = time.perf_counter()
        if kind == "account":
            self.session.get(self.url + "/v1/account").raise_for_status()
        else:
            self.session.post(self.url + "/v1/records", data=body, headers=JSON_TYPE).raise_for_status()
        if keep:
            self.ms[kind].append((time.perf_counter() - start) * 1000)

    def _lapped(self, kind: str, call: Callable[[], None]) -> None:
        self.meter.lap()
        start = time.perf_counter()
        call()
        self.seconds[kind] += time.perf_counter() - start
        server, database = self.meter.lap()
        self.cpu[kind] = (self.cpu[kind][0] + server, self.cpu[kind][1] + database)

    def batch(self, body: bytes) -> None:
        """Append one batch (`body`, made beforehand), timed."""
        post = self.session.post
        self._lapped(
            "batch", lambda: post(self.url + "/v1/records", data=body, headers=JSON_TYPE).raise_for_status()
        )

    def page(self) -> None:
        """Pull the next page of changes, decoding its JSON, timed."""

        def pull() -> None:
            page = self.session.get(self.url + "/v1/records", params={"after": self.cursor}).json()
            self.pulled += len(page["records"])
            self.cursor, self.more = page["cursor"], page["more"]

        self._lapped("pull", pull)
        self.pages += 1

    def figures(self, batches: int) -> dict[str, float]:
        """What this client measured, as the report's figures."""
        return {
            "account_median": statistics.median(self.ms["account"]),
            "account_p90": nearest_rank(self.ms["account"], 0.9),
            "append_median": statistics.median(self.ms["append"]),
            "append_p90": nearest_rank(self.ms["append"], 0.9),
            "batch_rate": batches * 500 / self.seconds["batch"],
            "pulled": self.pulled,
            "pull_seconds": self.seconds["pull"],
            "pull_rate": self.pulled / self.seconds["pull"],
            "batch_server_cpu_ms": self.cpu["batch"][0] / batches * 1000,
            "batch_database_cpu_ms": self.cpu["batch"][1] / batches * 1000,
            "page_server_cpu_ms": self.cpu["pull"][0] / self.pages * 1000,
            "page_database_cpu_ms": self.cpu["pull"][1] / self.pages * 1000,
            "load": os.getloadavg()[0],
        }


def measure(clients: list[Client], singles: int, batches: int) -> list[dict[str, float]]:
    """Each client's figures, its requests taking turns with the others' one by one.

    Every request of one server is followed by the same request to the other,
    the first of each turn changing from turn to turn: a change in the machine's
    load meets both alike.
    """

    def turns(count: int) -> Iterator[tuple[int, list[Client]]]:
        for index in range(count):
            first = index % len(clients)
            yield index, clients[first:] + clients[:first]

    for kind in ("account", "append"):
        for index, turn in turns(WARMUP + singles):
            for client in turn:
                client.single(kind, keep=index >= WARMUP)
    bodies = [record_body(500) for _ in range(batches)]
    for index, turn in turns(batches):
        for client in turn:
            client.batch(bodies[index])
    index = 0
    while any(client.more for client in clients):
        for client in clients[index % len(clients) :] + clients[: index % len(clients)]:
            if client.more:
                client.page()
        index += 1
    return [client.figures(batches) for client in clients]
