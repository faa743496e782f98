"""What `squirrel-mcp hook` tells an agent unasked: a session's briefing and a prompt's confident recall.

The memory process works these out in its store when a hook asks (squirrel_mcp.cli.hook_answers);
the hook prints them in its host's format. Each is plain text within a budget of characters,
one line per memory with its id, so that the agent can read a memory whole (get_memory) or
correct it (update_memory) rather than save it again. Both read what the tools read in the
hook's session project (and the memories with no project), through the tools' own code:
`get_context` for the briefing, `run_search` and `confident_hits` for the recall.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from squirrel_mcp.core.hello import HookRequest
from squirrel_mcp.core.models import Memory
from squirrel_mcp.plugins.manager import PluginHost
from squirrel_mcp.server.confidence import confident_hits
from squirrel_mcp.server.opening import Opening
from squirrel_mcp.server.results import SearchHit
from squirrel_mcp.server.searching import log_note, run_search
from squirrel_mcp.server.tools import ToolContext, get_context, session_project

if TYPE_CHECKING:
    from squirrel_mcp.book.memories import MemoryStore

# The most memories a prompt's recall shows: a few confident ones, not a search's page.
RECALL_LIMIT = 5
# The longest memory text a line shows, in characters; a longer one ends in "…" (get_memory reads
# it whole), so that one long memory never takes a whole budget.
CONTEXT_ITEM = 300
RECALL_ITEM = 240
CUT = "…"
SESSION_HEADER = (
    "Saved memories of this user (squirrel-mcp), of this project and of no project; "
    "[id]: get_memory reads one whole, update_memory corrects it."
)
RECALL_HEADER = (
    "Saved memories (squirrel-mcp) that closely match this prompt; "
    "[id]: get_memory reads one whole, update_memory corrects it."
)


def hook_text(store: MemoryStore, host: PluginHost, request: HookRequest, project: str | None) -> str | None:
    """The text answering `request` in `project` (None: none); None when there is nothing to say."""
    if request.event == "session-start":
        return session_text(store, host, project, request.budget)
    return recall_text(store, host, project, request.prompt or "", request.budget)


def session_text(store: MemoryStore, host: PluginHost, project: str | None, budget: int) -> str | None:
    """get_context of `project` as lines within `budget` characters; None for an empty memory.

    Profile, then preferences, then the recent others, as get_context orders them; what the
    budget leaves out is counted in the last line, which says how to reach it.
    """
    token = session_project.set(project)
    try:
        context = get_context(ToolContext(Opening(store), host))
    finally:
        session_project.reset(token)
    problem = log_note(store)
    if context.total == 0 and problem is None:
        return None
    sections = [
        ("Profile:", context.profile, False),
        ("Preferences:", context.preferences, False),
        ("Recent:", context.recent, True),
    ]
    items = [
        (title, _line(memory, CONTEXT_ITEM, category=shown))
        for title, memories, shown in sections
        for memory in memories
    ]
    head = [SESSION_HEADER] + ([problem] if problem is not None else [])

    def footer(shown: int) -> str | None:
        if shown >= context.total:
            return None
        return (
            f"Shown {shown} of {context.total} memories: search_memory finds the others by topic; "
            "get_context and list_memories list them."
        )

    return _fit(head, items, footer, budget, fewest=0 if problem is not None else 1)


def recall_text(
    store: MemoryStore, host: PluginHost, project: str | None, prompt: str, budget: int
) -> str | None:
    """The memories the ranking is confident in for `prompt` (at most RECALL_LIMIT); None: none."""
    if not prompt.strip():
        return None
    result = run_search(
        store, host, prompt, limit=RECALL_LIMIT, projects=frozenset({project, None}), now=datetime.now(UTC)
    )
    hits = confident_hits(result)[:RECALL_LIMIT]
    if not hits:
        return None
    items = [("", _line(hit, RECALL_ITEM, category=False)) for hit in hits]
    return _fit([RECALL_HEADER], items, lambda _shown: None, budget)


def _line(memory: Memory | SearchHit, longest: int, *, category: bool) -> str:
    """One memory as one line: its id, (its category,) its entity and its text, cut at `longest`."""
    text = " ".join(memory.text.split())
    if len(text) > longest:
        text = text[: longest - len(CUT)].rstrip() + CUT
    kind = f"{memory.category}, " if category else ""
    return f"- [{memory.id}] ({kind}{' '.join(memory.entity.split())}) {text}"


def _fit(
    head: list[str],
    items: Sequence[tuple[str, str]],
    footer: Callable[[int], str | None],
    budget: int,
    *,
    fewest: int = 1,
) -> str | None:
    """`head`, as many `items` (section title, line) as fit in `budget` characters, and the footer.

    Items are kept in order: the first that does not fit ends the list. None when fewer than
    `fewest` fit.
    """
    lines = list(head)
    best: str | None = None
    section = None
    for count in range(len(items) + 1):
        if count:
            title, line = items[count - 1]
            if title and title != section:
                lines.append(title)
                section = title
            lines.append(line)
        if count < fewest:
            continue
        last = footer(count)
        text = "\n".join(lines if last is None else [*lines, last])
        if len(text) > budget:
            break
        best = text
    return best
