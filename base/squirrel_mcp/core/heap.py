"""Keeping a long-running process's memory near what it uses: large freed blocks go back to the OS.

glibc's malloc serves a block above its mmap threshold (128 KiB at start) with its own
mapping, unmapped when freed. But each time such a block is freed it raises the
threshold to that block's size (up to 32 MiB), so from then on blocks of that size come
from the heap, where freed space stays in the process. A server that embeds memories
batch after batch (the runtime allocates and frees each batch's buffers) or reads a
large file grows that way by tens of megabytes it no longer uses: measured at 10,000
memories, a first start peaked at 377-416 MB with the moving threshold and at 296 MB
with it fixed at 128 KiB, the warm-up as fast within the run's noise.
"""

from __future__ import annotations

import os
import sys

# mallopt's parameter number for the mmap threshold (malloc.h's M_MMAP_THRESHOLD).
M_MMAP_THRESHOLD = -3
# glibc's own starting value: setting it fixes it there.
MMAP_THRESHOLD = 128 * 1024


def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold at 128 KiB for this process; whether it was set.

    Elsewhere (macOS, Windows, musl) nothing is done: their allocators do not move a
    threshold this way, or have no such setting.
    """
    if sys.platform != "linux":
        return False
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"; musl has no such name
    except (ValueError, OSError):
        return False
    if not glibc or not glibc.startswith("glibc"):
        return False
    import ctypes  # only here: the handshake does not pay for it

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)
