"""The README's Quick start, pasted as it is, on a machine with nothing but Python; and the model
export cache every nox session reuses, so that no session but the first one needs torch.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FETCH = ROOT / "model" / "fetch.py"
NOT_CACHED = 3


def fetch_cached_only(cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(FETCH), "--cached-only"],
        env={"PATH": "/usr/bin:/bin", "SQUIRREL_BUILD_CACHE": str(cache), "HOME": str(cache.parent)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_fetch_from_the_cache_only_says_when_an_export_is_needed(tmp_path: Path) -> None:
    # An empty cache: nothing to copy, and nothing is downloaded to find that out.
    done = fetch_cached_only(tmp_path / "empty")
    assert done.returncode == NOT_CACHED, done.stderr
    assert "fetch: not in the cache: " in done.stderr and "exporting it needs torch" in done.stderr
    assert not (tmp_path / "empty").exists()

    # A cached export that is not the manifest's (a torn or stale file) is not used either.
    stale = tmp_path / "stale" / "all-MiniLM-L6-v2" / "model.onnx"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"not the pinned export")
    done = fetch_cached_only(tmp_path / "stale")
    assert done.returncode == NOT_CACHED, done.stderr
    assert f"{stale} is missing or does not match the manifest" in done.stderr
