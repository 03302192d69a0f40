"""The documentation site builds strictly, and its pages render in a real headless browser.

Needs the ``docs`` extra and a Chromium (Debian's ``chromium``; ``.ci/run`` installs it), so it
is marked ``browser`` and left out of the default run:
``pytest -m browser tests/integration/test_docs.py``.
The site is built with warnings as errors (a broken cross-reference, or a public name without
a docstring, fails it), served on 127.0.0.1, and opened with Playwright driving that Chromium:
the index, the API page and a search must render without a console error.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(ROOT / "docs"), str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_every_public_name_has_an_entry_in_the_api_page(site: Path) -> None:
    import aiowheel
    import aiowheel.loops

    html = (site / "api.html").read_text()
    names = [f"aiowheel.{name}" for name in aiowheel.__all__]
    names += [f"aiowheel.loops.{name}" for name in aiowheel.loops.__all__]
    assert [name for name in names if f'id="{name}"' not in html] == []


@pytest.mark.parametrize(
    ("page", "expect"),
    [
        ("index.html", "hierarchical timing wheel"),
        ("api.html", "aiowheel.Timer"),
        ("search.html?q=reschedule", "Timeout.reschedule"),
    ],
)
def test_pages_render_without_console_errors(
    served: str, page: str, expect: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "no chromium on PATH: apt-get install chromium (as .ci/run does)"
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            tab = browser.new_page()
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda exc: errors.append(str(exc)))
            tab.goto(f"{served}/{page}", wait_until="networkidle")
            if page.startswith("search"):
                tab.wait_for_selector("#search-results li", timeout=15_000)
            assert expect in tab.inner_text("body")
            tab.screenshot(path=str(tmp_path / "page.png"), full_page=False)
        finally:
            browser.close()
    assert errors == []
    assert (tmp_path / "page.png").stat().st_size > 1000
