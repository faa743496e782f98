"""The process's limit on open files (RLIMIT_NOFILE), raised to the hard one.

A server that takes connections from others holds a descriptor for each: the
soft limit many systems start a process with (1,024, or 256 on macOS) is far
below what the hard limit allows, and a low one is what a flood of idle
connections exhausts first.
"""

from __future__ import annotations

import resource

UNLIMITED = resource.RLIM_INFINITY


def raise_file_limit() -> int:
    """The soft limit on open files after raising it to the hard one, as far as the system allows.

    UNLIMITED when there is none.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == UNLIMITED or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            # Some systems cap the soft limit below an unlimited hard one (macOS at
            # OPEN_MAX): the current soft limit then stands.
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft
