"""What has run where is said once: ``docs/status.yml`` is the one source of the status block, every page it lists
carries the block as rendered from it now, and no page of the repository says what a row denies (a GPU path that
has run called never run)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("docs_status", ROOT / "docs" / "status.py")
assert spec is not None and spec.loader is not None
status = importlib.util.module_from_spec(spec)
spec.loader.exec_module(status)

# Every page a reader may land on: the site's, README, the experiments', examples' and notebooks' READMEs.
PAGES = sorted(
    {ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "experiments").rglob("*.md")}
    | {*(ROOT / "examples").rglob("*.md"), *(ROOT / "notebooks").glob("*.md")}
)


def test_every_listed_page_carries_the_status_as_its_source_says():
    source = status.load()
    assert {"README.md", "docs/gpu/README.md", "docs/tpu.md", "docs/memory.md", "docs/faster-step.md"} <= set(
        source["pages"]
    )
    stale = [page for page in source["pages"] if status.carried((ROOT / page).read_text()) != status.render(page)]
    assert not stale, f"the status block differs from docs/status.yml in {stale}: run python docs/status.py"
    for row in source["rows"]:
        assert row["ran"].startswith(("✓", "once", "never")), row
        assert all((ROOT / "docs" / target).is_file() for target in row["shown"].values()), row["shown"]


def test_links_are_relative_to_the_page_that_carries_the_block():
    assert "[first run](docs/gpu/h200-2026-11-27.md)" in status.render("README.md")
    assert "[first run](h200-2026-11-27.md)" in status.render("docs/gpu/README.md")
    assert "[TPU](../tpu.md)" in status.render("docs/gpu/README.md")


def test_no_page_contradicts_the_status():
    found = [f"{page.relative_to(ROOT)} {where}" for page in PAGES for where in status.contradictions(page.read_text())]
    assert not found, "pages that contradict docs/status.yml:\n" + "\n".join(found)
    # what pages said before the H200 ran these paths, each caught
    said = [
        "on the 2-core development VM, which has\nno GPU, **none of them has run**",
        "Compiling on CUDA (Triton kernels) is written but **has never run here: no GPU**.",
        "NCCL kernels on CUDA, written but never run",
        "that has not been measured: no GPU was available.",
    ]
    assert all(status.contradictions(text) for text in said)
