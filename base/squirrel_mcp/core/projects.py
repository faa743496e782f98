"""Where a host's session stands: the project named by SQUIRREL_PROJECT or by its working directory.

A session started inside a git work tree belongs to the repository, under one identity for every
worktree and every clone of it: the `origin` remote normalised ("github.com/acme/api"), so two
machines syncing one account agree, or without a remote the main worktree's location. Outside a
repository the directory itself is the project, except the home directory and the filesystem root:
hosts started there are about everything.

Git's own files are read here; `git` is never run. A cloned repository's config can make git run
programs (core.fsmonitor, core.sshCommand, ...), and the process that reads this may hold every
secret. Git's environment variables (GIT_DIR, GIT_WORK_TREE, GIT_CEILING_DIRECTORIES) are ignored
too: they describe whatever started the host (a hook, a script), not the directory it works in.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

PROJECT_VARIABLE = "SQUIRREL_PROJECT"
# A project's name: a repository's identity ("github.com/acme/api") or a folder's full path, so
# room for a long path; "*" is no project's name, since the tools' `project: "*"` means every one.
MAX_PROJECT = 1000
EVERY_PROJECT = "*"
# Git's own files are small; a bigger one is not git's, and reading it whole would slow the start.
_MAX_CONFIG = 1 << 20
_MAX_POINTER = 4096
# `[section "subsection"]` or the legacy `[section.subsection]`, then anything on the same line.
_HEADER = re.compile(r'\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\](.*)')
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", '"': '"', "\\": "\\"}
# `scheme://...`; `transport::address` (git's remote helpers) names no place this can read.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_HELPER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*::")
# A Windows drive ("C:/repos/api", "C:\\repos\\api"): a local path, though its ":" comes before any "/".
_DRIVE = re.compile(r"[A-Za-z]:[\\/]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_TRUE = {"true", "yes", "on", "1"}


class ProjectError(ValueError):
    """A SQUIRREL_PROJECT or a working directory that cannot name a project.

    The message names the rule, never the value (it reaches logs and the agent).
    """


def checked_name(value: str) -> str:
    """`value` when it can be a project's name (stripped already); ProjectError naming the rule it breaks.

    Plain Python, no pydantic: a host's bridge works its project out and starts in a few
    milliseconds. squirrel_mcp.core.models.ProjectName checks a memory's project with this.
    """
    if not value:
        raise ProjectError("must not be empty")
    if len(value) > MAX_PROJECT:
        raise ProjectError(f"must be at most {MAX_PROJECT} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProjectError("must be valid Unicode text (no lone surrogates)") from None
    if "\n" in value or "\r" in value:
        raise ProjectError("must be a single line")
    if _CONTROL.search(value):
        raise ProjectError("must not contain control characters")
    if value == EVERY_PROJECT:
        raise ProjectError(f'"{EVERY_PROJECT}" means every project and cannot be one\'s name')
    return value


def _validated(value: str, what: str) -> str:
    try:
        return checked_name(value)
    except ProjectError as error:
        raise ProjectError(f"{what} {error}") from None


def project_name(value: str) -> str | None:
    """A project name as given by a person or a tool argument.

    Stripped; "" or only spaces is None (no project); else the name, checked by `checked_name`
    (printable, one line, at most MAX_PROJECT characters, not "*"). Raises ProjectError naming
    the broken rule otherwise.
    """
    stripped = value.strip()
    if not stripped:
        return None
    return _validated(stripped, "a project's name:")


def session_project(env: Mapping[str, str], cwd: Path, home: Path | None = None) -> str | None:
    """The project of a host session started in `cwd`, worked out in this order.

    1. SQUIRREL_PROJECT in `env` (present, even empty): `project_name` of it (empty: None).
    2. `cwd` exactly the home directory (`home`, default Path.home()) or the filesystem root: None.
    3. Inside a git work tree: `repository_identity`. A work tree at the home directory itself (a
       dotfiles repository) is no project, so below it each directory stands for itself.
    4. Else the directory itself, symlinks resolved, as text.

    Raises ProjectError for a SQUIRREL_PROJECT that breaks a rule, and for an identity or a path
    that cannot be a project's name (longer than MAX_PROJECT, or not one printable line): the
    message asks for SQUIRREL_PROJECT.
    """
    if PROJECT_VARIABLE in env:
        stripped = env[PROJECT_VARIABLE].strip()
        return _validated(stripped, f"{PROJECT_VARIABLE}:") if stripped else None
    where = _resolved(cwd)
    if home is None:
        try:
            home = Path.home()
        except (RuntimeError, KeyError):
            home = None
    if where == where.parent or (home is not None and where == _resolved(home)):
        return None
    checkout = _find_checkout(where)
    identity = None
    if checkout is not None and (home is None or checkout.top != _resolved(home)):
        identity = _identity(checkout)
    return _validated(
        identity if identity is not None else str(where),
        f"the working directory's project (its repository or its path) cannot be a project's name "
        f"(set {PROJECT_VARIABLE} to name it):",
    )


def repository_identity(start: Path) -> str | None:
    """The identity of the git repository whose work tree holds `start`; None outside any.

    The same for every worktree and every clone: the `origin` remote's URL normalised
    (`normalise_remote`), or without one the main worktree's location (its resolved path as
    text). A bare repository, or one whose files cannot be read, is None.
    """
    checkout = _find_checkout(_resolved(start))
    return None if checkout is None else _identity(checkout)


def normalise_remote(url: str, repository: Path) -> str | None:
    """A remote URL as a project identity.

    A network URL is its host (lower case; no user, password or port) + "/" + its path, with no
    trailing "/" or ".git", and no query or fragment: "git@github.com:acme/api.git",
    "https://user:tok@github.com/acme/api", "ssh://git@github.com:22/acme/api.git/" and
    "git://github.com/acme/api" are all "github.com/acme/api". A local path or file:// URL
    (relative ones against `repository`, the main worktree) is the resolved path without ".git".
    None for a URL it cannot read. Credentials are never kept.
    """
    url = url.strip()
    if not url or _CONTROL.search(url) or _HELPER.match(url):
        return None
    scheme = _SCHEME.match(url)
    if scheme is not None and scheme.group(1).lower() == "file":
        return _local_identity(unquote(url[scheme.end() :]), repository)
    if scheme is not None:
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError:
            return None
        return _joined(host, parts.path)
    first = url.split("/", 1)[0]
    if ":" in first and not _DRIVE.match(url):
        # scp-like `[user@]host:path`. Credentials end at the last "@" before the first "/", so
        # cutting there drops a "user:token@" whole, wherever its ":" is.
        address = url[first.rindex("@") + 1 :] if "@" in first else url
        host, _, path = address.partition(":")
        return _joined(host.strip("[]"), path)
    return _local_identity(url, repository)


def _joined(host: str | None, path: str) -> str | None:
    path = _without_git(path.strip("/"))
    # An "@" left in the path is a password with a "/" in it, which cut the URL in the wrong place.
    if not host or "@" in host or "@" in path or not path:
        return None
    return f"{host.lower()}/{path}"


def _without_git(path: str) -> str:
    return path.removesuffix(".git").rstrip("/")


def _local_identity(path: str, repository: Path) -> str | None:
    if not path:
        return None
    return _without_git(str(_resolved(repository / path))) or None


class _Checkout(NamedTuple):
    top: Path  # the directory holding `.git`
    gitdir: Path
    common: Path


def _find_checkout(start: Path) -> _Checkout | None:
    """The git checkout whose work tree holds `start` (resolved), from the first `.git` above it."""
    for directory in (start, *start.parents):
        dot_git = directory / ".git"
        try:
            mode = dot_git.stat().st_mode
        except OSError:
            continue
        gitdir = dot_git if stat.S_ISDIR(mode) else _pointed(dot_git) if stat.S_ISREG(mode) else None
        # A `.git` this cannot read ends the walk: the repository above it is not this one's.
        if gitdir is None or not (gitdir / "HEAD").is_file():
            return None
        common = gitdir
        pointer = _read(gitdir / "commondir", _MAX_POINTER)
        if pointer is not None and pointer.strip():
            common = _resolved(gitdir / pointer.splitlines()[0].strip())
        return _Checkout(directory, gitdir, common)
    return None


def _pointed(dot_git: Path) -> Path | None:
    """The directory a `.git` file (a linked worktree, a submodule) names; one hop, never more."""
    text = _read(dot_git, _MAX_POINTER)
    first = text.splitlines()[0] if text else ""
    target = first.removeprefix("gitdir:").strip() if first.startswith("gitdir:") else ""
    if not target:
        return None
    return _resolved(dot_git.parent / target)


def _identity(checkout: _Checkout) -> str | None:
    text = _read(checkout.common / "config", _MAX_CONFIG)
    config = _parse_config(text) if text is not None else {}
    worktree = config.get(("core", None, "worktree"))
    bare = config.get(("core", None, "bare"), "false")
    linked = checkout.gitdir != checkout.common
    if not linked and not worktree and (bare is None or bare.lower() in _TRUE):
        return None  # a bare repository's own directory: no work tree
    if checkout.common.name == ".git":
        main = checkout.common.parent
    elif worktree:
        main = _resolved(checkout.common / worktree)  # a submodule's: its config says where
    else:
        # A repository made with --separate-git-dir, or a bare one with linked worktrees: from a
        # linked worktree nothing leads to the main one, so the repository itself stands for it in
        # every worktree, as in `git worktree list`; the directory holding `.git` would give each
        # worktree a project of its own.
        main = checkout.common
    url = config.get(("remote", "origin", "url"))
    remote = normalise_remote(url, main) if url else None
    # The location as a local remote naming it would read (no ".git"), so a clone of a repository
    # without a remote is the same project as the repository itself.
    return remote if remote is not None else _local_identity(str(main), main)


def _parse_config(text: str) -> dict[tuple[str, str | None, str], str | None]:
    """Git's config syntax, tolerantly: each (section, subsection, key) to its last value.

    Section names and keys are case-insensitive (lower-cased here), a quoted subsection is not, a
    legacy `[section.subsection]` is lower-cased whole as git does. A key with no "=" is None (git's
    boolean true). A line this cannot read is skipped. `[include]` and `[includeIf]` are not
    followed: an identity read from files outside the repository would differ between machines.
    """
    values: dict[tuple[str, str | None, str], str | None] = {}
    section: tuple[str, str | None] | None = None
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        if line.startswith("["):
            header = _HEADER.match(line)
            section = None if header is None else _section(header.group(1), header.group(2))
            line = "" if header is None else header.group(3).strip()
        key = _KEY.match(line)
        if section is None or key is None:
            continue
        rest = line[key.end() :].lstrip()
        if not rest or rest[0] in "#;":
            values[(*section, key.group(0).lower())] = None
        elif rest[0] == "=":
            value = _value(rest[1:], lines)
            if value is not None:
                values[(*section, key.group(0).lower())] = value
    return values


def _section(name: str, subsection: str | None) -> tuple[str, str | None]:
    if subsection is not None:
        return name.lower(), re.sub(r"\\(.)", r"\1", subsection)
    name, dot, legacy = name.lower().partition(".")
    return name, legacy if dot else None


def _value(text: str, lines: Iterator[str]) -> str | None:
    """A value after "=" as git reads it: quotes, escapes, comments, continued lines; None if malformed."""
    out: list[str] = []
    spaces = 0  # whitespace outside quotes, kept only when more of the value follows
    quoted = False
    while True:
        index, continued = 0, False
        while index < len(text):
            char = text[index]
            index += 1
            if char.isspace() and not quoted:
                spaces += 1 if out else 0
                continue
            if char in "#;" and not quoted:
                break
            if spaces:
                out.append(" " * spaces)
                spaces = 0
            if char == '"':
                quoted = not quoted
            elif char != "\\":
                out.append(char)
            elif index == len(text):
                continued = True  # a backslash ending the line continues the value on the next
            elif text[index] in _ESCAPES:
                out.append(_ESCAPES[text[index]])
                index += 1
            else:
                return None  # git refuses an unknown escape
        if not continued:
            return None if quoted else "".join(out)
        text = next(lines, "")


def _read(path: Path, limit: int) -> str | None:
    """A regular file's text, or None (missing, not a regular file, too big, unreadable).

    Opened without blocking and checked before reading: a FIFO or a device named `config` in a
    directory someone unpacked would otherwise stop the host's start.
    """
    try:
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = os.read(handle, limit + 1)
    except OSError:
        return None
    finally:
        os.close(handle)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _resolved(path: Path) -> Path:
    """`path` absolute with symlinks resolved; as far as it can be when a loop or an error stops that."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))
