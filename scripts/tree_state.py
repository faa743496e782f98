"""Whether a command left the working tree as it found it: `nox -s tests` ends with this check.

    python scripts/tree_state.py snapshot > before.json    the files git reports as changed or
                                                          untracked (not ignored), each with a
                                                          SHA-256 of its content
    python scripts/tree_state.py compare < before.json     exit 1, naming each file whose state is
                                                          not the snapshot's; 0 when none

Comparing with a snapshot, rather than asking for an empty `git status`, lets a run on a
checkout with edits of its own pass, while a file the run itself wrote or changed fails it.
On a clean clone (CI) the snapshot is empty, so the check is `git status --porcelain` empty.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class NotACheckout(Exception):
    """git is missing, or this directory is not a git checkout (an unpacked sdist)."""


def changed_files(root: Path) -> dict[str, str]:
    """Each path git reports as modified, added, deleted or untracked, with its content's SHA-256."""
    try:
        listed = subprocess.run(
            ["git", "status", "--porcelain=v1", "-z", "--untracked-files=all"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise NotACheckout(f"cannot ask git about {root}: {error}") from None
    state = {}
    entries = iter(listed.decode("utf-8", errors="surrogateescape").split("\0"))
    for entry in entries:
        if not entry:
            continue
        path = entry[3:]
        if entry[0] in "RC":
            next(entries, None)  # a rename's or copy's source path follows it
        file = root / path
        state[path] = hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else "absent"
    return state


def differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The paths whose state differs between two snapshots, sorted."""
    return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))


def main(argv: list[str]) -> int:
    """snapshot: print the state as JSON; compare: read a snapshot on stdin, say what changed."""
    if argv not in (["snapshot"], ["compare"]):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        now = changed_files(ROOT)
    except NotACheckout as error:
        print(f"tree check: skipped, {error}", file=sys.stderr)
        return 0
    if argv == ["snapshot"]:
        print(json.dumps(now, sort_keys=True))
        return 0
    changed = differences(json.loads(sys.stdin.read() or "{}"), now)
    if changed:
        print(
            f"tree check: this run changed {len(changed)} file(s) in the working tree: {', '.join(changed)}."
            " Tests write under build/ or a temporary directory; figures in docs/ are written by"
            " nox -s recall, reliability and bench only.",
            file=sys.stderr,
        )
        return 1
    print("tree check: the working tree is as the run found it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
