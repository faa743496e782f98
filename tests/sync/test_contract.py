"""The reference server against its contract: one document, and schemathesis finds no deviation.

schemathesis reads the OpenAPI document the server serves, generates valid and
invalid requests for every operation (from examples, the schema's edge cases,
random fuzzing and stateful sequences) and checks every answer: documented
status codes, response bodies and headers matching their schemas, invalid
input refused, valid input accepted, a missing key refused, unknown methods
answered 405. It runs against SQLite and PostgreSQL, on loopback.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from pathlib import Path

import requests

from squirrel_mcp.syncserver.app import contract
from tests.sync.conftest import SyncServer

# The one copy of the contract in the repository, packaged with the server.
CONTRACT = Path(__file__).resolve().parents[2] / "base" / "squirrel_mcp" / "syncserver" / "openapi.yaml"
SETTINGS = Path(__file__).with_name("schemathesis.toml")
# Examples per operation and phase: about 500 requests a run, under a minute.
EXAMPLES = "30"


def test_the_served_schema_is_the_repositorys_openapi_yaml_byte_for_byte(sync_server: SyncServer) -> None:
    served = requests.get(sync_server.url + "/v1/openapi.yaml", timeout=30)
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("application/yaml")
    assert served.content == CONTRACT.read_bytes()
    assert contract() == CONTRACT.read_bytes()


def _create_account(server: SyncServer) -> None:
    answer = server.post(
        "/v1/account",
        {
            "id": secrets.token_hex(16),
            "kdf": {
                "alg": "scrypt",
                "salt": base64.b64encode(os.urandom(16)).decode(),
                "n": 2**17,
                "r": 8,
                "p": 1,
            },
            "wrappedDataKey": base64.b64encode(os.urandom(61)).decode(),
        },
    )
    assert answer.status_code == 201, answer.text


def test_schemathesis_finds_no_deviation_from_the_contract(sync_server: SyncServer, tmp_path: Path) -> None:
    # Twice: with a key whose slot is empty (the records operations answer 404 until
    # a generated account is created, which one of the first valid POSTs does), and
    # with a key whose account exists, where the records operations do real work.
    fresh = sync_server.issue_key()
    _schemathesis(sync_server, fresh, tmp_path / "fresh-slot")
    assert sync_server.get("/v1/account", fresh).status_code == 200, "no generated account was accepted"
    _create_account(sync_server)
    _schemathesis(sync_server, sync_server.api_key, tmp_path / "with-account")


def _schemathesis(sync_server: SyncServer, key: str, workdir: Path) -> None:
    workdir.mkdir()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "--config-file",
            str(SETTINGS),
            "--no-color",
            "run",
            sync_server.url + "/v1/openapi.yaml",
            "--url",
            sync_server.url,
            "--header",
            f"Authorization: Bearer {key}",
            "--checks",
            "all",
            "--max-examples",
            EXAMPLES,
            "--workers",
            "1",
            "--request-timeout",
            "30",
        ],
        cwd=workdir,  # its .hypothesis database and reports stay out of the checkout
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    # Lines cut short: a failing case's curl line may hold a body of megabytes.
    report = "\n".join(line[:800] for line in run.stdout.splitlines())
    assert run.returncode == 0, report[-30000:] + run.stderr[-5000:]
    # It really tested every operation (a run that selected nothing would also exit 0).
    assert "Selected: 7/7" in run.stdout, run.stdout[-5000:]
    assert "Tested: 7" in run.stdout, run.stdout[-5000:]
