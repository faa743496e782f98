"""How the page shows projects: a memory's, the filter's choices, the counts, a move's choices.

A memory's project is a name, or none (it holds everywhere: the agent reads it in
every project). The list's and the search's filter is a scope (squirrel_mcp.ui.forms
`project_scope`): every project, none, or one project. Every value is escaped by
`html` (squirrel_mcp.ui.html); addresses are built by `urlencode`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlencode

from squirrel_mcp.core.models import EVERY_PROJECT
from squirrel_mcp.ui.html import Html, html, join
from squirrel_mcp.ui.selection import MOVE_NONE, MOVE_TO

NO_PROJECT = "no project"
# How many live memories each project holds (None: those with none), as Catalog.live_project_counts.
ProjectCounts = Mapping[str | None, int]


def project_text(project: str | None) -> str:
    """A project as the page writes it: its name, or "no project"."""
    return NO_PROJECT if project is None else project


def scope_link(scope: str) -> str:
    """The list's address filtered by a scope ("" : the memories with no project)."""
    return "/?" + urlencode({"project": scope})


def project_label(project: str | None) -> Html:
    """A memory's project, a link to the list of that project's memories (or of those with none)."""
    title = "Memories with no project" if project is None else "The memories of this project"
    return html(
        '<a class="project{none}" href="{href}" title="{title}">{name}</a>',
        none=Html(" none" if project is None else ""),
        href=scope_link(project or ""),
        title=title,
        name=project_text(project),
    )


def known(counts: ProjectCounts) -> list[str]:
    """The projects' names, as a person looks one up: by name, ignoring case."""
    return sorted((name for name in counts if name is not None), key=lambda name: (name.casefold(), name))


def scope_options(selected: str, counts: ProjectCounts) -> Html:
    """The <option>s of a filter's project <select>: every project, none, then each with its count.

    A project named by the address but holding no live memory is listed too, so the
    select shows what the page filters by.
    """
    names = known(counts)
    if selected not in (EVERY_PROJECT, "") and selected not in names:
        names.append(selected)
    total = sum(counts.values())
    choices = [(EVERY_PROJECT, f"every project ({total})"), ("", f"{NO_PROJECT} ({counts.get(None, 0)})")]
    choices += [(name, f"{name} ({counts.get(name, 0)})") for name in names]
    return join(
        html(
            '<option value="{value}"{chosen}>{label}</option>',
            value=value,
            chosen=Html(" selected" if value == selected else ""),
            label=label,
        )
        for value, label in choices
    )


def scope_select(selected: str, counts: ProjectCounts) -> Html:
    """The filter's project <select> in its label."""
    return html(
        '<label>Project <select name="project">{options}</select></label>',
        options=scope_options(selected, counts),
    )


def counts_section(counts: ProjectCounts) -> Html:
    """How many live memories each project holds, each a link to the list of them."""
    rows = [(None, counts.get(None, 0)), *((name, counts[name]) for name in known(counts))]
    return html(
        '<h2>By project</h2><ul id="project-counts">{rows}</ul>',
        rows=join(
            html(
                '<li><a href="{href}">{name}</a> <span>{n}</span></li>',
                href=scope_link(project or ""),
                name=project_text(project),
                n=count,
            )
            for project, count in rows
        ),
    )


def move_fields(names: Sequence[str]) -> Html:
    """The bulk bar's move: a project it lists, none, or a new one's name typed; then the button."""
    options = join(
        html('<option value="{value}">{name}</option>', value=MOVE_TO + name, name=name) for name in names
    )
    return html(
        '<span class="move"><label>Move to <select name="to">'
        '<option value="">choose…</option><option value="{none}">{no_project}</option>{options}'
        "</select></label>"
        '<label>or a new one <input name="new_project" maxlength="1000" placeholder="its name" '
        'data-enter="move"></label>'
        '<button type="submit" name="action" value="move">Move</button></span>',
        none=MOVE_NONE,
        no_project=NO_PROJECT,
        options=options,
    )


def names_list(names: Sequence[str]) -> Html:
    """A <datalist> of the projects, which a project field offers as it is typed in."""
    return html(
        '<datalist id="projects">{options}</datalist>',
        options=join(html('<option value="{name}">', name=name) for name in names),
    )
