"""What a form left for the page it redirects to, kept here for a while under a random key.

Every form answers its POST with a redirect (303) to a page, so the address bar
holds a page that can be reloaded, never the form's target. When the form was
refused (a rule broken, the memory changed meanwhile, the store busy), that page
shows why, and the form comes back with the person's unsaved text; after an
action on several memories, its page says what happened to each. The text stays
in this process's memory, never in the address: the address carries only the
key, `secrets.token_urlsafe`, which no other page can guess. An outcome lasts
KEEP_SECONDS (a reload in that time shows it again) and is gone when the page
stops; at most MOST are kept, the oldest dropped first.

Each outcome names the page that shows it (`where`: a memory's id, or one of
the page names below), and is found only there.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

KEEP_SECONDS = 30 * 60
MOST = 100
KEY = re.compile(r"[A-Za-z0-9_-]{22}")
# The pages other than a memory's that show an outcome: the list, the add form, a bulk action's result.
LIST = "list"
NEW = "new"
BULK = "bulk"


class Kept(Protocol):
    """Anything kept here: it names the page that shows it."""

    @property
    def where(self) -> str:
        """A memory's id, or LIST, NEW or BULK."""
        ...


@dataclass(frozen=True)
class Outcome:
    """A refused form, as the memory's page shows it after the redirect."""

    memory_id: str
    problems: Sequence[tuple[str, str]]
    #: The correction form as it comes back (the person's text); None for the other forms.
    values: Mapping[str, str] | None = None
    #: The revision the correction form comes back with.
    form_revision: int | None = None
    #: After a conflict: the revision the form was loaded from, and the memory's revision then.
    changed: tuple[int, int] | None = None

    @property
    def where(self) -> str:
        """The page that shows it: the memory's (or LIST, NEW)."""
        return self.memory_id


# "move-back" undoes a "move": each memory back in the project it was in before the move's revision.
BulkAction = Literal["delete", "restore", "tag", "untag", "move", "move-back"]


@dataclass(frozen=True)
class BulkOutcome:
    """What one action on several memories did to each of them."""

    action: BulkAction
    #: The tag added or removed (None for delete and restore).
    tag: str | None
    #: (id, the revision written) of each memory it changed.
    done: Sequence[tuple[str, int]]
    #: (id, why not) of each memory it did not change.
    refused: Sequence[tuple[str, str]] = field(default_factory=tuple)
    where: str = BULK
    #: Where a move took them (None: no project).
    project: str | None = None


class Outcomes:
    """The outcomes of the last few refused forms, by key (thread-safe: the routes run in a pool)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        """An empty store; `clock` tells the time in seconds (tests pass their own)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[float, Kept]] = OrderedDict()

    def keep(self, outcome: Kept) -> str:
        """Keep `outcome`; its key, for the redirect's address."""
        key = secrets.token_urlsafe(16)
        with self._lock:
            self._forget_expired()
            self._kept[key] = (self._clock() + KEEP_SECONDS, outcome)
            while len(self._kept) > MOST:
                self._kept.popitem(last=False)
        return key

    def find(self, key: str, where: str) -> Kept | None:
        """The outcome kept under `key` for the page `where`; None when there is none (any more)."""
        if KEY.fullmatch(key) is None:
            return None
        with self._lock:
            self._forget_expired()
            found = self._kept.get(key)
        if found is None or found[1].where != where:
            return None
        return found[1]

    def _forget_expired(self) -> None:
        now = self._clock()
        while self._kept and next(iter(self._kept.values()))[0] <= now:
            self._kept.popitem(last=False)
