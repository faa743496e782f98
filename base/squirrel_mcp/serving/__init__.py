"""What the two HTTP servers share, the sync server and the page: how they take connections.

limits.py       the process's limit on open files, raised to the most it may be (standard library only)
connections.py  the guard of a listening socket: a descriptor budget, a cap on open connections,
                a deadline for request headers (uvicorn's h11 protocol)

The memory process serves the page beside every host's session: a page that any local
user can reach must not take the descriptors the hosts' connections need.
"""
