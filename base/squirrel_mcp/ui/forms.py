"""The page's forms and filters: read, then checked by the same rules as the server's tools.

A field that breaks a rule becomes a FormError naming the field and the rule,
never the value (it may be memory text); nothing is written then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qsl

from pydantic import Field, TypeAdapter, ValidationError
from starlette.requests import Request

from squirrel_mcp.core.models import (
    EVERY_PROJECT,
    MAX_KEYWORDS,
    MAX_PROJECT,
    MAX_TAGS,
    MAX_TEXT,
    Category,
    Entity,
    Keywords,
    MemoryText,
    Reason,
    Revision,
    Tag,
    Tags,
)
from squirrel_mcp.core.projects import ProjectError, project_name
from squirrel_mcp.server import refusals

# The largest correction form, every character 4 bytes of UTF-8 sent as %XX, is under
# 100 KiB; a body far above that is not this page's form.
MAX_BODY = 256 * 1024
MAX_FIELDS = 20
MAX_QUERY = 1000
MAX_SEARCH_LIMIT = 50
MAX_LIST_LIMIT = 100
MAX_OFFSET = 1_000_000
LIST_PAGE = 20

T = TypeVar("T")


class FormError(Exception):
    """Fields that break a rule: (field, rule) pairs, shown next to the form."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{name}: {rule}" for name, rule in problems))
        self.problems = problems


class BodyTooLarge(Exception):
    """The request body is larger than any form of this page."""


@dataclass
class Checker:
    """Checks fields one by one and collects every problem, so a form shows them all at once."""

    problems: list[tuple[str, str]] = field(default_factory=list)

    def check(self, name: str, adapter: TypeAdapter[T], value: object) -> T | None:
        """`value` checked by `adapter`; None (and a problem recorded) when it breaks a rule."""
        try:
            return adapter.validate_python(value)
        except ValidationError as error:
            # Said as the tools say it, never in the validation library's words.
            schema = adapter.json_schema()
            for problem in error.errors(include_input=False, include_url=False):
                where = ".".join(str(part) for part in problem["loc"])
                label = f"{name} {int(where) + 1}" if where.isdigit() else name
                self.problems.append((label, refusals.rule_and_remedy(problem, schema)))
            return None

    def fail(self, name: str, rule: str) -> None:
        """Record a problem found by hand."""
        self.problems.append((name, rule))

    def done(self) -> None:
        """Raise FormError if any check failed."""
        if self.problems:
            raise FormError(self.problems)


TEXT = TypeAdapter[str](MemoryText)
ENTITY = TypeAdapter[str](Entity)
CATEGORY = TypeAdapter[Category](Category)
TAGS = TypeAdapter[list[str]](Tags)
TAG = TypeAdapter[str](Tag)
KEYWORDS = TypeAdapter[list[str]](Keywords)
REASON = TypeAdapter[str](Reason)
QUERY = TypeAdapter[str](Annotated[str, Field(min_length=1, max_length=MAX_QUERY)])
SEARCH_LIMIT = TypeAdapter[int](Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT)])
LIST_LIMIT = TypeAdapter[int](Annotated[int, Field(ge=1, le=MAX_LIST_LIMIT)])
OFFSET = TypeAdapter[int](Annotated[int, Field(ge=0, le=MAX_OFFSET)])
REVISION = TypeAdapter[int](Annotated[int, Field(ge=1)])


# The fields a correction can change, in the order the forms and the history show them.
FIELDS = ("text", "entity", "category", "tags", "keywords")


def split_list(value: str) -> list[str]:
    """A comma-separated field as its items (blank ones dropped)."""
    return [item.strip() for item in value.split(",") if item.strip()]


def words(values: list[str]) -> str:
    """Tags or keywords as the comma-separated text of their form field."""
    return ", ".join(values)


def project_scope(checker: Checker, value: str | None) -> str:
    """A list's or a search's `project` parameter: EVERY_PROJECT (also when absent), "" for none, or a name.

    The page filters as the tools' `project` argument reads ("*" every project, "" none),
    except that a name is that project's memories alone: a person sorting memories
    wants to see one project, not it mixed with those that hold everywhere.
    """
    if value is None or value.strip() == EVERY_PROJECT:
        return EVERY_PROJECT
    name = named_project(checker, "project", value)
    return "" if name is None else name


def named_project(checker: Checker, label: str, value: str) -> str | None:
    """`value` as a project, by the tools' rules (None: none, for a blank one); a problem when it is none."""
    try:
        return project_name(value)
    except ProjectError as error:
        # ProjectError names the rule, never the value.
        checker.fail(label, str(error))
        return None


def projects_in(scope: str) -> frozenset[str | None] | None:
    """The projects a `project_scope` reads (None in it: the memories with no project; None: every one)."""
    if scope == EVERY_PROJECT:
        return None
    return frozenset({scope or None})


async def read_pairs(request: Request, *, max_fields: int = MAX_FIELDS) -> list[tuple[str, str]]:
    """An application/x-www-form-urlencoded body as its (name, value) pairs, in order.

    BodyTooLarge past MAX_BODY bytes; FormError when it is no such form or has more
    than `max_fields` fields.
    """
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise FormError([("form", "must be sent as application/x-www-form-urlencoded")])
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise BodyTooLarge
    try:
        return parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, max_num_fields=max_fields, errors="strict"
        )
    except (UnicodeDecodeError, ValueError):
        raise FormError([("form", f"must be UTF-8 with at most {max_fields} fields")]) from None


async def read_form(request: Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body as {name: value} (the first of repeated names)."""
    form: dict[str, str] = {}
    for name, value in await read_pairs(request):
        form.setdefault(name, value)
    return form


@dataclass(frozen=True)
class ListFilters:
    """The list's filters: those of the list_memories tool, and the page."""

    category: Category | None = None
    tags: tuple[str, ...] = ()
    entity: str | None = None
    deleted: bool = False
    offset: int = 0
    limit: int = LIST_PAGE
    #: A `project_scope`: EVERY_PROJECT, "" (none) or a project's name.
    project: str = EVERY_PROJECT

    def accepts(self, memory: Revision) -> bool:
        """Whether `memory` passes the category, tags, entity and project filters."""
        held = {tag.casefold() for tag in memory.tags}
        projects = projects_in(self.project)
        return (
            (self.category is None or memory.category == self.category)
            and (projects is None or memory.project in projects)
            and all(tag.casefold() in held for tag in self.tags)
            and (self.entity is None or memory.entity.casefold() == self.entity.casefold())
        )

    def query(self, **changes: Any) -> dict[str, str]:
        """These filters (with `changes`) as URL query parameters, for the paging links."""
        values = {
            "category": self.category or "",
            "tags": words(list(self.tags)),
            "entity": self.entity or "",
            "deleted": "1" if self.deleted else "",
            "offset": str(self.offset),
            "limit": str(self.limit),
            "project": self.project,
        } | {name: str(value) for name, value in changes.items()}
        # "" is a project filter too (the memories with none); every project is the default.
        return {
            name: value
            for name, value in values.items()
            if (value != EVERY_PROJECT if name == "project" else value and value != "0")
        }


def list_filters(params: dict[str, str]) -> ListFilters:
    """The list's filters from the query string; FormError when one breaks a rule."""
    checker = Checker()
    category = params.get("category") or None
    entity = params.get("entity", "").strip() or None
    tags = checker.check("tags", TAGS, split_list(params.get("tags", "")))
    filters = ListFilters(
        category=None if category is None else checker.check("category", CATEGORY, category),
        tags=tuple(tags or ()),
        entity=None if entity is None else checker.check("entity", ENTITY, entity),
        deleted=params.get("deleted") == "1",
        offset=checker.check("offset", OFFSET, params.get("offset") or "0") or 0,
        limit=checker.check("limit", LIST_LIMIT, params.get("limit") or str(LIST_PAGE)) or LIST_PAGE,
        project=project_scope(checker, params.get("project")),
    )
    checker.done()
    return filters


@dataclass(frozen=True)
class SearchForm:
    """A search: the search_memory tool's arguments."""

    query: str = ""
    category: Category | None = None
    tags: tuple[str, ...] = ()
    near_misses: bool = False
    limit: int = 10
    #: A `project_scope`, as the list's.
    project: str = EVERY_PROJECT


def search_form(params: dict[str, str]) -> SearchForm:
    """The search from the query string; FormError when a field breaks a rule."""
    checker = Checker()
    category = params.get("category") or None
    tags = checker.check("tags", TAGS, split_list(params.get("tags", "")))
    form = SearchForm(
        query=checker.check("query", QUERY, params.get("q", "")) or "",
        category=None if category is None else checker.check("category", CATEGORY, category),
        tags=tuple(tags or ()),
        near_misses=params.get("near") == "1",
        limit=checker.check("limit", SEARCH_LIMIT, params.get("limit") or "10") or 10,
        project=project_scope(checker, params.get("project")),
    )
    checker.done()
    return form


def correction(form: dict[str, str], current: Revision) -> tuple[dict[str, object], str, int]:
    """A correction form as (changed fields, reason, the revision it was rendered from).

    Only fields that differ from `current` are changed. A reason is required: it is
    what the history shows next to the change.
    """
    checker = Checker()
    text = checker.check("text", TEXT, form.get("text", ""))
    entity = checker.check("entity", ENTITY, form.get("entity", ""))
    category = checker.check("category", CATEGORY, form.get("category", ""))
    tags = checker.check("tags", TAGS, split_list(form.get("tags", "")))
    keywords = checker.check("keywords", KEYWORDS, split_list(form.get("keywords", "")))
    values: dict[str, object] = {
        "text": text,
        "entity": entity,
        "category": category,
        "tags": tags,
        "keywords": keywords,
    }
    reason = checker.check("reason", REASON, form.get("reason", ""))
    revision = checker.check("revision", REVISION, form.get("revision", ""))
    checker.done()
    changes = {name: value for name, value in values.items() if value != getattr(current, name)}
    if not changes:
        checker.fail("form", "nothing to change: edit the text, entity, category, tags or keywords")
        checker.done()
    assert reason is not None
    assert revision is not None
    return changes, reason, revision


def correction_values(form: dict[str, str]) -> dict[str, str]:
    """The fields of a correction form that come back into it (a body's other names are dropped)."""
    return {name: form[name] for name in (*FIELDS, "reason") if name in form}


def field_text(revision: Revision, name: str) -> str:
    """One of FIELDS of `revision` as the text of its form field."""
    value = getattr(revision, name)
    return words(value) if isinstance(value, list) else str(value)


def _same(name: str, one: str, other: str) -> bool:
    """Whether two texts of field `name` say the same (a list's spacing aside)."""
    if name in ("tags", "keywords"):
        return split_list(one) == split_list(other)
    return one.strip() == other.strip()


def rebase(
    form: dict[str, str], loaded: Revision | None, latest: Revision
) -> tuple[dict[str, str], list[str]]:
    """A correction refused because the memory changed, moved onto `latest`.

    `loaded` is the revision the form was rendered from (None when it cannot be
    read). A field the person left as it was takes `latest`'s value, so saving
    again does not undo the other change; a field the person edited keeps their
    text. Returns the form's new values and the fields both changed differently.
    """
    values = correction_values(form)
    both = []
    for name in FIELDS:
        mine, now = form.get(name, ""), field_text(latest, name)
        before = None if loaded is None else field_text(loaded, name)
        if before is not None and _same(name, mine, before):
            values[name] = now
        elif not _same(name, mine, now) and (before is None or not _same(name, before, now)):
            both.append(name)
    values["revision"] = str(latest.revision)
    return values, both


@dataclass(frozen=True)
class NewMemory:
    """A memory to save: the save_memory tool's arguments."""

    text: str
    entity: str
    category: Category
    tags: list[str]
    keywords: list[str]
    project: str | None = None


def new_memory(form: dict[str, str]) -> NewMemory:
    """The add form as the memory to save, by the save_memory tool's rules; FormError when one is broken."""
    checker = Checker()
    text = checker.check("text", TEXT, form.get("text", ""))
    entity = checker.check("entity", ENTITY, form.get("entity", "").strip() or "user")
    category = checker.check("category", CATEGORY, form.get("category", "") or "note")
    tags = checker.check("tags", TAGS, split_list(form.get("tags", "")))
    keywords = checker.check("keywords", KEYWORDS, split_list(form.get("keywords", "")))
    # Blank: no project, as save_memory's "" (the page has no session, so none is the default).
    project = named_project(checker, "project", form.get("project", ""))
    checker.done()
    assert text is not None
    assert entity is not None
    assert category is not None
    return NewMemory(text, entity, category, tags or [], keywords or [], project)


def new_memory_values(form: dict[str, str]) -> dict[str, str]:
    """The fields of the add form that come back into it (a body's other names are dropped)."""
    return {name: form[name] for name in (*FIELDS, "project") if name in form}


def optional_reason(form: dict[str, str]) -> str | None:
    """A delete form's reason: None when left blank; FormError when it breaks a rule."""
    if not form.get("reason", "").strip():
        return None
    checker = Checker()
    reason = checker.check("reason", REASON, form["reason"])
    checker.done()
    return reason


# Shown next to the fields, so a person sees the rules before breaking one.
LIMITS = {
    "text": f"1 to {MAX_TEXT} characters",
    "tags": f"comma-separated, at most {MAX_TAGS}",
    "keywords": f"comma-separated, at most {MAX_KEYWORDS}",
    "project": f"blank: no project (it holds everywhere); else a name, at most {MAX_PROJECT} characters",
}
