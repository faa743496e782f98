"""Hand the page's one-time address to the browser without putting it on a command line.

A browser is started as a process, and the URL it is given sits in that process's
command line (`/proc/<pid>/cmdline`), which every local user can read on a default
Linux: another user could redeem the token before the browser does. So the browser
is given the path of a small HTML file instead, which forwards it to the address with
the token (as Jupyter does with its `browser_open_file`). Another user sees the
file's name in the command line but cannot open it:

- it is made by `mkstemp` (mode 0600, `O_EXCL`: a file planted at its name is never
  written through) in the user's runtime directory, `XDG_RUNTIME_DIR`, when that is a
  directory of this user's that no one else may enter (the XDG spec makes it so);
  else in a new private temporary directory (0700);
- it is deleted as soon as the token is redeemed, and in any case when the page stops
  (the token no longer opens anything by then).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from squirrel_mcp.core.channel import user_runtime_dir
from squirrel_mcp.ui.html import html

PREFIX = "squirrel-mcp-ui-"
# The forwarding page: a refresh at once, and a link in case refreshes are blocked.
# Nothing loads from elsewhere and nothing runs; the address is escaped.
FORWARD = (
    '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
    '<meta name="referrer" content="no-referrer">'
    '<meta http-equiv="refresh" content="0;url={url}">'
    "<title>squirrel-mcp ui</title></head>\n"
    '<body><p><a href="{url}">Open your memories</a></p></body></html>\n'
)


class Handoff:
    """The owner-only file that forwards a browser to the address with the token; `remove` deletes it."""

    def __init__(self, path: Path, made_dir: Path | None) -> None:
        """Use `write` rather than this."""
        self.path = path
        self._made_dir = made_dir
        self._lock = threading.Lock()
        self._removed = False

    @classmethod
    def write(cls, url: str, environ: Mapping[str, str] = os.environ) -> Handoff:
        """Write the forwarding file for `url` (see the module docstring)."""
        directory = user_runtime_dir(environ)
        made_dir = None
        if directory is None:
            # mkdtemp makes the directory 0700 whatever the umask.
            directory = made_dir = Path(tempfile.mkdtemp(prefix=PREFIX))
        try:
            # mkstemp makes the file 0600 whatever the umask, with O_EXCL.
            fd, name = tempfile.mkstemp(prefix=PREFIX, suffix=".html", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(html(FORWARD, url=url))
        except BaseException:
            if made_dir is not None:
                shutil.rmtree(made_dir, ignore_errors=True)
            raise
        return cls(Path(name), made_dir)

    @property
    def uri(self) -> str:
        """The file's `file://` address: what the browser is given (no token in it)."""
        return self.path.as_uri()

    def remove(self) -> None:
        """Delete the file (and the directory made for it); again is a no-op."""
        with self._lock:
            if self._removed:
                return
            self._removed = True
            self.path.unlink(missing_ok=True)
            if self._made_dir is not None:
                shutil.rmtree(self._made_dir, ignore_errors=True)
