"""Every snippet a reader is told to run, runs: the code blocks marked ``<!-- runnable -->`` in
the README and the documentation pages, as a new user would paste them.

- ``<!-- runnable -->`` before a Python block: the block is saved as a file and run with this
  interpreter; it must exit 0 without a traceback.
- ``<!-- runnable: file NAME -->``: the block is saved as ``NAME`` beside the page's other
  snippets (an app the next block serves); it must compile.
- ``<!-- runnable: server -->`` before a console block: its first ``$`` line starts a server
  (its ``--port`` replaced by a free one) in the directory of the page's files, and each
  ``$ curl URL`` line after it is asked of that server, the lines that follow being the
  expected answer.
"""

from __future__ import annotations

import http.client
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ROOT, free_port

pytestmark = pytest.mark.once  # the pages' snippets: CI's first pass

BLOCK = re.compile(
    r"<!-- runnable(?::\s*(?P<how>[^>]*?))?\s*-->\s*\n```(?P<lang>\w+)\n(?P<code>.*?)\n```",
    re.DOTALL,
)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent


def _pages_with_snippets() -> list[Path]:
    return [page for page in PAGES if BLOCK.search(page.read_text())]


def test_the_getting_started_snippets_are_marked() -> None:
    # The pages a newcomer starts from hold runnable snippets (a lost marker would let
    # every snippet rot unseen).
    marked = {page.name for page in _pages_with_snippets()}
    assert {"README.md", "quickstart.md"} <= marked, marked


@pytest.mark.parametrize("page", _pages_with_snippets(), ids=lambda page: page.name)
def test_every_runnable_snippet_of_the_page_runs(page: Path, tmp_path: Path) -> None:
    for number, block in enumerate(BLOCK.finditer(page.read_text()), 1):
        how, lang, code = block["how"] or "", block["lang"], block["code"]
        where = f"{page.name}, runnable block {number}"
        if how.startswith("file "):
            name = how.split()[1]
            (tmp_path / name).write_text(code + "\n")
            compile(code, name, "exec")
        elif how == "server":
            assert lang == "console", where
            _serve_and_ask(code, tmp_path, where)
        else:
            assert lang == "python", where
            script = tmp_path / f"snippet_{number}.py"
            script.write_text(code + "\n")
            done = subprocess.run(
                [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0 and "Traceback" not in done.stderr, (
                f"{where}:\n{done.stdout}\n{done.stderr}"
            )


def _serve_and_ask(console: str, cwd: Path, where: str) -> None:
    lines = console.splitlines()
    assert lines[0].startswith("$ "), where
    port = free_port()
    command = shlex.split(lines[0][2:])
    command[0] = str(BIN / command[0])
    command = [str(port) if arg == "8000" else arg for arg in command]
    server = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        asks = _asks(lines[1:], port)
        assert asks, f"{where}: no curl line to check the server with"
        for path, expected in asks:
            assert _get(port, path, server, where) == expected, where
    finally:
        server.terminate()
        server.wait(timeout=15)


def _asks(lines: list[str], port: int) -> list[tuple[str, str]]:
    """(path, expected body) for each ``$ curl http://127.0.0.1:8000/PATH`` line."""
    asks: list[tuple[str, str]] = []
    for line in lines:
        if line.startswith("$ curl "):
            url = line.split()[-1]
            asks.append((re.sub(r"^https?://[^/]+", "", url) or "/", ""))
        elif asks:
            path, body = asks[-1]
            asks[-1] = (path, body + line + "\n")
    return asks


def _get(port: int, path: str, server: subprocess.Popen[str], where: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            return conn.getresponse().read().decode()
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                stderr = server.stderr.read() if server.stderr else ""
                raise AssertionError(f"{where}: the server did not answer\n{stderr}") from None
            time.sleep(0.2)
