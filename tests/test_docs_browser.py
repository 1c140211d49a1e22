"""The documentation site as a reader sees it: built with ``mkdocs build --strict`` and every page opened in a real
headless Chromium at a laptop's 1366x768, where no code block and no table may need sideways scrolling (its box
would hide the columns a reader came for) and no page may scroll sideways.

The boxes are the browser's own layout (``scrollWidth`` against ``clientWidth``), so a line too long fails here as it
would on screen. One browser visits every page. Skips, saying why, without MkDocs or a browser (CI has both:
``.ci/run`` installs the docs extra and Chromium, and sets ``IGNITE_DDL_BROWSER_REQUIRED=1``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_browser import _viewport

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 1366, 768

# Every code block and table of the page's content whose box is narrower than what it holds (Material wraps a table
# in a scrolling box of its own, and scrolls a code block inside its <code>), and the page's own width.
OVERFLOW_JS = """
const found = [];
for (const box of document.querySelectorAll('.md-content pre > code, .md-content .md-typeset__scrollwrap')) {
  if (box.scrollWidth > box.clientWidth + 1) {
    const first = box.matches('code') ? box.textContent : (box.querySelector('tr') || box).textContent;
    found.push(`${box.matches('code') ? 'code' : 'table'} ${box.scrollWidth} > ${box.clientWidth} px: `
      + first.trim().replace(/\\s+/g, ' ').slice(0, 60));
  }
}
return {found: found, page: [document.documentElement.scrollWidth, document.documentElement.clientWidth]};
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it (strict: a warning fails)."""
    if importlib.util.find_spec("mkdocs") is None:
        reason = "MkDocs is not installed (pip install -e '.[docs]')"
        if os.environ.get("IGNITE_DDL_BROWSER_REQUIRED") == "1":
            pytest.fail(reason + "; IGNITE_DDL_BROWSER_REQUIRED=1")
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return out


def test_every_page_fits_a_laptop_screen(site: Path, chromium):
    driver = chromium
    pages = sorted(site.rglob("index.html"))
    assert len(pages) > 30  # every page, the API reference's included
    failures = []
    _viewport(driver, WIDTH, HEIGHT)
    for page in pages:
        driver.get(page.as_uri())
        found = driver.execute_script(OVERFLOW_JS)
        name = page.parent.relative_to(site).as_posix().replace(".", "home", page.parent == site)
        failures += [f"{name}: {what}" for what in found["found"]]
        if found["page"][0] > found["page"][1]:
            failures.append(f"{name}: the page scrolls sideways ({found['page'][0]} > {found['page'][1]} px)")
    assert not failures, f"{len(failures)} boxes need sideways scrolling at {WIDTH} px:\n" + "\n".join(failures)
