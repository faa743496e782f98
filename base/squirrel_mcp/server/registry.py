"""Every tool as the server registers it: its function, its title, its hints to the host."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Concatenate

from mcp.types import ToolAnnotations

from squirrel_mcp.server.tools import ToolContext, get_context, get_memory, list_memories, search_memory
from squirrel_mcp.server.writing import delete_memory, restore_memory, save_memory, update_memory


@dataclass(frozen=True)
class ToolSpec:
    """A tool as registered: its function, the title a host shows, and its hints to the host."""

    function: Callable[Concatenate[ToolContext, ...], object]
    title: str
    annotations: ToolAnnotations


# Every tool works on the user's own vault only, so none is open-world. None is destructive:
# a save adds a memory, a correction keeps the old revision in the history, a delete writes a
# tombstone that restore_memory undoes; nothing is ever erased. Every writer is idempotent: the
# same call again changes nothing more, since each finds the memory already as asked and then
# writes nothing (it answers the memory as it is, with a note): a save finds the identical memory
# stored, a correction finds the memory saying it, a delete finds it deleted, a restore finds it
# live. tests/test_agent_edges.py holds each tool to its hints, calling it twice.
READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

# The tools in the order tools/list shows them.
TOOLS = (
    ToolSpec(get_context, "Get the user's context", READS),
    ToolSpec(search_memory, "Search memories", READS),
    ToolSpec(save_memory, "Save a memory", WRITES),
    ToolSpec(update_memory, "Correct a memory", WRITES),
    ToolSpec(get_memory, "Read a memory", READS),
    ToolSpec(delete_memory, "Delete a memory (restorable)", WRITES),
    ToolSpec(restore_memory, "Restore a deleted memory", WRITES),
    ToolSpec(list_memories, "List memories", READS),
)
