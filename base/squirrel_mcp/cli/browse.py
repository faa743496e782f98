"""`squirrel-mcp search`, `list` and `show`: a person reads their memories as an agent does.

Each command unlocks the account as the server does (SQUIRREL_PASSPHRASE, or asked
on the terminal), then calls the server's own tool in this process: search_memory,
list_memories, get_memory with its history. So the ranking is the server's (hybrid
when the embeddings plugin is installed: the search waits for it to start), the
bounds on every option are the tool's (checked before any plugin starts), and
`--json` prints exactly the structured output the tool returns. Without `--json`
the output is for reading: one memory per line (list) or a short block per memory
(search, show), each saying its project. A plugin's notice that it is ready is left
out of stderr; one that says something is wrong is printed.

`search` and `list` read every project unless `--project` says otherwise: a person
sees all their memories, where an agent sees its session's project and those with
none. `--project NAME` is the tools' `project` argument: a name reads that project
and the memories with none, "" only those with none, "*" every project. `show`
takes an id, which names one memory whatever its project, or its first 6 digits or
more when no other memory's id begins with them (as git takes a commit's).

On a terminal a line is cut to its width, with "…" where text was left out; piped
or redirected, every line is whole, so what a script reads is everything.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import pluggy

from squirrel_mcp.cli.progress import ProgressBar
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.lines import notice_line
from squirrel_mcp.core.models import EVERY_PROJECT, HALF_LIFE_DAYS, Memory
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager
from squirrel_mcp.search.ranking import Progress
from squirrel_mcp.server.results import GetResult, ListResult, RevisionView, SearchResult

if TYPE_CHECKING:
    from squirrel_mcp.book.memories import MemoryStore

# How long a search waits for the plugins to start (the embeddings plugin loads its model)
# before it ranks with whatever is ready; the answer's "ranking" says which it was.
PLUGIN_START_TIMEOUT = 120.0
# While a ranker is still preparing (the embeddings plugin's warm-up), how often it is asked again.
READY_POLL = 0.25
# How a plugin's notice that all is well ends ("memory: local embeddings ready"); search leaves it out.
READY_SUFFIX = " ready"
# The width a terminal is taken to have when it does not say.
DEFAULT_WIDTH = 100
# The fewest digits of an id `show` takes for the whole id, as git takes a commit's.
SHORTEST_PREFIX = 6
ID_DIGITS = 16
HEX_DIGITS = frozenset("0123456789abcdef")
# How much of a project's name a list line gives it: its end, where a path or a remote differs.
LISTED_PROJECT_WIDTH = 40


class ToolRefused(Exception):
    """The tool refused the call (bad option, unknown id); its message names no value."""


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `search`, `list` and `show` to the command line's sub-parsers."""
    search = commands.add_parser("search", help="search your memories as an agent does (same ranking)")
    search.add_argument("query", help="what to look for, in your own words")
    search.add_argument("--limit", type=int, help="most results (1-50; default 10)")
    _add_filters(search)
    search.add_argument(
        "--near-misses", action="store_true", help="also show up to 3 closest memories that did not match"
    )
    listed = commands.add_parser("list", help="list memories, most recently changed first")
    _add_filters(listed)
    listed.add_argument("--entity", help="only memories about this entity (ignoring case)")
    listed.add_argument("--include-deleted", action="store_true", help="also list deleted memories")
    listed.add_argument("--offset", type=int, help="how many to skip (paging; default 0)")
    listed.add_argument("--limit", type=int, help="page size (1-100; default 20)")
    show = commands.add_parser("show", help="one memory with its whole history")
    show.add_argument(
        "id",
        help=f"the memory's id (16 hex digits), as search and list print it, or its first "
        f"{SHORTEST_PREFIX} or more when no other id begins with them",
    )
    for command in (search, listed, show):
        command.add_argument("--json", action="store_true", help="print the tool's JSON output instead")


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--category", choices=list(HALF_LIFE_DAYS), help="only memories of this category")
    parser.add_argument(
        "--tag", action="append", dest="tags", metavar="TAG", help="only memories with this tag (repeatable)"
    )
    parser.add_argument(
        "--project",
        default=EVERY_PROJECT,
        metavar="NAME",
        help='only this project and the memories with no project; "" only those with none; '
        '"*" every project (the default)',
    )


def tool_arguments(args: argparse.Namespace) -> tuple[str, dict[str, object]]:
    """The tool a parsed command calls, with only the options given (so the tool's defaults hold)."""
    given = {key: value for key, value in vars(args).items() if value is not None and value is not False}
    if args.command == "search":
        names = {
            "query": "query",
            "limit": "limit",
            "category": "category",
            "tags": "tags",
            "project": "project",
        }
        arguments = {names[key]: value for key, value in given.items() if key in names}
        if args.near_misses:
            arguments["nearMisses"] = True
        return "search_memory", arguments
    if args.command == "list":
        names = {
            "category": "category",
            "tags": "tags",
            "entity": "entity",
            "offset": "offset",
            "limit": "limit",
            "include_deleted": "includeDeleted",
            "project": "project",
        }
        return "list_memories", {names[key]: value for key, value in given.items() if key in names}
    return "get_memory", {"id": args.id, "history": True}


def call_tool(
    store: MemoryStore, host: PluginHost, name: str, arguments: dict[str, object]
) -> dict[str, Any]:
    """The structured output of the server's tool `name`, called in this process; ToolRefused if refused."""
    # Imported here: the other commands do not pay for importing the server.
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult

    from squirrel_mcp.server.app import create_server

    server = create_server(store, host)
    try:
        result = anyio.run(server.call_tool, name, arguments)
    except ToolError as error:
        # The SDK's prefix is for an agent; a person reads the refusal itself ("no memory has the id ...").
        raise ToolRefused(str(error).removeprefix(f"Error executing tool {name}: ")) from None
    if not isinstance(result, CallToolResult) or result.is_error or result.structured_content is None:
        raise ToolRefused(f"{name} gave no answer")
    structured: dict[str, Any] = result.structured_content
    return structured


def run(config: Config, pm: pluggy.PluginManager, args: argparse.Namespace, store: MemoryStore) -> int:
    """Run `search`, `list` or `show` on an unlocked store; print the answer; the exit status."""
    name, arguments = tool_arguments(args)
    if name == "get_memory":
        arguments["id"] = whole_id(store, args.id)
    host = PluginHost(pm, notice=unless_ready)
    if name == "search_memory":
        # The tool checks the arguments first, ranking by words only: a query it refuses
        # (too long, say) is refused before any plugin starts (and loads its model).
        call_tool(store, PluginHost(get_plugin_manager()), name, arguments)
        # The same rankers as the server, started as it starts them, and waited for so the
        # answer is ranked as an agent's would be once the server has warmed up.
        host.start(config, store)
        host.wait_started(PLUGIN_START_TIMEOUT)
    try:
        if name == "search_memory":
            # The first call validated the arguments; this one is asked once no ranker is still
            # preparing (a search asked before could be answered during a warm-up that ends
            # before the next look, and would print what the warm-up had not reached yet).
            wait_until_prepared(store, host, str(arguments["query"]))
        output = call_tool(store, host, name, arguments)
    finally:
        host.shutdown()
    if args.json:
        print(json.dumps(output, ensure_ascii=False, indent=2))
    else:
        print(render(name, output, _width()))
    return 0


def whole_id(store: MemoryStore, given: str) -> str:
    """The id `given` names: itself when whole, else the one id it begins; ToolRefused otherwise.

    Deleted memories count too (`show` shows them). What is given is said back only
    once it is known to be hex digits: anything else may be something else pasted.
    """
    digits = given.lower()
    if not (SHORTEST_PREFIX <= len(digits) <= ID_DIGITS and set(digits) <= HEX_DIGITS):
        raise ToolRefused(
            f"an id is {ID_DIGITS} hex digits (0-9 and a-f), as list and search print it; its first "
            f"{SHORTEST_PREFIX} or more are enough when no other memory's id begins with them"
        )
    if len(digits) == ID_DIGITS:
        return digits
    every = store.current(include_deleted=True)
    found = sorted(memory.id for memory in every if memory.id.startswith(digits))
    if not found:
        raise ToolRefused(f"no memory has an id beginning with '{digits}'")
    if len(found) > 1:
        raise ToolRefused(
            f"'{digits}' is the beginning of {len(found)} memories' ids ({', '.join(found)}); "
            "give more of the id"
        )
    return found[0]


def unless_ready(line: str) -> None:
    """A plugin's notice on stderr, unless it only says the plugin is ready: a person hears of problems."""
    if not line.endswith(READY_SUFFIX):
        notice_line(line)


def wait_until_prepared(store: MemoryStore, host: PluginHost, query: str) -> None:
    """Return once no ranker reports that it is still preparing (drawing its progress).

    The server answers during the embeddings plugin's warm-up, with a note saying how far
    it is; a one-off command has no next search, so it waits for the warm-up to finish
    (the vectors are kept, so the next command starts where this one stopped).
    """
    # Imported here: the other commands do not pay for importing the server.
    from squirrel_mcp.server.searching import run_search

    reported: list[Progress] = []
    with ProgressBar("preparing search by meaning", "memories") as bar:
        while True:
            reported.clear()
            run_search(
                store,
                host,
                query,
                limit=1,
                now=datetime.now(UTC),
                progress=lambda progress, _note: reported.append(progress),
            )
            if not reported:
                return
            bar(reported[-1].done, reported[-1].total)
            time.sleep(READY_POLL)


def render(name: str, output: dict[str, Any], width: int | None) -> str:
    """The tool's output for reading, through the tool's own output model.

    `width`: the terminal's, which lines are cut or wrapped to; None (not a terminal): lines are whole.
    """
    if name == "search_memory":
        return render_search(SearchResult.model_validate(output), width)
    if name == "list_memories":
        return render_list(ListResult.model_validate(output), width)
    return render_show(GetResult.model_validate(output), width)


def _width() -> int | None:
    """The terminal's width; None when the output is piped or redirected (nothing is cut)."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if sys.stdout.isatty() else None


def _one_line(text: str, width: int | None) -> str:
    """`text` on one line (line breaks shown as ⏎), cut to `width` characters with an ellipsis."""
    flat = " ⏎ ".join(part.strip() for part in text.splitlines() if part.strip())
    return flat if width is None or len(flat) <= width else flat[: max(1, width - 1)] + "…"


def _rest(width: int | None, head: str) -> int | None:
    """What is left of a line of `width` after `head` (at least 20); None for a whole line."""
    return None if width is None else max(20, width - len(head))


def project_label(project: str | None, width: int | None = None) -> str:
    """Where a memory belongs, as the output says it: "in NAME", or "no project" (it holds everywhere).

    With `width`, a longer name keeps its end after an ellipsis ("in …/src/notes").
    """
    if project is None:
        return "no project"
    if width is not None and len(project) > width:
        project = "…" + project[len(project) - width + 1 :]
    return f"in {project}"


def _labels(tags: list[str]) -> str:
    return f"  [{', '.join(tags)}]" if tags else ""


def _indented(text: str, width: int | None) -> str:
    lines = []
    for paragraph in text.splitlines() or [""]:
        if width is None:
            lines.append(paragraph)
        else:
            lines += textwrap.wrap(paragraph, max(20, width - 4)) or [""]
    return "\n".join(f"    {line}" for line in lines)


def render_search(result: SearchResult, width: int | None) -> str:
    """A short block per hit (id, entity, category, scores; the text), then how many matched."""
    blocks = []
    for hit in result.results:
        scores = f"score {hit.score:.3f} · words {hit.lexicalScore:.2f}"
        if hit.semanticScore is not None:
            scores += f" · meaning {hit.semanticScore:.2f}"
        near = " · NEAR MISS (did not match; check it)" if hit.nearMiss else ""
        head = f"{hit.id}  {hit.entity} · {hit.category} · {project_label(hit.project)} · {scores}{near}"
        blocks.append(f"{head}\n{_indented(hit.text, width)}{_labels(hit.tags)}")
    matches = sum(1 for hit in result.results if not hit.nearMiss)
    footer = f"{matches} of {result.total} matches shown · ranking {result.ranking}"
    if result.note:
        footer += f"\n{result.note}"
    return "\n\n".join([*blocks, footer])


def render_list(result: ListResult, width: int | None) -> str:
    """One memory per line: id, date of its last change, category, project, entity and text; then the page."""
    lines = []
    for memory in result.memories:
        deleted = " (deleted)" if memory.deleted else ""
        where = project_label(memory.project, None if width is None else LISTED_PROJECT_WIDTH)
        head = f"{memory.id}  {memory.updatedAt[:10]}  {memory.category:<10}  {where} · "
        rest = f"{memory.entity}: {memory.text}{_labels(memory.tags)}{deleted}"
        lines.append(head + _one_line(rest, _rest(width, head)))
    shown, offset = len(result.memories), result.offset
    if shown:
        more = f"; --offset {offset + shown} for more" if offset + shown < result.total else ""
        lines.append(f"memories {offset + 1}-{offset + shown} of {result.total}{more}")
    else:
        lines.append(f"no memories on this page ({result.total} pass the filters)")
    return "\n".join(lines)


def _fields(memory: Memory, deleted: bool) -> list[str]:
    fields = [
        ("id", memory.id),
        ("entity", memory.entity),
        ("category", memory.category),
        ("project", memory.project or "none (it holds everywhere)"),
        ("tags", ", ".join(memory.tags) or "-"),
        ("keywords", ", ".join(memory.keywords) or "-"),
        ("created", memory.createdAt),
        ("updated", memory.updatedAt),
        ("revision", f"{memory.revision}{' (deleted; restore_memory undoes it)' if deleted else ''}"),
    ]
    return [f"{label:<9} {value}" for label, value in fields]


# The fields a revision can change, in the order a history line names them.
CHANGEABLE = ("entity", "text", "category", "project", "tags", "keywords")


def _what_changed(revision: RevisionView, before: RevisionView | None) -> str:
    """A history line's summary: the fields changed, the project moved to, the reason, then the text.

    The move and the reason come before the text, so a cut line loses text first;
    the first revision (or one after a gap) shows its project and text.
    """
    if before is None:
        return f"{project_label(revision.project)} · {revision.text}"
    changed = [name for name in CHANGEABLE if getattr(revision, name) != getattr(before, name)]
    fields = [name for name in changed if name != "project"]
    parts = [f"changed {', '.join(fields)}"] if fields else []
    if "project" in changed:
        parts.append(f"moved to {revision.project or 'no project'}")
    if revision.reason:
        parts.append(f"reason: {revision.reason}")
    if "text" in changed:
        parts.append(revision.text)
    elif fields == ["tags"]:
        parts.append(f"tags now: {', '.join(revision.tags) or '-'}")
    return " · ".join(parts)


def render_show(result: GetResult, width: int | None) -> str:
    """The memory's fields and text, then its history: one revision per line, oldest first.

    Each line after the first says which fields its revision changed and why, when a reason was given.
    """
    lines = [*_fields(result.memory, result.deleted), "", _indented(result.memory.text, width)]
    lines += ["", "history (oldest first):"]
    before: RevisionView | None = None
    for revision in result.history or []:
        head = f"  {revision.revision:>3}  {revision.updatedAt[:19]}  {revision.change:<9}  "
        follows = before if before is not None and before.revision == revision.revision - 1 else None
        lines.append(head + _one_line(_what_changed(revision, follows), _rest(width, head)))
        before = revision
    if result.note:
        lines += ["", result.note]
    return "\n".join(lines)
