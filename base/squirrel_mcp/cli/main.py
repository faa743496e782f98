"""The `squirrel-mcp` command: serve MCP over stdio, or manage the vault.

    squirrel-mcp            serve over stdio (what an MCP client config runs)
    squirrel-mcp init       create a vault (or, with SQUIRREL_API_BASE_URL, the account
                            on a sync server) and print a client config block; --keychain keeps
                            the passphrase in the OS keychain, so that block holds no secret
    squirrel-mcp keychain store|forget|status
                            keep the passphrase (and API key) in the OS keychain, remove it,
                            or say whether the entry there still unlocks the account
    squirrel-mcp passphrase change the passphrase (asks the current one, then the new one twice;
                            or SQUIRREL_PASSPHRASE and SQUIRREL_NEW_PASSPHRASE); memories stay as they are
    squirrel-mcp export     every memory with its history, as JSON (-o FILE; --force replaces FILE)
    squirrel-mcp import F   add an export's memories (safe to repeat); --from server-memory
                            reads the official memory server's JSONL instead (--skip-invalid:
                            import its valid lines, naming the others); --create makes a
                            missing vault (refused otherwise)
    squirrel-mcp search Q   search your memories as an agent does (also: list, show ID; --json;
                            --project NAME, "" or "*": every project unless said)
    squirrel-mcp projects   the projects with their memories' counts, and the one this folder is in
    squirrel-mcp doctor     one line per check, each with its fix; each host's entry tried with
                            its own env (does it unlock? which project?); exit 1 when any fails
                            (--accept-log: accept the memory log as it is now, after its check failed)
    squirrel-mcp ui         a page on 127.0.0.1 to see, search, correct and forget memories
    squirrel-mcp --version

Errors a user can cause (no passphrase, wrong passphrase, no vault) print one
line on stderr and exit non-zero; they never print a secret or memory text.
The server is the exception: it unlocks in the background after the MCP
handshake, and when that fails it prints the line once and keeps serving,
answering every tool call with that line, so the MCP host shows the reason.

Exit status: 0 done; 1 an error, nothing written (import: some revisions
conflicted); 3 (export only) the export was written but some records could not
be read, so it lacks those revisions: stderr names each memory id and revision
number left out, and a backup script should treat the export as incomplete.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import pluggy

from squirrel_mcp import __version__
from squirrel_mcp.cli import browse, hooks_install, projects
from squirrel_mcp.cli.bridge import NOT_TRIED
from squirrel_mcp.cli.serve import cmd_browse, cmd_serve, cmd_ui
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.plugins.manager import get_plugin_manager, load_plugins, register_commands

if TYPE_CHECKING:
    # Only a name for argparse's own type (not subscriptable as the program runs).
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an argument it does not know is its own error, under its own usage.

    argparse hands a subcommand's unknown arguments up to the top-level parser, which then
    prints its usage, not the subcommand's. The error names unknown options only (without
    any `=VALUE`): a stray word may be part of a query or memory text.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Parse as argparse does, then refuse anything left over."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            options = [extra.split("=", 1)[0] for extra in extras if extra.startswith("-")]
            words = len(extras) - len(options)
            named = [f"unrecognized option{_s(options)}: {' '.join(options)}"] if options else []
            if words:
                named.append(f"{words} unexpected argument{_s(range(words))} (quote a query of many words)")
            self.error("; ".join(named))
        return parsed, extras


def _s(items: Sequence[object]) -> str:
    return "s" if len(items) > 1 else ""


def build_parser(pm: pluggy.PluginManager | None = None) -> argparse.ArgumentParser:
    """The command line's parser, with the subcommands the plugins of `pm` add."""
    parser = argparse.ArgumentParser(
        prog="squirrel-mcp",
        description="A private, encrypted memory for AI agents. With no command, serves MCP over stdio.",
    )
    parser.add_argument("--version", action="version", version=f"squirrel-mcp {__version__}")
    # Typed as argparse's own: the plugins' register_commands hook takes that type.
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", parser_class=CommandParser),
    )
    commands.add_parser("serve", help="serve MCP over stdio (the default)")
    _add_account_commands(commands)
    _add_transfer_commands(commands)
    browse.add_commands(commands)
    projects.add_command(commands)
    hooks_install.add_commands(commands)
    doctor = commands.add_parser(
        "doctor",
        help="check the settings, vault or sync server, passphrase, log, plugins, and each MCP host's entry "
        "as the host will run it (its command, whether its own env unlocks, its project)",
    )
    doctor.add_argument(
        "--accept-log",
        action="store_true",
        help="accept the memory log as it is now when its check failed (say, after restoring a backup): "
        "this machine's checkpoint is set to it and writing resumes",
    )
    ui = commands.add_parser("ui", help="a page on 127.0.0.1 to see, search, correct and forget memories")
    ui.add_argument("--port", type=int, default=0, help="the port to serve on (default: a free one)")
    ui.add_argument("--no-browser", action="store_true", help="print the address, do not open a browser")
    ui.set_defaults(run=lambda args: cmd_ui(args, pm))
    if pm is not None:
        register_commands(pm, commands)
    return parser


def _add_account_commands(commands: Commands) -> None:
    """`init`, `keychain` and `passphrase`: the account and where its secrets are kept."""
    init = commands.add_parser(
        "init",
        help="create an encrypted vault (or an account on the sync server SQUIRREL_API_BASE_URL names) "
        "and print an MCP client config block",
    )
    init.add_argument(
        "--keychain",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep the passphrase (and API key) in the OS keychain, so the client config holds no secret "
        "(default: asked on a terminal, no otherwise)",
    )
    keychain = commands.add_parser(
        "keychain", help="the passphrase (and API key) in the OS keychain: store, forget, status"
    )
    keychain.add_argument(
        "action",
        choices=["store", "forget", "status"],
        help="store: keep SQUIRREL_PASSPHRASE (or the one typed) once it unlocks the account; forget: "
        "remove the entries; status: say whether the entry there still unlocks the account",
    )
    commands.add_parser(
        "passphrase",
        help="change the passphrase: asks the current one, then the new one twice (or reads "
        "SQUIRREL_PASSPHRASE and SQUIRREL_NEW_PASSPHRASE); memories stay as they are",
    )


def _add_transfer_commands(commands: Commands) -> None:
    """`export` and `import`: every memory with its history, out and in."""
    export = commands.add_parser("export", help="write every memory with its history as JSON")
    export.add_argument("-o", "--output", help="file to write (mode 0600); default: stdout")
    export.add_argument("--force", action="store_true", help="replace the output file if it exists")
    imported = commands.add_parser("import", help="add the memories of an export file (safe to repeat)")
    imported.add_argument("file", help="an export file, or - for stdin")
    imported.add_argument(
        "--from",
        dest="source_format",
        choices=["squirrel-mcp", "server-memory"],
        default="squirrel-mcp",
        help="the file's format: squirrel-mcp's export (the default), or the JSONL of the official "
        "memory server (@modelcontextprotocol/server-memory, its MEMORY_FILE_PATH)",
    )
    imported.add_argument(
        "--skip-invalid",
        action="store_true",
        help="--from server-memory: import the valid lines and name the others on stderr (line number "
        "and fields); without it, one invalid line refuses the whole file",
    )
    imported.add_argument(
        "--create",
        action="store_true",
        help="create the vault if it does not exist (with SQUIRREL_PASSPHRASE); without it, a missing "
        "vault is refused",
    )


def main(argv: list[str] | None = None, bridged: str | None = NOT_TRIED) -> int:
    """The command line (`squirrel_mcp.cli.entry` calls it); `bridged`: what the bridge came to, if tried."""
    pm = get_plugin_manager()
    load_plugins(pm)
    args = build_parser(pm).parse_args(argv)
    config = Config.from_env()
    try:
        return run_command(args, config, pm, bridged)
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        from squirrel_mcp.cli.unlock import error_line

        line = error_line(error)
        if line is None:
            raise
        log_line(line)
        return 1


def run_command(
    args: argparse.Namespace, config: Config, pm: pluggy.PluginManager, bridged: str | None = NOT_TRIED
) -> int:
    """Run the parsed command, importing its code only then (serving, the default, imports least)."""
    if getattr(args, "run", None) is not None:
        # A plugin's subcommand (register_commands): it reads its own settings.
        return int(args.run(args))
    if args.command in ("init", "passphrase"):
        from squirrel_mcp.cli import account

        if args.command == "init":
            return account.cmd_init(config, keep_in_keychain=args.keychain)
        return account.cmd_passphrase(config)
    if args.command == "keychain":
        from squirrel_mcp.cli.keychain import cmd_keychain

        return cmd_keychain(config, args.action)
    if args.command == "export":
        from squirrel_mcp.cli import backup

        return backup.cmd_export(config, args.output, force=args.force)
    if args.command == "import":
        return _run_import(args, config)
    if args.command in ("search", "list", "show"):
        return cmd_browse(config, pm, args)
    if args.command == "projects":
        return _run_projects(args, config)
    if args.command == "doctor":
        from squirrel_mcp.cli import doctor

        return doctor.run(config, accept_log=args.accept_log)
    return cmd_serve(config, pm, bridged)


def _run_projects(args: argparse.Namespace, config: Config) -> int:
    from squirrel_mcp.cli.unlock import open_store

    store = open_store(config, create=False)
    try:
        return projects.run(store, as_json=args.json)
    finally:
        store.close()


def _run_import(args: argparse.Namespace, config: Config) -> int:
    from squirrel_mcp.cli import backup
    from squirrel_mcp.cli.unlock import UserError

    if args.source_format == "server-memory":
        return backup.cmd_import_server_memory(
            config, args.file, create=args.create, skip_invalid=args.skip_invalid
        )
    if args.skip_invalid:
        raise UserError("--skip-invalid applies to --from server-memory only; nothing was imported")
    return backup.cmd_import(config, args.file, create=args.create)
