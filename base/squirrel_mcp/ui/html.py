"""HTML built from literal templates in which every value is escaped unless it is already HTML."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape


class Html(str):
    """Text that is already HTML: written into a template as it is."""

    __slots__ = ()


def esc(value: object) -> Html:
    """`value` as HTML text: escaped, quotes too (it may go into an attribute)."""
    if isinstance(value, Html):
        return value
    return Html(escape(str(value), quote=True))


def html(template: str, /, **values: object) -> Html:
    """`template` (a literal in the code) with its `{name}` fields filled in, each escaped."""
    return Html(template.format(**{name: esc(value) for name, value in values.items()}))


def join(parts: Iterable[Html], separator: str = "") -> Html:
    """Pieces of HTML one after the other."""
    return Html(separator.join(esc(part) for part in parts))
