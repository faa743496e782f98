"""The process test_passphrase_kills.py kills: forks one `squirrel-mcp passphrase` per run.

Started once per check (`python passphrase_worker.py LOG`), with the vault's or the
sync server's variables and the cache directory in its environment. It imports the
command line once, then for each command read on stdin forks a child that runs the
real command, `squirrel_mcp.cli.cli.main(["passphrase"])`, with SQUIRREL_PASSPHRASE and
SQUIRREL_NEW_PASSPHRASE set to one of PASSPHRASES and the other: a run costs a fork,
not a 1 s interpreter start. The child's output goes to LOG.

The one difference from the installed command: new keys are wrapped at the cheapest
scrypt cost a vault may carry (N = 2^14) rather than the default, as the other
reliability checks make their vaults; every unlock after a kill pays for it twice.

Protocol, one line each way (the worker's in a single write):

    run I      fork a child changing PASSPHRASES[I] to the other   -> pid N
    reap       wait for that child (the test killed it, or not)    -> exit CODE
    quit       stop

The child is reaped only when the test says so, so its pid cannot be given to
another process before the test's SIGKILL: a child that ended first is a zombie,
and the kill does nothing.
"""

from __future__ import annotations

import os
import secrets
import sys

from squirrel_mcp.cli import main as cli
from squirrel_mcp.keys import crypto

PASSPHRASES = ("the first passphrase of the kills", "the second passphrase of the kills")


def cheap_kdf() -> crypto.KdfParams:
    """Fresh parameters at the cheapest cost a vault may carry."""
    return crypto.KdfParams(salt=secrets.token_bytes(crypto.SALT_BYTES), n=crypto.KDF_N_RANGE[0])


def say(line: str) -> None:
    """One line to the test, in a single write."""
    os.write(1, (line + "\n").encode())


def child(current: int, log: str) -> None:
    """Run the command in this forked process; never returns."""
    status = 70
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.environ["SQUIRREL_PASSPHRASE"] = PASSPHRASES[current]
        os.environ["SQUIRREL_NEW_PASSPHRASE"] = PASSPHRASES[1 - current]
        status = cli.main(["passphrase"])
        sys.stdout.flush()
    finally:
        # Straight out: the forked copy must not run the worker's loop or any atexit.
        os._exit(status)


def main() -> None:
    """Read commands; fork a child for each run; reap it when told."""
    crypto.KdfParams.new = staticmethod(cheap_kdf)  # type: ignore[method-assign, assignment]
    log = sys.argv[1]
    pid = None
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        if command[0] == "run":
            pid = os.fork()
            if pid == 0:
                child(int(command[1]), log)
            say(f"pid {pid}")
        elif command[0] == "reap" and pid is not None:
            _, status = os.waitpid(pid, 0)
            pid = None
            say(f"exit {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    main()
