"""`squirrel-mcp init` and `squirrel-mcp passphrase`: make the account, change its passphrase.

`init` prints the block to paste into an MCP client's config, with the command
that starts this same installation (`server_command`).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from squirrel_mcp.book import rekey
from squirrel_mcp.book.errors import NoAccountError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.cli.unlock import (
    UserError,
    ask_new_passphrase,
    check_kdf,
    check_new_passphrase,
    explaining,
    foreign_verifier,
    from_keychain,
    get_passphrase,
    open_storage,
    passphrase_entry,
    remember_key,
)
from squirrel_mcp.core import keychain
from squirrel_mcp.core.config import Config, check_api_base_url, location
from squirrel_mcp.core.keychain import KeychainError, NoKeychainError
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.keys.crypto import key_change_proof, unwrap_data_key
from squirrel_mcp.storage import NO_REMOTE_ACCOUNT, KeyChanged


def _client_config(config: Config, *, in_keychain: bool = False) -> str:
    """The block for an MCP client's config; with the secrets `in_keychain`, it names none of them."""
    env = {} if in_keychain else {"SQUIRREL_PASSPHRASE": "<your passphrase>"}
    if config.api_base_url is not None:
        env["SQUIRREL_API_BASE_URL"] = check_api_base_url(config.api_base_url)
        if not in_keychain:
            env["SQUIRREL_API_KEY"] = "<your API key>"
    elif config.vault_path != Config.from_env({}).vault_path:
        # Absolute: a host starts its server in a folder of its own choosing, where a relative
        # path would name another vault (or none).
        env["SQUIRREL_VAULT"] = os.path.abspath(config.vault_path.expanduser())
    command, args = server_command()
    entry: dict[str, object] = {"command": command, "args": args}
    if env:
        entry["env"] = env
    return json.dumps({"mcpServers": {"squirrel-notes": entry}}, indent=2)


def _ask_keychain(config: Config) -> bool:
    """--keychain or --no-keychain not given: asked on a terminal where a keychain answers; else no.

    A machine without a usable keychain (a headless box) is not asked about one: init goes on
    as without it, and says nothing of it.
    """
    if not sys.stdin.isatty():
        return False
    try:
        keychain.read(passphrase_entry(config))
    except KeychainError:
        return False
    answer = input("Keep the passphrase in this machine's keychain, so the MCP config holds none? [Y/n] ")
    return answer.strip().lower() in ("", "y", "yes")


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
        # -P: a host starts it in a folder of its choosing, whose `json.py` Python would import first.
        return sys.executable, ["-P", "-m", "squirrel_mcp"]
    # Not resolved: pipx's link in its bin directory outlives upgrades of its venv.
    return str(script.absolute()), []


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def cmd_init(config: Config, *, keep_in_keychain: bool | None = None) -> int:
    """Create the vault, or the account on the sync server, asking for the passphrase twice.

    SQUIRREL_PASSPHRASE, when set, is used instead of asking. On a server the
    API key's slot must be empty (the server's operator issues keys). With
    `keep_in_keychain` (None: asked on a terminal) the passphrase and API key go to
    the OS keychain, which is checked to be usable before anything is created.
    """
    if config.passphrase:
        # Before the vault file is made: nothing is created with a passphrase too short.
        check_new_passphrase("SQUIRREL_PASSPHRASE", config.passphrase, "nothing was created")
    if keep_in_keychain is None:
        keep_in_keychain = _ask_keychain(config)
    if keep_in_keychain:
        try:
            keychain.read(passphrase_entry(config))
        except KeychainError as error:
            raise UserError(f"{error}; nothing was created (or run `init --no-keychain`)") from None
    storage = open_storage(config, create=True)
    where = location(config)
    try:
        if storage.load_account() is not None:
            if config.remote:
                raise UserError(f"{where} already holds an account for this API key; nothing was changed")
            raise UserError(f"a vault already exists at {config.vault_path}; nothing was changed")
        passphrase = get_passphrase(config, confirm=True)
        MemoryStore.create(storage, passphrase)
    finally:
        storage.close()
    if keep_in_keychain:
        _keep(config, passphrase)
    if config.remote:
        print(f"Created an encrypted account on {where}\n")
    else:
        print(f"Created an encrypted vault at {config.vault_path}\n")
    if keep_in_keychain:
        print("Add this to your MCP client's config (Claude Desktop, Claude Code, Cursor, ...);")
        print("the passphrase is kept in this machine's keychain, so this holds no secret:\n")
        print(_client_config(config, in_keychain=True))
        return 0
    print("Add this to your MCP client's config (Claude Desktop, Claude Code, Cursor, ...),")
    if config.remote:
        print("with your API key and passphrase in place of the placeholders:\n")
    else:
        print("with your passphrase in place of the placeholder:\n")
    print(_client_config(config))
    return 0


def _keep(config: Config, passphrase: str) -> None:
    """Put the new account's passphrase (and API key) in the keychain; a failure says what was made."""
    try:
        if config.api_base_url is not None and config.api_key is not None:
            keychain.write(keychain.api_key_entry(check_api_base_url(config.api_base_url)), config.api_key)
        keychain.write(passphrase_entry(config), passphrase)
    except KeychainError as error:
        raise UserError(
            f"{location(config)} was created, but its passphrase could not be kept in the keychain: {error}; "
            "run `squirrel-mcp keychain store` once it works"
        ) from None


def cmd_passphrase(config: Config) -> int:
    """Change the passphrase: the current one, then the new one twice, asked (or from the environment).

    SQUIRREL_PASSPHRASE and SQUIRREL_NEW_PASSPHRASE, when set, are used instead of
    asking. The data key is wrapped under the new passphrase and swapped in with
    `Storage.replace_key`, with the data key's proof; the records are not touched
    (see squirrel_mcp.book.rekey). An account without a verifier gets it first.
    The current passphrase may come from the keychain; a keychain entry found for
    the account is given the new one.
    """
    config = from_keychain(config)
    storage = open_storage(config, create=False)
    where = location(config)
    try:
        account = storage.load_account()
        if account is None:
            raise NoAccountError(
                f"{where} {NO_REMOTE_ACCOUNT}" if config.remote else f"{where} holds no account"
            )
        check_kdf(config, account.kdf)
        current = get_passphrase(config, confirm=False, prompt="Current passphrase: ")
        with explaining(config, storage):
            data_key = unwrap_data_key(current, account.kdf, account.account_id, account.wrapped_data_key)
        proof = key_change_proof(data_key)
        if rekey.ensure_verifier(storage, account, proof) is False:
            raise UserError(foreign_verifier(config))
        new = _new_passphrase(config, current)
        changed = rekey.rekey(account, data_key, new)
        try:
            storage.replace_key(account, changed, proof)
        except KeyChanged:
            other = "another machine" if config.remote else "another process"
            raise UserError(
                f"the passphrase of {where} was changed by {other} while this command ran; nothing was "
                "changed here: run `squirrel-mcp passphrase` again, with the passphrase set there"
            ) from None
    finally:
        storage.close()
    remember_key(config, changed, changed_here=True)
    print(f"Changed the passphrase of {where}; every memory stays as it was.")
    if _renew_entry(config, new):
        print(f"The keychain entry {passphrase_entry(config)} holds the new passphrase.")
        print("Where SQUIRREL_PASSPHRASE is set (it wins over the keychain), set it to the new one.")
    else:
        print("Set SQUIRREL_PASSPHRASE to the new passphrase in your MCP client's config (and wherever else")
        print("it is set).")
    told = _tell_memory_process(config, new)
    if told is not None:
        print(told)
    print("Servers running now keep working; they need the new one when they start again.")
    if config.remote:
        print("Other machines using this account need it too: until they have it, they are told the")
        print("passphrase was changed.")
    return 0


# How long the command waits for the running memory process to take the new passphrase, in
# seconds: one key derivation, after the unlock if the process is still opening the vault.
TELL_WAIT = 60.0


def _tell_memory_process(config: Config, new: str) -> str | None:
    """Give the vault's running memory process the new passphrase; the line saying so (None: none runs).

    Told as a bridge would say it, over the channel only this user can reach: the process
    checks that the new passphrase opens the account's key, admits it from then on, and
    refuses the old one at once instead of until a host brings the new one.
    """
    from squirrel_mcp.core.channel import Channel, ChannelError, PeerRefused, supported
    from squirrel_mcp.core.hello import Hello, HelloError, identity, read_answer, settings

    if not supported():
        return None
    env = dict(os.environ)
    told = Hello(identity(config), settings(config, env), new, changed=True)
    try:
        connection = Channel.of(told.identity, env).connect()
    except (ChannelError, PeerRefused, OSError):
        return None
    if connection is None:
        return None
    try:
        connection.settimeout(TELL_WAIT)
        connection.sendall(told.line())
        with connection.makefile("rb") as reader:
            refused = read_answer(reader.readline())
    except (OSError, HelloError):
        refused = "it did not answer"
    finally:
        connection.close()
    if refused is None:
        return "The running memory process of this vault now admits only the new passphrase."
    return (
        f"The running memory process of this vault still admits the old passphrase until it ends ({refused})."
    )


def _renew_entry(config: Config, new: str) -> bool:
    """Give the account's keychain entry, if it has one, the new passphrase; True when it was.

    The passphrase is changed already: a keychain that fails now only costs a line.
    """
    entry = passphrase_entry(config)
    try:
        if "passphrase" not in config.from_keychain and keychain.read(entry) is None:
            return False
        keychain.write(entry, new)
    except KeychainError as error:
        if isinstance(error, NoKeychainError) and "passphrase" not in config.from_keychain:
            return False
        log_line(f"the keychain entry {entry} could not be given the new passphrase: {error}")
        return False
    return True


def _new_passphrase(config: Config, current: str) -> str:
    """SQUIRREL_NEW_PASSPHRASE, or asked twice on the terminal: at least MIN_PASSPHRASE characters."""
    nothing = "nothing was changed"
    if config.new_passphrase:
        new = config.new_passphrase
        check_new_passphrase("SQUIRREL_NEW_PASSPHRASE", new, nothing)
    elif sys.stdin.isatty():
        new = ask_new_passphrase("New passphrase: ", nothing)
    else:
        raise UserError(f"SQUIRREL_NEW_PASSPHRASE is not set (and there is no terminal to ask on); {nothing}")
    if new == current:
        raise UserError(f"the new passphrase is the current one; {nothing}")
    return new
