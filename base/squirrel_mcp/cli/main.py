"""The `squirrel-mcp` command: serve MCP over stdio, or manage the vault.

    squirrel-mcp            serve over stdio (what an MCP client config runs)
    squirrel-mcp init       create a vault (or, with SQUIRREL_API_BASE_URL, the account
                            on a sync server) and print a client config block
    squirrel-mcp passphrase change the passphrase (asks the current one, then the new one twice;
                            or SQUIRREL_PASSPHRASE and SQUIRREL_NEW_PASSPHRASE); memories stay as they are
    squirrel-mcp export     every memory with its history, as JSON (-o FILE; --force replaces FILE)
    squirrel-mcp import F   add an export's memories (safe to repeat); --from server-memory
                            reads the official memory server's JSONL instead
    squirrel-mcp search Q   search your memories as an agent does (also: list, show ID; --json)
    squirrel-mcp doctor     one line per check, each with its fix; exit 1 when any fails
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
import getpass
import importlib.metadata
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pluggy
from pydantic import ValidationError

from squirrel_mcp import __version__
from squirrel_mcp.book import rekey, server_memory
from squirrel_mcp.book.checkpoint import Place
from squirrel_mcp.book.memories import LogDivergedError, MemoryStore, NoAccountError
from squirrel_mcp.book.transfer import (
    ImportFileError,
    export_json,
    field_locations,
    import_export,
    parse_export,
)
from squirrel_mcp.cli import browse
from squirrel_mcp.cli.progress import ProgressBar
from squirrel_mcp.core.config import APP_NAME, Config, ConfigError, check_api_base_url
from squirrel_mcp.core.files import atomic_write
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.keys.crypto import KdfParams, WrongPassphraseError, unwrap_data_key
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager, load_plugins, register_commands
from squirrel_mcp.storage import NO_REMOTE_ACCOUNT, Account, KeyChanged, Storage, StorageError
from squirrel_mcp.storage.local import LocalVault

if TYPE_CHECKING:
    # Imported when serving only: the other commands do not pay for importing the MCP SDK.
    from squirrel_mcp.server.opening import Opening

MIN_PASSPHRASE = 8
# How often `init` asks for a passphrase long enough before it gives up.
PASSPHRASE_ATTEMPTS = 3
# `export` wrote its file but left out revisions it could not read (see the module docstring).
EXIT_EXPORT_INCOMPLETE = 3
# How many memories with gaps an export names one by one before summing up the rest.
MAX_GAPS_LISTED = 50


class UserError(Exception):
    """Something the user can fix; the message says what."""


# Errors a user can cause and fix: one line on stderr, no traceback (their messages hold no secret).
USER_ERRORS = (
    UserError,
    ConfigError,
    StorageError,
    WrongPassphraseError,
    NoAccountError,
    ImportFileError,
    LogDivergedError,
)


def _passphrase(config: Config, *, confirm: bool, prompt: str = "Passphrase: ") -> str:
    """SQUIRREL_PASSPHRASE, or asked on the terminal without echo.

    `confirm` (a new account's): asked twice, at least MIN_PASSPHRASE characters.
    """
    if config.passphrase:
        return config.passphrase
    if not sys.stdin.isatty():
        raise UserError("SQUIRREL_PASSPHRASE is not set (and there is no terminal to ask on)")
    if confirm:
        return _ask_new(prompt, "nothing was created")
    return getpass.getpass(prompt)


def _ask_new(prompt: str, nothing: str) -> str:
    """A new passphrase asked on the terminal: again while too short (a few times), then to confirm."""
    first = getpass.getpass(prompt)
    for _ in range(PASSPHRASE_ATTEMPTS - 1):
        if len(first) >= MIN_PASSPHRASE:
            break
        print(f"The passphrase must have at least {MIN_PASSPHRASE} characters; try again.", file=sys.stderr)
        first = getpass.getpass(prompt)
    if len(first) < MIN_PASSPHRASE:
        raise UserError(f"the passphrase must have at least {MIN_PASSPHRASE} characters; {nothing}")
    if getpass.getpass(f"{prompt.removesuffix(': ')} again: ") != first:
        raise UserError(f"the two passphrases differ; {nothing}")
    return first


def _check_new(variable: str, passphrase: str, nothing: str) -> None:
    """Refuse a new passphrase from `variable` shorter than the prompt accepts (an existing one may be)."""
    if len(passphrase) < MIN_PASSPHRASE:
        raise UserError(
            f"{variable} is too short for a new passphrase: it must have at least {MIN_PASSPHRASE} "
            f"characters; {nothing} (an existing vault or account opens with any passphrase)"
        )


def open_storage(config: Config, *, create: bool) -> Storage:
    """The configured backend: the sync server's API when SQUIRREL_API_BASE_URL is set, else the vault."""
    config.check()
    if config.api_base_url is not None and config.api_key is not None:
        # Imported here: the local vault's start-up does not pay for importing requests.
        from squirrel_mcp.storage.remote import RemoteStorage

        return RemoteStorage(check_api_base_url(config.api_base_url), config.api_key)
    vault = LocalVault(config.vault_path, create=create)
    for path, mode in vault.corrected_modes:
        log_line(
            f"{path} could be read or written by other users (mode {mode:04o}); its mode is now 0600. "
            "Whoever read it holds sealed records that only your passphrase protects"
        )
    return vault


def _where(config: Config) -> str:
    """Where the memories live, for messages: the server's address or the vault's path."""
    if config.api_base_url is not None:
        parts = urlsplit(check_api_base_url(config.api_base_url))
        return f"the sync server at {parts.scheme}://{parts.netloc}"
    return f"the vault at {config.vault_path}"


def checkpoints(config: Config) -> Place:
    """Where this machine keeps the checkpoints of the configured log (squirrel_mcp.book.checkpoint)."""
    if config.api_base_url is not None:
        location = check_api_base_url(config.api_base_url)
    else:
        location = str(config.vault_path.resolve())
    return Place(config.cache_dir / APP_NAME, location)


def open_store(
    config: Config, *, create: bool, progress: Callable[[int, int], None] | None = None
) -> MemoryStore:
    """Unlock the configured account (creating a local vault's first when `create` and it is missing).

    On a sync server only `init` creates the account: a missing one is NoAccountError.
    `progress` becomes the store's (told how far each pull's decryption has got).
    """
    config.check()
    if not config.passphrase and create:
        raise UserError("SQUIRREL_PASSPHRASE is not set; run `squirrel-mcp init` to create a vault")
    existed = config.remote or config.vault_path.exists()
    if create and config.passphrase and not existed:
        _check_new("SQUIRREL_PASSPHRASE", config.passphrase, "no vault was created")
    storage = open_storage(config, create=create)
    try:
        account = storage.load_account()
        if account is not None:
            _check_kdf(config, account.kdf)
        passphrase = _passphrase(config, confirm=False)
        if account is None:
            if config.remote:
                # Only `init` creates an account on a server: one that answers "no account"
                # may have lost its database, and serving would then write into an empty memory.
                raise NoAccountError(f"{_where(config)} {NO_REMOTE_ACCOUNT}")
            if not create:
                raise NoAccountError(f"the vault at {config.vault_path} holds no account")
            _check_new("SQUIRREL_PASSPHRASE", passphrase, "no account was created")
            store = MemoryStore.create(storage, passphrase, checkpoints=checkpoints(config))
            store.progress = progress
            # An existing file without an account is one whose creation was cut short,
            # or one emptied since: either way the user should hear of the new account.
            log_line(
                f"created a new vault at {config.vault_path}"
                if not existed
                else f"the vault at {config.vault_path} held no account; created a new one in it"
            )
            return store
        with _explaining(config, storage):
            store = MemoryStore.unlock(storage, passphrase, checkpoints(config), progress=progress)
        # The account read before the unlock: if the key changed in between, the next
        # unlock with this passphrase remembers the right one.
        _remember(config, account)
        return store
    except BaseException:
        storage.close()
        raise


@contextmanager
def _explaining(config: Config, storage: Storage) -> Iterator[None]:
    """A wrong passphrase's error, or a PassphraseChangedError when this machine can tell it was changed."""
    try:
        yield
    except WrongPassphraseError:
        changed = rekey.explain(config.cache_dir / APP_NAME, storage.load_account(), _where(config))
        if changed is None:
            raise
        raise changed from None


def _remember(config: Config, account: Account, *, changed_here: bool = False) -> None:
    """Remember the key this machine unlocked (or set); a cache that cannot be written only costs the hint."""
    try:
        rekey.remember(config.cache_dir / APP_NAME, account, changed_here=changed_here)
    except OSError as error:
        log_line(
            f"cannot write to the cache directory {config.cache_dir / APP_NAME} ({error.strerror}): "
            "a later change of the passphrase will be reported as a wrong passphrase"
        )


def _check_kdf(config: Config, kdf: KdfParams) -> None:
    """Refuse stored key-derivation parameters outside the bounds, before any passphrase is asked for.

    They come from the vault file or the sync server; out of bounds, scrypt would
    take gigabytes or minutes (derive_kek refuses them too, but as a bug's ValueError).
    """
    try:
        kdf.validate()
    except ValueError as error:
        raise StorageError(
            f"the key parameters of {_where(config)} are out of bounds ({error}): this squirrel-mcp "
            "did not make them, so the account record was damaged or tampered with"
        ) from None


def _client_config(config: Config) -> str:
    env = {"SQUIRREL_PASSPHRASE": "<your passphrase>"}
    if config.api_base_url is not None:
        env["SQUIRREL_API_BASE_URL"] = check_api_base_url(config.api_base_url)
        env["SQUIRREL_API_KEY"] = "<your API key>"
    elif config.vault_path != Config.from_env({}).vault_path:
        env["SQUIRREL_VAULT"] = str(config.vault_path)
    command, args = server_command()
    block = {"mcpServers": {"squirrel-notes": {"command": command, "args": args, "env": env}}}
    return json.dumps(block, indent=2)


def server_command(environ: Mapping[str, str] = os.environ) -> tuple[str, list[str]]:
    """The `command` and `args` that start this same installation from an MCP client.

    Absolute paths: a client (Claude Desktop, Claude Code, Cursor) does not start its
    servers from your shell, so a bare `squirrel-mcp` found on your PATH is not found
    there. Under uvx (an environment in uv's cache, which uv may clear), the uvx form,
    with the `embeddings` extra when the plugin is installed.
    """
    prefix = Path(sys.prefix)
    if "UV" in environ and prefix.parent.name.startswith("archive-v"):
        uvx = Path(environ["UV"]).with_name("uvx")
        args = ["--from", "squirrel-mcp[embeddings]", "squirrel-mcp"]
        if not _installed("squirrel-mcp-embeddings"):
            args = ["squirrel-mcp"]
        return str(uvx) if uvx.is_file() else "uvx", args
    script = Path(sys.argv[0])
    if script.name == "__main__.py":  # python -m squirrel_mcp
        return sys.executable, ["-m", "squirrel_mcp"]
    # Not resolved: pipx's link in its bin directory outlives upgrades of its venv.
    return str(script.absolute()), []


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def cmd_init(config: Config) -> int:
    """Create the vault, or the account on the sync server, asking for the passphrase twice.

    SQUIRREL_PASSPHRASE, when set, is used instead of asking. On a server the
    API key's slot must be empty (the server's operator issues keys).
    """
    if config.passphrase:
        # Before the vault file is made: nothing is created with a passphrase too short.
        _check_new("SQUIRREL_PASSPHRASE", config.passphrase, "nothing was created")
    storage = open_storage(config, create=True)
    where = _where(config)
    try:
        if storage.load_account() is not None:
            if config.remote:
                raise UserError(f"{where} already holds an account for this API key; nothing was changed")
            raise UserError(f"a vault already exists at {config.vault_path}; nothing was changed")
        MemoryStore.create(storage, _passphrase(config, confirm=True))
    finally:
        storage.close()
    if config.remote:
        print(f"Created an encrypted account on {where}\n")
    else:
        print(f"Created an encrypted vault at {config.vault_path}\n")
    print("Add this to your MCP client's config (Claude Desktop, Claude Code, Cursor, ...),")
    if config.remote:
        print("with your API key and passphrase in place of the placeholders:\n")
    else:
        print("with your passphrase in place of the placeholder:\n")
    print(_client_config(config))
    return 0


def cmd_passphrase(config: Config) -> int:
    """Change the passphrase: the current one, then the new one twice, asked (or from the environment).

    SQUIRREL_PASSPHRASE and SQUIRREL_NEW_PASSPHRASE, when set, are used instead of
    asking. The data key is wrapped under the new passphrase and swapped in with
    `Storage.replace_key`; the records are not touched (see squirrel_mcp.book.rekey).
    """
    storage = open_storage(config, create=False)
    where = _where(config)
    try:
        account = storage.load_account()
        if account is None:
            raise NoAccountError(
                f"{where} {NO_REMOTE_ACCOUNT}" if config.remote else f"{where} holds no account"
            )
        _check_kdf(config, account.kdf)
        current = _passphrase(config, confirm=False, prompt="Current passphrase: ")
        with _explaining(config, storage):
            data_key = unwrap_data_key(current, account.kdf, account.account_id, account.wrapped_data_key)
        new = _new_passphrase(config, current)
        changed = rekey.rekey(account, data_key, new)
        try:
            storage.replace_key(account, changed)
        except KeyChanged:
            other = "another machine" if config.remote else "another process"
            raise UserError(
                f"the passphrase of {where} was changed by {other} while this command ran; nothing was "
                "changed here: run `squirrel-mcp passphrase` again, with the passphrase now in use"
            ) from None
    finally:
        storage.close()
    _remember(config, changed, changed_here=True)
    print(f"Changed the passphrase of {where}; every memory stays as it was.")
    print("Set SQUIRREL_PASSPHRASE to the new passphrase in your MCP client's config (and wherever else")
    print("it is set). Servers running now keep working; they need the new one when they start again.")
    if config.remote:
        print("Other machines using this account need it too: until they have it, they are told the")
        print("passphrase was changed.")
    return 0


def _new_passphrase(config: Config, current: str) -> str:
    """SQUIRREL_NEW_PASSPHRASE, or asked twice on the terminal: at least MIN_PASSPHRASE characters."""
    nothing = "nothing was changed"
    if config.new_passphrase:
        new = config.new_passphrase
        _check_new("SQUIRREL_NEW_PASSPHRASE", new, nothing)
    elif sys.stdin.isatty():
        new = _ask_new("New passphrase: ", nothing)
    else:
        raise UserError(f"SQUIRREL_NEW_PASSPHRASE is not set (and there is no terminal to ask on); {nothing}")
    if new == current:
        raise UserError(f"the new passphrase is the current one; {nothing}")
    return new


def _check_output(output: Path, *, force: bool) -> None:
    """Refuse an export path that is a symbolic link, or an existing file without `force`."""
    if output.is_symlink():
        raise UserError(f"{output} is a symbolic link; give the real path to export to")
    if output.exists() and not force:
        raise UserError(f"{output} exists; add --force to replace it")
    if not output.parent.is_dir():
        # A typo in the path must not leave a backup in a directory the user never meant to make.
        raise UserError(f"the directory {output.parent} does not exist; create it first, or export elsewhere")


def cmd_export(config: Config, output: str | None, *, force: bool = False) -> int:
    """Write every memory with its history as JSON to a file (mode 0600) or stdout.

    Revisions that cannot be read are left out and named on stderr (exit status
    EXIT_EXPORT_INCOMPLETE): one damaged record must not block every backup.
    """
    target = None if output in (None, "-") else Path(output)
    if target is not None:
        _check_output(target, force=force)
    with ProgressBar("reading", "records") as reading:
        store = open_store(config, create=False, progress=reading)
        try:
            export = export_json(store)
        finally:
            store.close()
    if target is None:
        sys.stdout.buffer.write(export.data)
        sys.stdout.flush()
    else:
        atomic_write(target, export.data)
    for gap in export.gaps[:MAX_GAPS_LISTED]:
        log_line(f"left out, unreadable: {gap}")
    if len(export.gaps) > MAX_GAPS_LISTED:
        log_line(f"left out, unreadable: revisions of {len(export.gaps) - MAX_GAPS_LISTED} more memories")
    where = "" if target is None else f" to {target}"
    if export.gaps:
        log_line(
            f"exported{where} WITHOUT the revisions above: their records failed the integrity check "
            f"(damaged or tampered with), or were missing already in the export this vault was "
            f"imported from; exit status {EXIT_EXPORT_INCOMPLETE}"
        )
        return EXIT_EXPORT_INCOMPLETE
    if target is not None:
        log_line(f"exported to {target}")
    return 0


def cmd_import(config: Config, source: str) -> int:
    """Add an export file's memories; repeating it changes nothing.

    The file is checked before the vault is opened, so a wrong file is named before
    any passphrase is asked for. Like export, the passphrase comes from
    SQUIRREL_PASSPHRASE or is asked on the terminal; only with SQUIRREL_PASSPHRASE
    set does import create a missing vault (`init` creates one otherwise).
    """
    data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    parsed = parse_export(data, "stdin" if source == "-" else source)
    with ProgressBar("reading", "records") as reading, ProgressBar("importing", "memories") as importing:
        store = open_store(config, create=config.passphrase is not None, progress=reading)
        try:
            report = import_export(store, parsed, importing)
        finally:
            store.close()
    print(
        f"imported {report.memories} memories: {report.added} revisions added, "
        f"{report.present} already present, {report.conflicts} conflicting (left as they were)"
    )
    return 1 if report.conflicts else 0


def cmd_import_server_memory(config: Config, source: str) -> int:
    """Add the memories of the official memory server's JSONL file; repeating it adds nothing.

    Unlocks as `import` does, after the whole file was checked.
    """
    data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    items = server_memory.parse_graph(data, "stdin" if source == "-" else source)
    with ProgressBar("reading", "records") as reading, ProgressBar("importing", "memories") as importing:
        store = open_store(config, create=config.passphrase is not None, progress=reading)
        try:
            report = server_memory.import_graph(store, items, importing)
        finally:
            store.close()
    print(
        f"imported {report.entities} entities and {report.relations} relations from server-memory: "
        f"{report.added} memories added, {report.present} already present"
    )
    return 0


def cmd_browse(config: Config, pm: pluggy.PluginManager, args: argparse.Namespace) -> int:
    """`search`, `list` or `show`: unlock as the server does, then answer as its tool does."""
    store = open_store(config, create=False)
    try:
        return browse.run(config, pm, args, store)
    except browse.ToolRefused as error:
        raise UserError(str(error)) from None
    finally:
        store.close()


def _open_in_background(config: Config, host: PluginHost, opening: Opening) -> None:
    """Unlock the account and start the plugins; or print why not and tell `opening` the same line."""
    try:
        store = open_store(config, create=True)
    except Exception as error:
        line = error_line(error)
        if line is None:
            # A bug, not the user's to fix: its traceback goes to the log, the agent hears where to look.
            traceback.print_exc()
            line = (
                f"the memory could not be opened: an internal error ({type(error).__name__}); "
                "the server's log has the details"
            )
        log_line(line)
        opening.failed(f"squirrel-mcp: {line}")
        return
    # The plugins start only on an unlocked store: they read memories through it.
    host.start(config, store)
    opening.opened(store)


def cmd_serve(config: Config, pm: pluggy.PluginManager) -> int:
    """Serve MCP over stdio until the client closes it, unlocking the account in the background.

    The handshake and tools/list are answered at once; tool calls wait for the
    unlock. When it fails the server keeps serving: every tool call gets the line
    it printed on stderr. A person at a terminal without SQUIRREL_PASSPHRASE is
    asked for it first, as the other commands ask.
    """
    from squirrel_mcp.server.app import create_server
    from squirrel_mcp.server.opening import Opening

    host = PluginHost(pm)
    opening = Opening()
    if not config.passphrase and sys.stdin.isatty():
        store = open_store(config, create=True)
        host.start(config, store)
        opening.opened(store)
    else:
        # A daemon: a client that closes the server mid-unlock must not wait for the unlock to end.
        threading.Thread(
            target=_open_in_background, args=(config, host, opening), name="squirrel-mcp-open", daemon=True
        ).start()
    try:
        create_server(opening, host).run("stdio")
    finally:
        host.shutdown()
        opening.close()
    return 0


def cmd_ui(args: argparse.Namespace, pm: pluggy.PluginManager | None) -> int:
    """Unlock the account, then serve the memories' page on 127.0.0.1 until Ctrl-C."""
    from squirrel_mcp.plugins.manager import PluginHost
    from squirrel_mcp.ui.serve import serve

    config = Config.from_env()
    store = open_store(config, create=False)
    if pm is None:
        pm = get_plugin_manager()
        load_plugins(pm)
    host = PluginHost(pm)
    # The same plugins as the server, so search ranks as the agent's does.
    host.start(config, store)
    try:
        serve(store, host, where=_where(config), port=args.port, open_browser=not args.no_browser)
    finally:
        host.shutdown()
        store.close()
    return 0


def build_parser(pm: pluggy.PluginManager | None = None) -> argparse.ArgumentParser:
    """The command line's parser, with the subcommands the plugins of `pm` add."""
    parser = argparse.ArgumentParser(
        prog="squirrel-mcp",
        description="A private, encrypted memory for AI agents. With no command, serves MCP over stdio.",
    )
    parser.add_argument("--version", action="version", version=f"squirrel-mcp {__version__}")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("serve", help="serve MCP over stdio (the default)")
    commands.add_parser(
        "init",
        help="create an encrypted vault (or an account on the sync server SQUIRREL_API_BASE_URL names) "
        "and print an MCP client config block",
    )
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
    commands.add_parser(
        "passphrase",
        help="change the passphrase: asks the current one, then the new one twice (or reads "
        "SQUIRREL_PASSPHRASE and SQUIRREL_NEW_PASSPHRASE); memories stay as they are",
    )
    browse.add_commands(commands)
    doctor = commands.add_parser(
        "doctor", help="check the settings, vault or sync server, passphrase, log, plugins and host command"
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `squirrel-mcp` script."""
    pm = get_plugin_manager()
    load_plugins(pm)
    args = build_parser(pm).parse_args(argv)
    config = Config.from_env()
    try:
        if getattr(args, "run", None) is not None:
            # A plugin's subcommand (register_commands): it reads its own settings.
            return int(args.run(args))
        if args.command == "init":
            return cmd_init(config)
        if args.command == "passphrase":
            return cmd_passphrase(config)
        if args.command == "export":
            return cmd_export(config, args.output, force=args.force)
        if args.command == "import" and args.source_format == "server-memory":
            return cmd_import_server_memory(config, args.file)
        if args.command == "import":
            return cmd_import(config, args.file)
        if args.command in ("search", "list", "show"):
            return cmd_browse(config, pm, args)
        if args.command == "doctor":
            # Imported here: doctor imports this module.
            from squirrel_mcp.cli import doctor

            return doctor.run(config, accept_log=args.accept_log)
        return cmd_serve(config, pm)
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        line = error_line(error)
        if line is None:
            raise
        log_line(line)
        return 1


def error_line(error: Exception) -> str | None:
    """The one line telling the user what went wrong and what to change; None for a bug."""
    if isinstance(error, USER_ERRORS):
        return str(error)
    if isinstance(error, ValidationError):
        # Data that does not fit a model: name the fields, never the values (memory text).
        return f"invalid data at: {field_locations(error)}"
    if isinstance(error, OSError):
        # A missing or unreadable file given on the command line; the path is the user's own.
        return f"{error.strerror}: {error.filename}"
    return None
