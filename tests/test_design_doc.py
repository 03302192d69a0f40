"""The design page's module table names every module of the package (the native core's C file
included), and nothing else; its
tests column names test files that exist, and every test file of a room is named there."""

from __future__ import annotations

import re
from pathlib import Path

from tests.house import folder_of, folders, imports_of, room_imports, rooms
from tests.support import ROOT

TABLE_ROW = re.compile(r"^\| `([\w./]+\.(?:py|c))` \|.*\| (.+) \|$", flags=re.MULTILINE)
FOLDER = re.compile(r"^### `(_\w+)/`", flags=re.MULTILINE)
DOORS = re.compile(r"^### `(_\w+)/`.*?^Doors(.*?)$", flags=re.MULTILINE | re.DOTALL)
# The groups of tests that are not one room's: whole programs and CPython's own; and the folders
# of the room tests, one per folder of the house (tests/time/ is aiowheel/_time/'s).
WHOLE = ("integration", "conformance")
GROUPS = (*WHOLE, "time", "seeing", "virtual", "loop_mode", "purgatory", "deadlines", "plugin")


def _page() -> str:
    return (ROOT / "docs" / "design.md").read_text()


def _rows() -> dict[str, list[str]]:
    """Each room's row, by its dotted name (``_time/_wheel.py``: ``_time._wheel``), in the
    table's order, with the test files it names."""
    return {
        path.rpartition(".")[0].replace("/", "."): re.findall(r"`([\w/]+\.py)`", tests)
        for path, tests in TABLE_ROW.findall(_page())
    }


def test_the_module_table_matches_the_package() -> None:
    named = set(_rows())
    on_disk = set(rooms())
    on_disk.add("_time._core")  # an installed wheel holds no C sources: its row stands anyway
    assert named == on_disk, {"missing": on_disk - named, "stale": named - on_disk}


def test_each_module_has_one_row() -> None:
    # A merge can leave a row twice (the dict of rows would hide it, and the order check
    # would read only the later one).
    named = [path for path, _ in TABLE_ROW.findall(_page())]
    assert sorted({m for m in named if named.count(m) > 1}) == []


def test_every_room_names_its_tests_and_every_room_test_is_named() -> None:
    rows = _rows()
    named = {test for tests in rows.values() for test in tests}
    assert all(rows.values()), [module for module, tests in rows.items() if not tests]
    missing = {test for test in named if not (ROOT / "tests" / test).is_file()}
    assert not missing, f"the table names test files that do not exist: {sorted(missing)}"
    tests = ROOT / "tests"
    room_tests = {
        path.relative_to(tests).as_posix()
        for path in tests.rglob("test_*.py")
        if path.relative_to(tests).parts[0] not in WHOLE
    }
    room_tests.discard("test_design_doc.py")  # this file: the table's own check
    unnamed = room_tests - named
    assert not unnamed, f"test files no module's row names: {sorted(unnamed)}"
    for group in GROUPS:
        assert list((ROOT / "tests" / group).glob("test_*.py")), f"tests/{group} is empty"


def _folder_order() -> list[str | None]:
    """The folders from the bottom of the house up, as the page's headings stand; the faces
    (None) on top."""
    return [*FOLDER.findall(_page()), None]


def test_the_folders_are_the_page_s_sections_each_in_one_piece() -> None:
    order = _folder_order()
    assert sorted(f for f in order if f) == folders(), (
        "a folder without its section, or a stale one"
    )
    seen = [folder_of(room) for room in _rows()]
    runs = [folder for place, folder in enumerate(seen) if place == 0 or seen[place - 1] != folder]
    assert runs == order, f"each folder's rows together, in the sections' order: {runs}"


def test_each_folder_imports_only_folders_below_it() -> None:
    # The first scale of the layering: a folder's rooms import rooms of its own folder or of
    # the folders under it, never of one above (the faces stand on top of them all).
    rank = {folder: place for place, folder in enumerate(_folder_order())}
    known = rooms()
    upward = sorted(
        f"{room} imports {target}"
        for room in known
        for target in room_imports(room, known)
        if rank[folder_of(target)] > rank[folder_of(room)]
    )
    assert upward == [], "folders importing a folder above them: " + "; ".join(upward)


def test_each_module_imports_only_modules_above_it_in_the_table() -> None:
    # The second scale: inside a folder (and among the faces) a room imports only the rooms
    # above its own row. The native core counts as its C file's row.
    order = list(_rows())
    rank = {module: place for place, module in enumerate(order)}
    known = rooms()
    upward = [
        f"{module} imports {target}"
        for module in order
        if module in known
        for target in sorted(room_imports(module, known))
        if folder_of(target) == folder_of(module) and rank[target] > rank[module]
    ]
    assert upward == [], "rows that import a module below them in docs/design.md: " + "; ".join(
        upward
    )


def test_each_folder_s_doors_are_the_rooms_other_folders_import() -> None:
    # "Private to this folder" where that is the truth: a room no other folder imports is
    # listed as no door, and a door is a room another folder does import.
    doors = {
        folder: {f"{folder}.{name}" for name in re.findall(r"`(\w+)\.(?:py|c)`", text)}
        for folder, text in DOORS.findall(_page())
    }
    known = rooms()
    used: dict[str | None, set[str]] = {folder: set() for folder in doors}
    for room in known:
        for target in room_imports(room, known):
            if folder_of(target) not in (folder_of(room), None):
                used[folder_of(target)].add(target)
    assert doors == used


def test_the_order_check_reads_every_spelling_of_an_import(tmp_path: Path) -> None:
    # The ways an aiowheel module names another: relative (its own folder, another folder),
    # absolute, lazily in a function.
    room = tmp_path / "room.py"
    room.write_text(
        "from . import _a, _b\nfrom ._c import x\nimport aiowheel._t._d\n"
        "from aiowheel._t._e import y\nfrom .._u import _f\nfrom .._u._g import z\n"
        "def f():\n    from ._core import DONE\n"
    )
    found = imports_of(room, "_t.room")
    expected = {"_t._a", "_t._b", "_t._c", "_t._d", "_t._e", "_u._f", "_u._g", "_t._core"}
    assert expected <= found
    assert found - expected <= {"_t", "_u", "_t._c.x", "_t._e.y", "_u._g.z", "_t._core.DONE"}
