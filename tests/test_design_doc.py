"""The design page's module table names every module of the package, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_module_table_matches_the_package() -> None:
    page = (ROOT / "docs" / "design.md").read_text()
    named = set(re.findall(r"^\| `([\w.]+\.py)` \|", page, flags=re.MULTILINE))
    on_disk = {path.name for path in (ROOT / "aiowheel").glob("*.py")}
    assert named == on_disk, {"missing": on_disk - named, "stale": named - on_disk}
