"""`squirrel-mcp export` and `squirrel-mcp import`: every memory with its history, as JSON.

Export leaves out revisions it cannot read and names them (exit status
EXIT_EXPORT_INCOMPLETE); import is safe to repeat, and also reads the official
memory server's JSONL.
"""

from __future__ import annotations

import sys
from pathlib import Path

from squirrel_mcp.book import server_memory
from squirrel_mcp.book.transfer import export_json, import_export, parse_export
from squirrel_mcp.cli.progress import ProgressBar
from squirrel_mcp.cli.unlock import UserError, open_store
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.files import atomic_write
from squirrel_mcp.core.lines import log_line

EXIT_EXPORT_INCOMPLETE = 3
# How many memories with gaps an export, or invalid lines an import, names one by one before
# summing up the rest.
MAX_GAPS_LISTED = 50


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


def cmd_import(config: Config, source: str, *, create: bool = False) -> int:
    """Add an export file's memories; repeating it changes nothing.

    The file is checked before the vault is opened, so a wrong file is named before
    any passphrase is asked for. Like export, the passphrase comes from
    SQUIRREL_PASSPHRASE or is asked on the terminal. A missing vault is refused, as
    every command but `init` refuses it (a typo in SQUIRREL_VAULT must not make a
    new, empty vault); `create` (`--create`) makes it, with SQUIRREL_PASSPHRASE.
    """
    data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    parsed = parse_export(data, "stdin" if source == "-" else source)
    with ProgressBar("reading", "records") as reading, ProgressBar("importing", "memories") as importing:
        store = open_store(config, create=create, progress=reading)
        try:
            report = import_export(store, parsed, importing)
        finally:
            store.close()
    print(
        f"imported {report.memories} memories: {report.added} revisions added, "
        f"{report.present} already present, {report.conflicts} conflicting (left as they were)"
    )
    return 1 if report.conflicts else 0


def cmd_import_server_memory(
    config: Config, source: str, *, create: bool = False, skip_invalid: bool = False
) -> int:
    """Add the memories of the official memory server's JSONL file; repeating it adds nothing.

    Unlocks as `import` does (a missing vault only with `create`), after the whole file
    was checked. A faulty line refuses the whole file, unless `skip_invalid`: then the
    faulty lines are left out and named on stderr (line number and fields, never content).
    """
    data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    name = "stdin" if source == "-" else source
    items, skipped = server_memory.parse_graph(data, name, skip_invalid=skip_invalid)
    with ProgressBar("reading", "records") as reading, ProgressBar("importing", "memories") as importing:
        store = open_store(config, create=create, progress=reading)
        try:
            report = server_memory.import_graph(store, items, importing)
        finally:
            store.close()
    for fault in skipped[:MAX_GAPS_LISTED]:
        log_line(f"skipped {fault}")
    if len(skipped) > MAX_GAPS_LISTED:
        log_line(f"skipped {len(skipped) - MAX_GAPS_LISTED} more invalid lines")
    left_out = f"; {len(skipped)} invalid lines skipped" if skipped else ""
    print(
        f"imported {report.entities} entities and {report.relations} relations from server-memory: "
        f"{report.added} memories added, {report.present} already present{left_out}"
    )
    return 0
