"""`squirrel-mcp-sync`: run the reference sync server, administer its API keys, undo a key change.

    squirrel-mcp-sync serve --database URL [--host 127.0.0.1] [--port 8765]
                            [--max-connections 1000] [--header-timeout 10] [--body-timeout 60]
                            [--instances 1] [--drain-seconds 0]
    squirrel-mcp-sync issue-key --database URL [--for KEY_ID]
    squirrel-mcp-sync list-keys --database URL
    squirrel-mcp-sync revoke-key --database URL KEY_ID
    squirrel-mcp-sync list-account-keys --database URL KEY_ID
    squirrel-mcp-sync restore-account-key --database URL KEY_ID OLD_KEY_ID
    squirrel-mcp-sync forget-account-keys --database URL KEY_ID
    squirrel-mcp-sync clear-verifier --database URL KEY_ID

Keys are administered here, on the server's machine, not over HTTP: no route
can issue or revoke one. A running server sees a revocation at once, since it
asks the database about the key of every request.

The last four act on the account that API key KEY_ID opens: they list the
account keys (scrypt parameters and wrapped data key) it holds and held, put an
earlier one back, delete the earlier ones (each opens under its passphrase), or
forget its key-change verifier (for an account made before verifiers, whose
verifier someone without the passphrase set).

The database URL may come from SQUIRREL_SYNC_DATABASE instead of --database
(better for a PostgreSQL URL holding a password: the command line is visible to
every user of the machine). Neither command ever prints the URL.
"""

from __future__ import annotations

import argparse
import os
import socket

from squirrel_mcp import __version__
from squirrel_mcp.core.config import is_loopback
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.storage import FINGERPRINT_SHOWN
from squirrel_mcp.syncserver import keys
from squirrel_mcp.syncserver.database import Database, HeldKey, NoAccount, UnknownOldKey
from squirrel_mcp.syncserver.keystore import KeyInfo, UnknownKey
from squirrel_mcp.syncserver.pool import DatabaseError, DatabaseUnavailable

try:
    # The server extra; without it only this message can be given, by `main`.
    import uvicorn

    from squirrel_mcp.serving.connections import Listener, connection_budget, guarded_protocol
    from squirrel_mcp.syncserver.app import Limits, create_app
    from squirrel_mcp.syncserver.drain import Drain, DrainingServer, RefuseWhileDraining
except ImportError as missing:
    _MISSING: str | None = missing.name or "Starlette and uvicorn"
else:
    _MISSING = None

PROGRAM = "squirrel-mcp-sync"
DEFAULT_PORT = 8765
DATABASE_ENV = "SQUIRREL_SYNC_DATABASE"
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_HEADER_TIMEOUT_S = 10.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="squirrel-mcp-sync",
        description="The squirrel-mcp sync server: ciphertext-only storage shared by several machines.",
    )
    parser.add_argument("--version", action="version", version=f"squirrel-mcp-sync {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    database_help = f"sqlite:///ABSOLUTE/PATH or postgresql://... (default: ${DATABASE_ENV})"

    _add_serve(commands.add_parser("serve", help="serve the sync API over HTTP"), database_help)
    _add_key_commands(commands, database_help)
    return parser


def _add_serve(serve: argparse.ArgumentParser, database_help: str) -> None:
    """`serve`'s options: the database, where to listen, and the limits."""
    serve.add_argument("--database", help=database_help)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 = any)"
    )
    serve.add_argument(
        "--rate-limit",
        type=float,
        default=Limits.rate,
        help="requests per second per key (default %(default)s)",
    )
    serve.add_argument("--burst", type=int, default=Limits.burst, help="requests a key may send at once")
    serve.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="connections open at once (default %(default)s; lowered to fit the open-file limit)",
    )
    serve.add_argument(
        "--header-timeout",
        type=float,
        default=DEFAULT_HEADER_TIMEOUT_S,
        help="seconds a client has to send a request's headers (default %(default)s)",
    )
    serve.add_argument(
        "--body-timeout",
        type=float,
        default=Limits.body_timeout,
        help="seconds a client has to send a request's whole body (default %(default)s)",
    )
    serve.add_argument(
        "--drain-seconds",
        type=float,
        default=0.0,
        help="on SIGTERM, seconds to answer new requests 503 (so a load balancer's health check "
        "takes this instance out) before finishing those in flight and exiting (default %(default)s)",
    )
    serve.add_argument(
        "--instances",
        type=int,
        default=1,
        help="instances serving this database behind one load balancer: each allows 1/N of "
        "--rate-limit and --burst, so that a key's budget holds across them (default %(default)s)",
    )
    serve.add_argument("--no-access-log", action="store_true", help="do not log one line per request")


def _add_key_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], database_help: str
) -> None:
    """The commands about API keys and the account keys (wrapped data keys) accounts hold."""
    issue = commands.add_parser(
        "issue-key", help="make a new API key (and its empty account slot, unless --for is given)"
    )
    issue.add_argument("--database", help=database_help)
    issue.add_argument(
        "--for",
        dest="like",
        type=int,
        metavar="KEY_ID",
        help="open the same account as this key (say, one revoked after a leak) instead of a new one",
    )
    listing = commands.add_parser("list-keys", help="list every key: id, prefix, created, last used, account")
    listing.add_argument("--database", help=database_help)
    revoke = commands.add_parser("revoke-key", help="revoke a key at once; its account and records stay")
    revoke.add_argument("--database", help=database_help)
    revoke.add_argument("key_id", type=int, metavar="KEY_ID", help="the key's id, as list-keys shows it")

    def account_command(name: str, help: str) -> argparse.ArgumentParser:
        """A command about one account, named by an API key that opens it."""
        command = commands.add_parser(name, help=help)
        command.add_argument("--database", help=database_help)
        command.add_argument(
            "key_id",
            type=int,
            metavar="KEY_ID",
            help="the API key whose account it is, as list-keys shows it",
        )
        return command

    account_command(
        "list-account-keys",
        "list the account keys (wrapped data keys) an account holds and held, newest first",
    )
    restore = account_command(
        "restore-account-key", "make an account's earlier account key its key again (undo a key change)"
    )
    restore.add_argument(
        "old_key_id",
        type=int,
        metavar="OLD_KEY_ID",
        help="the earlier key's id, as list-account-keys shows it",
    )
    account_command(
        "forget-account-keys",
        "delete the earlier account keys an account kept (after changing a passphrase that leaked)",
    )
    account_command(
        "clear-verifier",
        "forget an account's key-change verifier; the next client that unlocks the account sets it",
    )


def main(argv: list[str] | None = None) -> int:
    """Run `squirrel-mcp-sync`; the process exit code."""
    if _MISSING is not None:
        log_line(
            f"the sync server needs {_MISSING}, which is not installed: pip install 'squirrel-mcp[server]'",
            program=PROGRAM,
        )
        return 1
    args = _parser().parse_args(argv)
    url = args.database or os.environ.get(DATABASE_ENV)
    if not url:
        log_line(f"give --database URL or set {DATABASE_ENV}", program=PROGRAM)
        return 2
    try:
        database = Database(url)
    except (DatabaseError, DatabaseUnavailable) as problem:
        log_line(str(problem), program=PROGRAM)
        return 1
    try:
        if args.command == "issue-key":
            return _issue_key(database, args.like)
        if args.command == "list-keys":
            for info in database.list_keys():
                print(_key_line(info))
            return 0
        if args.command == "revoke-key":
            return _revoke_key(database, args.key_id)
        if args.command == "list-account-keys":
            for entry in database.held_keys(database.slot_of_key(args.key_id)):
                print(_held_key_line(entry))
            return 0
        if args.command == "restore-account-key":
            return _restore_account_key(database, args.key_id, args.old_key_id)
        if args.command == "forget-account-keys":
            forgotten = database.forget_old_keys(database.slot_of_key(args.key_id))
            log_line(
                f"the account of key {args.key_id} keeps no earlier key now ({forgotten} deleted)",
                program=PROGRAM,
            )
            return 0
        if args.command == "clear-verifier":
            return _clear_verifier(database, args.key_id)
        return _serve(database, args)
    except UnknownKey as unknown:
        log_line(f"no key has id {unknown}", program=PROGRAM)
        return 1
    except NoAccount:
        log_line(f"key {args.key_id} opens a slot with no account yet", program=PROGRAM)
        return 1
    except UnknownOldKey as unknown:
        log_line(
            f"the account of key {args.key_id} kept no earlier key {unknown} (list-account-keys lists them)",
            program=PROGRAM,
        )
        return 1
    except DatabaseUnavailable as problem:
        log_line(str(problem), program=PROGRAM)
        return 1
    finally:
        database.close()


def _issue_key(database: Database, like: int | None) -> int:
    key = keys.new_key()
    prefix = keys.display_prefix(key)
    if like is None:
        key_id = database.add_slot(keys.key_hash(key), prefix)
    else:
        key_id = database.add_key(like, keys.key_hash(key), prefix)
    print(key)
    opens = "a new, empty account slot" if like is None else f"the same account as key {like}"
    log_line(
        f"key {key_id} ({prefix}...) opens {opens}. It is shown once; the server keeps only "
        "its hash. Give it to squirrel-mcp as SQUIRREL_API_KEY.",
        program=PROGRAM,
    )
    return 0


def _key_line(info: KeyInfo) -> str:
    """One line of list-keys: id, prefix, created, last used, account; never the key."""
    # Keys issued before prefixes were kept show "-": only their hash was ever stored.
    prefix = "-" if info.prefix is None else f"{info.prefix}..."
    account = "no account yet" if info.account_id is None else f"account {info.account_id}"
    line = (
        f"{info.key_id}\t{prefix}\tcreated {_shown(info.created_at)}\t"
        f"last used {_shown(info.last_used_at)}\tslot {info.slot} ({account})"
    )
    return line if info.revoked_at is None else f"{line}\trevoked {_shown(info.revoked_at)}"


def _shown(stamp: str | None) -> str:
    """A stored timestamp to the second; "never" for none."""
    return "never" if stamp is None else f"{stamp[:19]}Z"


def _held_key_line(entry: HeldKey) -> str:
    """One line of list-account-keys: id (or "current"), fingerprint, dates, scrypt cost; never the key."""
    kdf = entry.account.kdf
    fingerprint = entry.account.fingerprint()[:FINGERPRINT_SHOWN]
    # Keys set before the server kept the date (schema 2 and earlier) show "unknown".
    set_at = "unknown" if entry.set_at is None else _shown(entry.set_at)
    cost = f"scrypt N={kdf.n} r={kdf.r} p={kdf.p}"
    if entry.old_key_id is None:
        verifier = "no verifier" if entry.account.key_change_verifier is None else "verifier set"
        return f"current\tfingerprint {fingerprint}\tset {set_at}\t{cost}\t{verifier}"
    replaced = _shown(entry.replaced_at)
    return f"{entry.old_key_id}\tfingerprint {fingerprint}\tset {set_at}\treplaced {replaced}\t{cost}"


def _restore_account_key(database: Database, key_id: int, old_key_id: int) -> int:
    stored = database.restore_key(database.slot_of_key(key_id), old_key_id)
    fingerprint = stored.account.fingerprint()[:FINGERPRINT_SHOWN]
    log_line(
        f"account {stored.account.account_id} holds its earlier key {old_key_id} again (fingerprint "
        f"{fingerprint}); the key it held is kept among its earlier keys (list-account-keys)",
        program=PROGRAM,
    )
    return 0


def _clear_verifier(database: Database, key_id: int) -> int:
    if database.clear_verifier(database.slot_of_key(key_id)):
        log_line(
            f"the account of key {key_id} has no key-change verifier now: the next client that unlocks it "
            "sets one, and until then its key cannot be changed",
            program=PROGRAM,
        )
    else:
        log_line(f"the account of key {key_id} had no key-change verifier", program=PROGRAM)
    return 0


def _revoke_key(database: Database, key_id: int) -> int:
    if database.revoke_key(key_id):
        log_line(f"key {key_id} is revoked; its account and records stay", program=PROGRAM)
    else:
        log_line(f"key {key_id} was already revoked", program=PROGRAM)
    return 0


def _serve(database: Database, args: argparse.Namespace) -> int:
    if args.rate_limit <= 0 or args.burst < 1:
        log_line("--rate-limit must be positive and --burst at least 1", program=PROGRAM)
        return 2
    if args.max_connections < 1 or not args.header_timeout > 0 or not args.body_timeout > 0:
        log_line("--max-connections must be at least 1, and the timeouts positive", program=PROGRAM)
        return 2
    if args.instances < 1 or not args.drain_seconds >= 0:
        log_line("--instances must be at least 1 and --drain-seconds at least 0", program=PROGRAM)
        return 2
    drain = Drain(args.drain_seconds)
    limits = Limits(rate=args.rate_limit, burst=args.burst, body_timeout=args.body_timeout).share(
        args.instances
    )
    app = RefuseWhileDraining(create_app(database, limits), drain)
    max_connections, fd_ceiling, file_limit = connection_budget(args.max_connections)
    if max_connections < args.max_connections:
        log_line(
            f"at most {max_connections} connections at once, "
            f"to stay within the limit of {file_limit} open files (ulimit -n)",
            program=PROGRAM,
        )
    # The socket is bound here, not by uvicorn, so that --port 0 can say which port it got.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio turns Nagle off (TCP_NODELAY) only on sockets
    # whose proto says TCP, and without it every keep-alive answer waits ~40 ms for
    # the client's delayed ACK.
    listener = Listener(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.fd_ceiling = fd_ceiling
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((args.host, args.port))
    except OSError as problem:
        log_line(f"cannot listen on {args.host}:{args.port} ({problem.strerror})", program=PROGRAM)
        return 1
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    log_line(f"serving http://{shown}:{port} ({database.dialect})", program=PROGRAM)
    if not is_loopback(args.host):
        log_line(
            "this speaks plain HTTP; put it behind a TLS reverse proxy "
            "(docs/sync-server.md), since API keys travel in every request",
            program=PROGRAM,
        )
    config = uvicorn.Config(
        app,
        http=guarded_protocol(
            max_connections, args.header_timeout, full_hint=" (is a reverse proxy limiting connections?)"
        ),
        log_level="info",
        access_log=not args.no_access_log,
        server_header=False,
        proxy_headers=False,
    )
    DrainingServer(config, drain).run(sockets=[listener])
    return 0
