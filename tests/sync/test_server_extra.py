"""`squirrel-mcp-sync` without the `server` extra says, in one line, what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Starts the sync server's command as installed, with the extra's packages made unimportable.
WITHOUT = """
import sys
from importlib.abc import MetaPathFinder

class Absent(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {package!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
from squirrel_mcp.syncserver.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("package", ["starlette", "uvicorn"])
def test_without_the_server_extra_one_line_says_what_to_install(package: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT.format(package=package), "serve", "--database", "sqlite:////nowhere"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"squirrel-mcp-sync: the sync server needs {package}, which is not installed: "
        "pip install 'squirrel-mcp[server]'"
    ]
