"""The package's structure as the structure tests read it: its rooms (modules), their folders
and the imports between them, read from the sources (nothing of the package is imported).

A room is named by its dotted path under the package: ``_time._driver`` is
``aiowheel/_time/_driver.py``, ``loops`` is the public face ``aiowheel/loops.py``, ``__init__``
the package's own face. A folder is a private subpackage (``_time``, ``_loopmode``...); its own
``__init__.py`` holds a docstring only and is no room. The native core counts as the room of
its C file, ``_time._core``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import PACKAGE


def rooms(package: Path = PACKAGE) -> dict[str, Path]:
    """Every room of ``package`` by its dotted name, in sorted order: its modules, and the
    native core's C file where the checkout has it (a wheel holds no C sources)."""
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if len(parts) > 1 and parts[-1] == "__init__":
            continue  # a folder's docstring
        found[".".join(parts)] = path
    for path in sorted([*package.glob("*.c"), *package.glob("*/*.c")]):  # not the parts below
        found[".".join(path.relative_to(package).with_suffix("").parts)] = path
    return dict(sorted(found.items()))


def folders(package: Path = PACKAGE) -> list[str]:
    """The folders of ``package`` (its subpackages), sorted."""
    return sorted(path.parent.name for path in package.glob("*/__init__.py"))


def folder_of(room: str) -> str | None:
    """The folder a room stands in (``_time`` for ``_time._driver``), or None for a face."""
    head, dot, _ = room.partition(".")
    return head if dot else None


def resolve(at: str, level: int, module: str | None) -> list[str]:
    """The dotted path (as parts) that ``from <level dots><module> import ...`` names in the
    room ``at``: one dot is the room's own folder, each more one folder up."""
    package = at.split(".")[:-1]
    base = package[: len(package) - (level - 1)] if level > 1 else package
    return [*base, *(module.split(".") if module else [])]


def imports_of(path: Path, at: str) -> set[str]:
    """The dotted names ``path`` (the room named ``at``) imports from the package, anywhere in
    its code (at run time, lazily inside a function, or for type checking alike).

    Every spelling is resolved against the room's own folder: ``from ._x import y`` and ``from
    . import _x`` name ``<folder>._x``; ``from .._t._x import y``, ``from .._t import _x`` and
    ``import aiowheel._t._x`` name ``_t._x``. Where a name could be a module or a name in a
    module (``from .._t import _x``), both candidates are listed: the caller keeps the rooms.
    """
    found: set[str] = set()
    if path.suffix != ".py":
        return found  # the native core imports aiowheel._time._handles by name, at run time

    def add(base: list[str], names: list[str]) -> None:
        if base:
            found.add(".".join(base))
        for name in names:
            found.add(".".join([*base, name]))

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            add(resolve(at, node.level, node.module), [alias.name for alias in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiowheel."):
            add((node.module or "").split(".")[1:], [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("aiowheel."):
                    add(alias.name.split(".")[1:], [])
    return found


def room_imports(name: str, known: dict[str, Path]) -> set[str]:
    """The rooms of ``known`` that the room ``name`` imports (itself left out)."""
    return (imports_of(known[name], name) & set(known)) - {name}
