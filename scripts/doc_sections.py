"""One section of a figures document, rewritten in place between its markers.

Several scripts write into one document (docs/benchmarks/hooks.md holds a latency section
and a calibration section): each owns the text between `<!-- NAME -->` and `<!-- /NAME -->`
and leaves the rest of the file as it was.
"""

from __future__ import annotations

from pathlib import Path

TITLES = {"hooks.md": "# The hooks: latency and confidence"}


def write_section(document: Path, name: str, text: str) -> None:
    """Put `text` between the markers of `name` in `document`: replaced when they are there, else appended.

    A new document starts with its title (from TITLES, by file name), so the first script to
    write it does not decide the title for the others.
    """
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    block = f"{begin}\n{text.rstrip(chr(10))}\n{end}\n"
    if not document.exists():
        title = TITLES.get(document.name, f"# {document.stem}")
        document.write_text(f"{title}\n\n{block}", encoding="utf-8")
        return
    current = document.read_text(encoding="utf-8")
    if begin in current and end in current:
        before, _, rest = current.partition(begin)
        _, _, after = rest.partition(end)
        document.write_text(before + block + after.removeprefix("\n"), encoding="utf-8")
    else:
        document.write_text(current.rstrip("\n") + "\n\n" + block, encoding="utf-8")
