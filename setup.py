"""Build aiowheel: the hot modules compiled with mypyc where possible, pure Python otherwise.

Everything about the package lives in pyproject.toml; this file only adds the compiled build.
The compiled modules are the same ``.py`` sources (mypyc reads their type annotations), so there
is one implementation, plus the native core ``aiowheel/_core.c`` (the callback handles, their
wheel and loop mode's ``call_at`` / ``call_later``; its reference is the pure-Python code, see
``aiowheel/_core.c``). It needs nothing beyond a C compiler and Python's headers: no Cython.
(CI's memory-safety run compiles the core again under AddressSanitizer: ``.ci/asan-suite``.)
The build falls back to the pure-Python package, with one printed line and a successful
install, when:

- ``AIOWHEEL_NO_EXTENSIONS`` is set to a non-empty value other than ``0``;
- mypyc cannot generate the C code (it is a build requirement, so this means a broken mypyc);
- the C compiler is missing or fails (no ``gcc``, no ``Python.h``, ...).

``aiowheel.COMPILED`` tells at run time which build is running.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext


def _compiled_modules() -> list[str]:
    # The list lives in aiowheel/_build.py (which the package reads to tell which build runs);
    # loaded from its file, since the package itself cannot be imported before it is built.
    spec = importlib.util.spec_from_file_location("_aiowheel_build", "aiowheel/_build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return [f"aiowheel/{name}.py" for name in build.COMPILED_MODULES]


PURE_PYTHON_LINE = "aiowheel: building the pure-Python package ({})"


def _wants_extensions() -> bool:
    return os.environ.get("AIOWHEEL_NO_EXTENSIONS", "") in ("", "0")


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python, cleanly, when compiling fails."""

    def run(self) -> None:
        """Build the extensions, or none of them."""
        try:
            super().run()
        except Exception as exc:  # distutils' CompileError, LinkError, OSError for no gcc...
            self._remove_partial_outputs()
            print(PURE_PYTHON_LINE.format(f"compiling failed: {exc}"), file=sys.stderr)

    def _remove_partial_outputs(self) -> None:
        # All or nothing: a shim module without its shared library would fail to import, and
        # an extension left in the source tree by an earlier build (`pip install -e`) would
        # run stale code in place of the sources this build could not compile.
        for ext in self.extensions:
            for path in (self.get_ext_fullpath(ext.name), self.get_ext_filename(ext.name)):
                if os.path.exists(path):
                    os.remove(path)


def _ext_modules() -> list[Any]:
    if not _wants_extensions():
        print(PURE_PYTHON_LINE.format("AIOWHEEL_NO_EXTENSIONS is set"), file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
        from setuptools import Extension

        extensions = mypycify(_compiled_modules(), opt_level="3", group_name="aiowheel._mypyc")
        # Exact IEEE arithmetic, as in Python (no fused multiply-add: a tick must be computed
        # exactly as aiowheel._driver computes it).
        core_flags = ["-O3", "-ffp-contract=off"] if os.name != "nt" else []
        extensions.append(
            Extension(
                "aiowheel._core",
                # One translation unit: _core.c includes the parts (see its header comment).
                ["aiowheel/_core.c"],
                depends=sorted(glob.glob("aiowheel/_native/*.[ch]")),
                extra_compile_args=core_flags,
            )
        )
        if sys.platform.startswith("linux"):  # an ELF notion: gcc and clang on Linux
            # Every module of the group is one C file, and its functions call one another
            # (Timer.call_later -> Driver.call -> Store.file_call; Driver._insert ->
            # Store.insert -> Wheel.insert). Without this flag each such call goes through the
            # PLT, since an exported symbol could be interposed, and none is inlined; with it
            # they are direct calls, and small ones (Driver._unfile's Store.remove) are
            # inlined: CPython builds libpython the same way (churn, paired with the same code
            # built without it, is faster by a margin well above noise).
            for ext in extensions:
                ext.extra_compile_args = [*ext.extra_compile_args, "-fno-semantic-interposition"]
        return extensions
    except Exception as exc:
        print(PURE_PYTHON_LINE.format(f"mypyc is unavailable: {exc!r}"), file=sys.stderr)
        return []


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
