"""Packaging check: the wheel holds the compiled modules; the sdist installs without a compiler.

Run by .ci/run with the project's venv python (it needs `build`, from the dev extra):

1. `python -m build` makes an sdist and a platform wheel; the wheel must hold an extension
   module for every compiled module (aiowheel/_common/_build.py's list), the mypyc shared library,
   the .py sources (the fallback) and py.typed; the sdist must hold the native core's source, its
   one file aiowheel/_time/_core.c and every part it includes (aiowheel/_time/_native/).
2. The sdist, installed into a fresh venv with a C compiler that always fails (CC=false), must
   install, print the one fallback line, and import as the pure-Python build.
3. The wheel, installed into another fresh venv, must import as the compiled build.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _compiled_modules() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location(
        "_build", ROOT / "aiowheel" / "_common" / "_build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names: tuple[str, ...] = module.COMPILED_MODULES
    return names


def _venv(where: Path) -> Path:
    venv.create(where, with_pip=True)
    return where / "bin" / "python"


def _imports_as(python: Path, cwd: Path) -> bool:
    out = subprocess.run(
        [str(python), "-c", "import aiowheel; print(aiowheel.COMPILED)"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return out == "True"


def main() -> int:
    """Run the three checks; raise AssertionError naming what is wrong."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dist = work / "dist"
        subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (wheel,) = dist.glob("*.whl")
        (sdist,) = dist.glob("*.tar.gz")
        assert "-py3-none-any" not in wheel.name, f"not a platform wheel: {wheel.name}"
        names = zipfile.ZipFile(wheel).namelist()
        missing = []
        for dotted in _compiled_modules():
            module = dotted.replace(".", "/")  # _time._wheel: aiowheel/_time/_wheel.py
            if not any(n.startswith(f"aiowheel/{module}.") and n.endswith(".so") for n in names):
                missing.append(f"aiowheel/{module}.*.so")
            if f"aiowheel/{module}.py" not in names:
                missing.append(f"aiowheel/{module}.py")
        if not any(n.startswith("aiowheel/_mypyc__mypyc.") for n in names):
            missing.append("aiowheel/_mypyc__mypyc.*.so")
        if "aiowheel/py.typed" not in names:
            missing.append("aiowheel/py.typed")
        assert not missing, f"{wheel.name} lacks {missing}; it holds {names}"
        print(f"wheel {wheel.name}: {len(names)} files, every compiled module present")

        with tarfile.open(sdist) as archive:
            held = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        parts = (ROOT / "aiowheel" / "_time" / "_native").glob("*.[ch]")
        core = ["aiowheel/_time/_core.c", *sorted(str(path.relative_to(ROOT)) for path in parts)]
        lacking = [name for name in core if name not in held]
        assert len(core) > 1 and not lacking, f"{sdist.name} lacks the native core's {lacking}"
        print(f"sdist {sdist.name}: the native core's {len(core)} source files present")

        python = _venv(work / "from-sdist")
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-v", str(sdist)],
            env={"CC": "false", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        log = done.stdout + done.stderr
        assert "aiowheel: building the pure-Python package (compiling failed" in log, log[-3000:]
        assert not _imports_as(python, work), "the sdist with a failing compiler is not pure"
        print(f"sdist {sdist.name} with CC=false: installed, pure Python, one fallback line")

        python = _venv(work / "from-wheel")
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", str(wheel)],
            check=True,
        )
        assert _imports_as(python, work), "the wheel does not import as the compiled build"
        print(f"wheel {wheel.name}: imports as the compiled build")
    return 0


if __name__ == "__main__":
    sys.exit(main())
