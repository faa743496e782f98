"""Whom the memory process admits: the hello it was started with, and the passphrase it takes now.

A bridge is admitted when its hello is the process's own (squirrel_mcp.core.hello's
`refusal`). The passphrase may change while the process serves: `squirrel-mcp
passphrase` tells it the new one at once (a hello with `changed`), and a host
given the new one before it was told brings it too. Either way the new one is
taken only when it opens the account's key as storage holds it now, and that key
is the store's own; from then on the old one is refused. A check that fails (the
sync server unreachable, a key record asking for KDF parameters beyond an
unlock's bounds) is a refusal of that one connection, logged by its type alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from squirrel_mcp.core.hello import FIX, VERSION, Hello, refusal
from squirrel_mcp.core.lines import log_line

if TYPE_CHECKING:
    from squirrel_mcp.server.opening import Opening


class Admission:
    """The hello a memory process admits (`ours`), its passphrase kept up with a change."""

    def __init__(self, ours: Hello, where: str, opening: Opening) -> None:
        """Admit hellos like `ours` to the store `opening` opens, for the vault or account `where` names."""
        self.ours = ours
        self.where = where
        self.opening = opening

    def refusal(self, hello: Hello) -> str | None:
        """Why `hello` may not share this process as it stands; None: it may."""
        return refusal(self.ours, hello, self.where)

    def hook_refusal(self, hello: Hello) -> str | None:
        """Why a hook's `hello` is not answered here; None: it is.

        A hook runs in its host's environment, not in the host's MCP server config: it has
        no passphrase (unless the keychain holds it), and not that config's settings. It only
        reads, through this process's store and plugins, and it runs as this user (the channel
        checked): so the vault and the version are all it must share with this process. What
        this admits is said in docs/security.md.
        """
        if hello.identity != self.ours.identity:
            return refusal(self.ours, hello, self.where)
        if hello.settings.get(VERSION) != self.ours.settings.get(VERSION):
            return (
                f"the memory process of {self.where} runs another squirrel-mcp version than this hook; {FIX}"
            )
        return None

    async def opens(self, passphrase: str) -> bool:
        """True when `passphrase` now opens the account's key, and that key is the store's own."""
        store = self.opening.store()
        if store is None:
            return False
        try:
            return await anyio.to_thread.run_sync(store.opened_by, passphrase)
        except Exception as error:  # whatever the storage or the KDF raised: a refusal
            log_line(f"a changed passphrase could not be checked ({type(error).__name__}); it was refused")
            return False

    async def passphrase_changed_to(self, hello: Hello) -> bool:
        """True when `hello` differs from ours only by a passphrase that now opens the account: ours now."""
        like_ours = self.ours._replace(passphrase=hello.passphrase)
        if hello.passphrase is None or refusal(like_ours, hello, self.where) is not None:
            return False
        if not await self.opens(hello.passphrase):
            return False
        self.ours = like_ours
        return True

    async def take_change(self, hello: Hello) -> str | None:
        """`squirrel-mcp passphrase`'s news: None once its passphrase is ours (the old one refused); else why.

        The settings are not compared: the command's environment need not be a host's, and
        all it can change is which passphrase is admitted, to one that opens the account now.
        It waits for the store to open (the command waits with it).
        """
        if hello.identity != self.ours.identity:
            return refusal(self.ours, hello, self.where)
        while self.opening.store() is None and self.opening.failure() is None:
            await anyio.sleep(0.1)
        if hello.passphrase is None or not await self.opens(hello.passphrase):
            return (
                f"the memory process of {self.where} was not given a passphrase that opens it; "
                "it admits the one it had"
            )
        self.ours = self.ours._replace(passphrase=hello.passphrase)
        return None
