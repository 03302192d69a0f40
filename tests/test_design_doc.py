"""The design page's module table names every module of the package (the native core's C file
included), and nothing else; its
tests column names test files that exist, and every test file of a room is named there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import PACKAGE, ROOT

TABLE_ROW = re.compile(r"^\| `([\w.]+\.(?:py|c))` \|.*\| (.+) \|$", flags=re.MULTILINE)
# The groups of tests that are not one room's: whole programs, loop mode as a whole, CPython's.
GROUPS = ("integration", "loop_mode", "conformance")


def _rows() -> dict[str, list[str]]:
    page = (ROOT / "docs" / "design.md").read_text()
    return {
        module: re.findall(r"`([\w/]+\.py)`", tests) for module, tests in TABLE_ROW.findall(page)
    }


def test_the_module_table_matches_the_package() -> None:
    named = set(_rows())
    on_disk = {path.name for path in PACKAGE.glob("*.py")}
    sources = ROOT / "aiowheel"  # C sources are not in a wheel: checked where the checkout has them
    if sources.is_dir():
        on_disk |= {path.name for path in sources.glob("*.c")}
    else:
        on_disk |= {module for module in named if module.endswith(".c")}
    assert named == on_disk, {"missing": on_disk - named, "stale": named - on_disk}


def test_each_module_has_one_row() -> None:
    # A merge can leave a row twice (the dict of rows would hide it, and the order check
    # would read only the later one).
    page = (ROOT / "docs" / "design.md").read_text()
    named = [module for module, _ in TABLE_ROW.findall(page)]
    assert sorted({m for m in named if named.count(m) > 1}) == []


def test_every_room_names_its_tests_and_every_room_test_is_named() -> None:
    rows = _rows()
    named = {test for tests in rows.values() for test in tests}
    assert all(rows.values()), [module for module, tests in rows.items() if not tests]
    missing = {test for test in named if not (ROOT / "tests" / test).is_file()}
    assert not missing, f"the table names test files that do not exist: {sorted(missing)}"
    room_tests = {path.name for path in (ROOT / "tests").glob("test_*.py")}
    room_tests.discard("test_design_doc.py")  # this file: the table's own check
    unnamed = room_tests - named
    assert not unnamed, f"test files no module's row names: {sorted(unnamed)}"
    for group in GROUPS:
        assert list((ROOT / "tests" / group).glob("test_*.py")), f"tests/{group} is empty"


def _imports_of(source: Path) -> set[str]:
    """The aiowheel modules ``source`` imports anywhere in its code (at run time, lazily
    inside a function, or for type checking alike)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:  # from ._x import y, from ._x.y import z
                found.add(node.module.split(".")[0])
            else:  # from . import _x, _y
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiowheel."):
            found.add((node.module or "").split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(
                alias.name.split(".")[1]
                for alias in node.names
                if alias.name.startswith("aiowheel.")
            )
    return found


def test_each_module_imports_only_modules_above_it_in_the_table() -> None:
    # The page's first claim: the table runs from the bottom of the house up, so a module's
    # imports are all rows above its own. The native core counts as its C file's row.
    order = [module.rpartition(".")[0] for module in _rows()]
    rank = {module: place for place, module in enumerate(order)}
    upward = [
        f"{module} imports {target}"
        for module in order
        if (PACKAGE / f"{module}.py").is_file()
        for target in sorted(_imports_of(PACKAGE / f"{module}.py") - {module})
        if target in rank and rank[target] > rank[module]
    ]
    assert upward == [], "rows that import a module below them in docs/design.md: " + "; ".join(
        upward
    )


def test_the_order_check_reads_every_spelling_of_an_import(tmp_path: Path) -> None:
    # The ways an aiowheel module names another: relative, absolute, lazily in a function.
    room = tmp_path / "room.py"
    room.write_text(
        "from . import _a, _b\nfrom ._c import x\nimport aiowheel._d\n"
        "from aiowheel._e import y\ndef f():\n    from ._core import DONE\n"
    )
    assert _imports_of(room) == {"_a", "_b", "_c", "_d", "_e", "_core"}
