"""The design page's module table names every module of the package (the native core's C file
included), and nothing else; its
tests column names test files that exist, and every test file of a room is named there."""

from __future__ import annotations

import re

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
