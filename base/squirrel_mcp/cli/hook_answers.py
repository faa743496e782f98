"""The memory process's answer to `squirrel-mcp hook`: one line of text, worked out in its store.

A hook's connection carries no MCP session: once its hello is taken (cli.admission's
`hook_refusal`), it waits for the store to open, hears one line (squirrel_mcp.core.hello's
`hook_answer`) and the connection ends. The text is squirrel_mcp.server.hooks's, in the
hook's own session project; nothing of the request or the answer is logged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from squirrel_mcp.core.hello import HookRequest, hook_answer

if TYPE_CHECKING:
    from anyio.abc import SocketStream

    from squirrel_mcp.plugins.manager import PluginHost
    from squirrel_mcp.server.opening import Opening

# How often a hook's request looks whether the store has opened, in seconds: a hook has a
# deadline of a few seconds, so it is told soon after the opening.
OPEN_POLL = 0.02


async def answer_hook(
    request: HookRequest, project: str | None, opening: Opening, host: PluginHost, stream: SocketStream
) -> None:
    """Send the hook the text for `request` in `project`, once the store is open; or why it cannot be."""
    from squirrel_mcp.server.hooks import hook_text

    while (store := opening.store()) is None and opening.failure() is None:
        await anyio.sleep(OPEN_POLL)
    if store is None:
        await stream.send(hook_answer(error=opening.failure()))
        return
    text = await anyio.to_thread.run_sync(hook_text, store, host, request, project)
    await stream.send(hook_answer(text=text))
