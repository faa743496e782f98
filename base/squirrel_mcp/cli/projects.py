"""`squirrel-mcp projects`: the projects the memories belong to, and the one this folder is in.

A project's name is its identity: a repository's `origin` remote normalised
("github.com/acme/api", the same in every clone and worktree), a folder's path (a
repository without a remote, or a folder outside any), or whatever a host's
SQUIRREL_PROJECT says. The list counts the live memories of each, those with no
project first (they hold everywhere), then the largest, as get_context counts them.
Then it says which project a host started here would be in, worked out as the
server works it out: SQUIRREL_PROJECT when it is set, else the current directory.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from squirrel_mcp.core.projects import PROJECT_VARIABLE, ProjectError, session_project

if TYPE_CHECKING:
    from squirrel_mcp.book.memories import MemoryStore


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `projects` to the command line's sub-parsers."""
    projects = commands.add_parser(
        "projects",
        help="the projects with how many memories each holds, and the one this folder is in",
    )
    projects.add_argument("--json", action="store_true", help="print the same as JSON")


def counted(store: MemoryStore) -> list[tuple[str | None, int]]:
    """Each project with its live memories: None (no project) first, then the largest, then by name."""
    with store.reading() as catalog:
        counts = dict(catalog.live_project_counts())
    ordered = sorted(counts.items(), key=lambda item: (item[0] is not None, -item[1], item[0] or ""))
    return [(project, count) for project, count in ordered if count]


def here(environ: Mapping[str, str], cwd: Path) -> tuple[str | None, str, str | None]:
    """The project a host started in `cwd` with `environ` is in: (project, what says so, problem).

    The problem, when there is one, names the rule broken, never the value or the path.
    """
    source = PROJECT_VARIABLE if PROJECT_VARIABLE in environ else "this folder"
    try:
        return session_project(environ, cwd), source, None
    except ProjectError as error:
        return None, source, str(error)
    except OSError:
        return None, source, "the current directory cannot be read"


def run(store: MemoryStore, *, as_json: bool, environ: Mapping[str, str] | None = None) -> int:
    """Print the projects and this folder's; the exit status (1 when this folder names no valid project)."""
    environ = os.environ if environ is None else environ
    projects = counted(store)
    project, source, problem = here(environ, Path.cwd())
    if as_json:
        answer = {
            "projects": [{"project": name, "count": count} for name, count in projects],
            "here": {"project": project, "from": source, **({"problem": problem} if problem else {})},
        }
        print(json.dumps(answer, ensure_ascii=False, indent=2))
    else:
        print(render(projects, project, source, problem))
    return 0 if problem is None else 1


def render(
    projects: list[tuple[str | None, int]], project: str | None, source: str, problem: str | None
) -> str:
    """The table (memories, then the project), then a line on where a host started here stands."""
    width = max([len(str(count)) for _name, count in projects] + [len("memories")])
    lines = [f"{'memories':>{width}}  project"]
    for name, count in projects:
        label = "(no project: they hold everywhere)" if name is None else name
        mark = "  ← here" if problem is None and name == project else ""
        lines.append(f"{count:>{width}}  {label}{mark}")
    if len(lines) == 1:
        lines.append(f"{0:>{width}}  (no memories yet)")
    how = f"set by {PROJECT_VARIABLE}" if source == PROJECT_VARIABLE else "from this folder"
    if problem is not None:
        lines.append(f"here: no project can be worked out ({problem})")
    elif project is None:
        lines.append(f"here: no project ({how}): a host started here reads the memories with no project")
    else:
        lines.append(f"here: {project} ({how})")
    return "\n".join(lines)
