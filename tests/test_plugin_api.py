"""The public plugin API: one module holds everything a plugin imports of squirrel-mcp.

The example ranker, the built-in lexical ranker and every module of the embeddings
plugin import squirrel-mcp only through `squirrel_mcp.plugin_api`; docs/plugins.md shows
only that module, and every squirrel-mcp type it or a hook's signature names is
exported there.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from squirrel_mcp import plugin_api
from squirrel_mcp.book import memories, reader
from squirrel_mcp.cli import unlock
from squirrel_mcp.core import config, files, models
from squirrel_mcp.keys import crypto
from squirrel_mcp.plugins import checks, hookspecs
from squirrel_mcp.plugins import manager as plugins
from squirrel_mcp.search import bm25, ranking
from squirrel_mcp.server import results, searching
from squirrel_mcp.text import tokens

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "plugins.md"
API = "squirrel_mcp.plugin_api"
# Plugins that must import squirrel-mcp through the API module only.
PLUGINS = [
    ROOT / "docs" / "examples" / "squirrel-mcp-reverse-ranker" / "squirrel_mcp_reverse_ranker.py",
    ROOT / "base" / "squirrel_mcp" / "default_plugins" / "lexical.py",
    ROOT / "embeddings_plugin" / "squirrel_mcp_embeddings" / "plugin.py",
]
# Every module of the embeddings plugin: what it imports of squirrel-mcp is the API module, if anything.
EMBEDDINGS = sorted((ROOT / "embeddings_plugin" / "squirrel_mcp_embeddings").rglob("*.py"))
# The modules the API gathers from: a public name of theirs that the docs mention must be exported.
SOURCES = [
    config,
    hookspecs,
    memories,
    reader,
    models,
    plugins,
    ranking,
    bm25,
    crypto,
    files,
    unlock,
    searching,
    results,
    tokens,
]


def squirrel_imports(source: str) -> list[str]:
    """Every module of squirrel_mcp that `source` imports, as written (relative imports as "." names)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "squirrel_mcp"]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module.split(".")[0] == "squirrel_mcp":
                if module == "squirrel_mcp":
                    # `from squirrel_mcp import x` reaches the submodule x when there is one.
                    found += [f"squirrel_mcp.{alias.name}" for alias in node.names]
                else:
                    found.append(module)
    return found


@pytest.mark.parametrize("path", PLUGINS, ids=lambda path: path.name)
def test_plugins_import_only_the_api_module(path: Path) -> None:
    imported = squirrel_imports(path.read_text(encoding="utf-8"))
    assert API in imported
    assert [module for module in imported if module != API] == []


@pytest.mark.parametrize("path", EMBEDDINGS, ids=lambda path: path.name)
def test_every_module_of_the_embeddings_plugin_imports_only_the_api_module(path: Path) -> None:
    assert [module for module in squirrel_imports(path.read_text(encoding="utf-8")) if module != API] == []


def test_every_module_of_the_embeddings_plugin_is_scanned() -> None:
    names = {path.name for path in EMBEDDINGS}
    assert {"__init__.py", "plugin.py", "vectors.py", "diagnose.py", "doctor.py"} <= names


def test_the_import_scan_sees_every_form() -> None:
    source = (
        "import squirrel_mcp.search.ranking\n"
        "from squirrel_mcp import plugins\n"
        "from squirrel_mcp.book.memories import MemoryReader\n"
        "import squirrel_mcp_embeddings\n"
        "def f():\n    from squirrel_mcp.core.config import Config\n"
    )
    assert sorted(squirrel_imports(source)) == [
        "squirrel_mcp.book.memories",
        "squirrel_mcp.core.config",
        "squirrel_mcp.plugins",
        "squirrel_mcp.search.ranking",
    ]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_docs_import_only_the_api_module() -> None:
    # Line by line: the hook reference's blocks are signatures, not code that parses.
    lines = [line for block in python_blocks(DOCS.read_text(encoding="utf-8")) for line in block.splitlines()]
    imports = [line for line in lines if re.match(r"(from|import) squirrel_mcp\b", line)]
    imported = [module for line in imports for module in squirrel_imports(line)]
    assert API in imported
    assert [module for module in imported if module != API] == []
    for line in imports:
        (node,) = ast.parse(line).body
        assert isinstance(node, ast.ImportFrom)
        assert {alias.name for alias in node.names} <= set(plugin_api.__all__)


def test_every_squirrel_name_the_docs_mention_is_exported() -> None:
    text = DOCS.read_text(encoding="utf-8")
    spans = re.findall(r"`([^`\n]+)`", text) + python_blocks(text)
    mentioned = {word for span in spans for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}
    public = {
        name
        for module in SOURCES
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", None) == module.__name__
        and (inspect.isclass(value) or inspect.isfunction(value))
    }
    hooks = {spec.__name__ for spec in hook_specs()}
    # The machinery that runs plugins, which the docs name but a plugin never imports.
    host_side = {"load_plugins"}
    # Methods the docs name (`memories.derive_key(purpose)`) that share a function's name in SOURCES.
    methods = {"derive_key"}
    assert sorted((mentioned & public) - hooks - host_side - methods - set(plugin_api.__all__)) == []
    assert {"Candidate", "RankOptions", "Ranking", "RankedHit", "Config", "MemoryReader", "hookimpl"} <= (
        mentioned & set(plugin_api.__all__)
    )


def test_every_exported_name_is_documented() -> None:
    """docs/plugins.md names, and the API module's docstring says what for, every exported name."""
    text = DOCS.read_text(encoding="utf-8")
    documented = {word for span in re.findall(r"`([^`\n]+)`", text) for word in re.findall(r"\w+", span)}
    assert sorted(set(plugin_api.__all__) - documented) == []
    described = {
        word
        for span in re.findall(r"`([^`]+)`", plugin_api.__doc__ or "")
        for word in re.findall(r"\w+", span)
    }
    assert sorted(set(plugin_api.__all__) - described) == []


def hook_specs() -> list[typing.Callable[..., object]]:
    return [value for value in vars(hookspecs).values() if hasattr(value, "squirrel_mcp_spec")]


def names_hookspecs_imports() -> dict[str, object]:
    """Every name of hookspecs, with those it imports for type checking only (`if TYPE_CHECKING`)."""
    names = dict(vars(hookspecs))
    for node in ast.walk(ast.parse(inspect.getsource(hookspecs))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("squirrel_mcp"):
            module = importlib.import_module(str(node.module))
            for alias in node.names:
                names.setdefault(alias.asname or alias.name, getattr(module, alias.name))
    return names


def test_every_type_a_hook_takes_or_returns_is_exported() -> None:
    specs = hook_specs()
    assert len(specs) == 7
    # The annotations as written (argparse's sub-parser type cannot be evaluated on Python 3.11).
    written = " ".join(str(hint) for spec in specs for hint in spec.__annotations__.values())
    known = names_hookspecs_imports()
    named = {known.get(word) for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", written)}
    needed = {kind for kind in named if inspect.isclass(kind) and kind.__module__.startswith("squirrel_mcp")}
    assert needed == {
        checks.Check,
        config.Config,
        reader.MemoryReader,
        models.Revision,
        ranking.Candidate,
        ranking.Ranking,
        ranking.RankOptions,
    }
    for kind in needed:
        assert getattr(plugin_api, kind.__name__) is kind


def test_every_exported_name_exists() -> None:
    for name in plugin_api.__all__:
        assert getattr(plugin_api, name) is not None
    assert plugin_api.hookimpl is hookspecs.hookimpl


def test_the_api_module_is_cheap_to_import() -> None:
    """Importing it loads neither the MCP SDK nor the server's tools nor the command line's parser."""
    heavy = ["squirrel_mcp.server.app", "squirrel_mcp.server.tools", "squirrel_mcp.cli.main"]
    probe = (
        "import sys, squirrel_mcp.plugin_api\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp' or m in {heavy!r}))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
