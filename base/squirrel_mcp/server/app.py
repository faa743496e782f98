"""The MCP server: every tool of `TOOLS` bound to a context, the agent skill as a prompt.

The store may still be opening when the server starts (`Opening`): the handshake
and tools/list never wait for it, a tool call does. Argument errors name the
fields and rules, never the values (squirrel_mcp.server.refusals); an argument a
tool does not take is refused (`additionalProperties: false`), naming the one it
probably meant, and so is an explicit null.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

import anyio.from_thread
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts import Prompt
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_PARAMS
from pydantic import ConfigDict, ValidationError

from squirrel_mcp import __version__
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager
from squirrel_mcp.search.ranking import Progress
from squirrel_mcp.server.opening import Opening
from squirrel_mcp.server.refusals import ArgumentRefused, describe_invalid, null_errors, validation_errors
from squirrel_mcp.server.registry import TOOLS
from squirrel_mcp.server.searching import ProgressReport
from squirrel_mcp.server.stdio import stdio_transport
from squirrel_mcp.server.tools import ToolContext, request_progress, session_project
from squirrel_mcp.storage import StorageError

if TYPE_CHECKING:
    from squirrel_mcp.book.memories import MemoryStore

INSTRUCTIONS = """\
A private, encrypted memory of the user. Call get_context at the start of a session.
Before answering anything about the user, search_memory; if nothing fits, retry once
with nearMisses: true and check any near miss against the question. Save lasting facts
with a clear entity, tags and keywords so they are found again. When a memory is wrong
or outdated, correct it with update_memory instead of saving a second one."""


P = ParamSpec("P")
R = TypeVar("R")


def strict(tool: Tool) -> Tool:
    """The tool refusing arguments it does not take: `additionalProperties: false` in its input schema.

    The SDK's argument model ignores unknown keys, so a misspelt `tag` would be dropped
    and the memory saved without its tags; this one refuses them before the tool runs.
    """
    model = tool.fn_metadata.arg_model
    refusing = cast(
        type[ArgModelBase], type(model.__name__, (model,), {"model_config": ConfigDict(extra="forbid")})
    )
    return tool.model_copy(
        update={
            "fn_metadata": tool.fn_metadata.model_copy(update={"arg_model": refusing}),
            "parameters": refusing.model_json_schema(by_alias=True),
        }
    )


class SquirrelServer(MCPServer):
    """MCPServer whose argument errors never echo the arguments back, and that answers every bad line.

    Its tools wait for the store to open; everything else is answered at once.
    """

    def __init__(self, opening: Opening, tools: list[Tool], project: str | None = None) -> None:
        """A server of `tools`, working on the store `opening` opens; its own session is in `project`."""
        super().__init__(
            name="squirrel-mcp",
            version=__version__,
            instructions=INSTRUCTIONS,
            log_level="WARNING",
            tools=tools,
        )
        self.opening = opening
        self.project = project
        # Each tool's input schema: a refusal names the fields and what they take from it.
        self._schemas = {tool.name: tool.parameters for tool in tools}

    async def run_stdio_async(self) -> None:
        """Serve over stdio through squirrel_mcp.server.stdio.

        It answers the lines the SDK would drop, and at the end of input every
        request read before it (within a bound), where the SDK cancels them.
        """
        # The tools are built: the store's opening, which waited so as not to slow their
        # building, may begin (answering the handshake from here on is light).
        self.opening.serving()
        async with stdio_transport() as (read_stream, write_stream):
            await self.serve_session(read_stream, write_stream, self.project)

    async def serve_session(
        self,
        read_stream: MemoryObjectReceiveStream[SessionMessage | Exception],
        write_stream: MemoryObjectSendStream[SessionMessage],
        project: str | None,
    ) -> None:
        """Serve one MCP session, in `project` (None: none), over the given streams until its input ends.

        The shared memory process serves each bridge's session so, side by side, all
        on this one server: each has its own requests, progress, cancellation and
        project. The project is this task's context, which the tasks serving its
        requests and the threads running its tools inherit.
        """
        session_project.set(project)
        await self._lowlevel_server.run(
            read_stream, write_stream, self._lowlevel_server.create_initialization_options()
        )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        """Call a tool; argument errors name the fields and rules, not the values.

        A storage failure (the sync server unreachable, a key refused) is the
        user's to fix, not a crash: the agent gets its message, which names the
        cause and never a key or memory text. Every call first waits for the
        store to open, off the event loop so that other requests are answered
        meanwhile; if it could not be opened, every call gets the reason, even
        one with bad arguments.
        """
        await anyio.to_thread.run_sync(self.opening.wait, abandon_on_cancel=True)
        schema = self._schemas.get(name, {})
        # The Python signatures take None for an input left out; an explicit null is refused here,
        # as no input takes one (the schemas show none).
        nulls = null_errors(arguments, list(schema.get("properties", {})))
        if nulls:
            raise ToolError(describe_invalid(name, nulls, schema))
        token = request_progress.set(None if context is None else _progress_reporter(context))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            cause = error.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(describe_invalid(name, validation_errors(cause), schema)) from cause
            if isinstance(cause, ArgumentRefused):
                raise ToolError(f"invalid arguments for {name}: {cause}.") from cause
            if isinstance(cause, StorageError | ToolError):
                # The vault went bad while serving, or the tool refused: the agent hears the reason
                # itself, without the SDK's "Error executing tool" (and no traceback goes to the log).
                raise ToolError(str(cause)) from cause
            known = sorted(tool.name for tool in await self.list_tools())
            if name not in known:
                # The SDK's message repeats the name, whatever its length or content.
                raise ToolError(f"unknown tool; this server's tools are {', '.join(known)}") from None
            raise
        finally:
            request_progress.reset(token)

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> Any:
        """The prompt `name`, rendered; an unknown name or an argument it does not take is refused.

        The SDK's refusal repeats the name (a string the host chose) and logs a traceback
        holding it: this one names the prompts there are, and nothing reaches the log.
        """
        prompts = {prompt.name: prompt for prompt in await self.list_prompts()}
        if name not in prompts:
            raise MCPError(
                INVALID_PARAMS, f"unknown prompt; this server's prompts are {', '.join(sorted(prompts))}"
            )
        takes = sorted(argument.name for argument in prompts[name].arguments or [])
        if not set(arguments or {}) <= set(takes):
            raise MCPError(INVALID_PARAMS, f"the prompt {name} takes {', '.join(takes) or 'no arguments'}")
        return await super().get_prompt(name, arguments, context)


def _progress_reporter(context: Context[Any, Any]) -> ProgressReport:
    """Send a progress notification for the request `context` serves, from the tool's worker thread.

    The SDK sends nothing when the request carried no progress token.
    """

    def report(progress: Progress, message: str | None) -> None:
        anyio.from_thread.run(context.report_progress, progress.done, progress.total, message)

    return report


SKILL_NAME = "squirrel-notes"


def skill() -> str:
    """The agent skill: the habits that make this memory useful (start with get_context, ...)."""
    return (resources.files("squirrel_mcp") / "skill" / "SKILL.md").read_text(encoding="utf-8")


def _bind(tool: Callable[Concatenate[ToolContext, P], R], context: ToolContext) -> Callable[P, R]:
    """The tool with its context filled in, so its signature shows only the agent's arguments."""
    bound = functools.partial(tool, context)
    # The SDK names the tool and its argument model after `__name__`, which a partial lacks;
    # functools.update_wrapper would also set `__wrapped__`, whose signature shows the context.
    bound.__name__ = tool.__name__  # type: ignore[attr-defined]
    return bound


def create_server(
    store: MemoryStore | Opening, plugins: PluginHost | None = None, *, project: str | None = None
) -> SquirrelServer:
    """The MCP server with every tool bound to a memory store, unlocked or still opening.

    `plugins` ranks search hits; without it only the built-in lexical ranker does.
    The tools and their schemas are the same whatever plugins are installed. Served
    over stdio, its session is in `project` (a bridge's session says its own).
    """
    opening = store if isinstance(store, Opening) else Opening(store)
    context = ToolContext(opening, plugins or PluginHost(get_plugin_manager()))
    tools = [
        strict(
            Tool.from_function(
                _bind(spec.function, context),
                title=spec.title,
                description=inspect.cleandoc(spec.function.__doc__ or ""),
                annotations=spec.annotations,
            )
        )
        for spec in TOOLS
    ]
    server = SquirrelServer(opening, tools, project)
    server.add_prompt(
        Prompt.from_function(
            skill,
            name=SKILL_NAME,
            title="How to use this memory",
            description="The agent skill: start with get_context, search before answering, retry "
            "once with nearMisses, save memories that will be found again, correct rather than duplicate.",
        )
    )
    # The SDK serves resources on every server; this one has none, so it neither serves
    # nor announces them (capabilities are derived from the methods served).
    for method in [m for m in server._lowlevel_server._request_handlers if m.startswith("resources/")]:
        del server._lowlevel_server._request_handlers[method]
    return server
