"""The status block ("what has run where") from its one source, ``docs/status.yml``, in every page that carries it.

A page carries the block between two markers; ``python docs/status.py`` writes it there, rendered for that page (its
links relative to the page, as GitHub and the site both resolve them), and ``tests/test_docs_status.py`` checks that
every listed page holds it as rendered now and that no page contradicts a row.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "docs" / "status.yml"
BEGIN = "<!-- status: generated from docs/status.yml by docs/status.py; edit it there -->"
END = "<!-- /status -->"
_BLOCK = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)


def load() -> dict[str, Any]:
    return yaml.safe_load(SOURCE.read_text())


def _link(target: str, page: Path) -> str:
    """``target`` (a path under docs/) as ``page`` (a path under the repository) links to it."""
    return Path(os.path.relpath(ROOT / "docs" / target, (ROOT / page).parent)).as_posix()


def render(page: str | Path, status: dict[str, Any] | None = None) -> str:
    """The block as ``page`` (e.g. ``docs/tpu.md``) carries it, markers included."""
    status = status or load()
    lines = [BEGIN, "**What has run where**", "", "| path | run | on what, when | shown in |", "|---|---|---|---|"]
    for row in status["rows"]:
        shown = ", ".join(f"[{name}]({_link(target, Path(page))})" for name, target in row["shown"].items())
        lines.append(f"| {row['what']} | {row['ran']} | {row['where']} | {shown} |")
    return "\n".join([*lines, END])


def carried(text: str) -> str | None:
    """The block a page's text holds, or None."""
    found = _BLOCK.search(text)
    return found.group(0) if found else None


def contradictions(text: str, status: dict[str, Any] | None = None) -> list[str]:
    """Where ``text`` says what a row's ``contradicted_by`` denies: ``line N: <what it matched> (row: <what>)``."""
    status = status or load()
    found = []
    for row in status["rows"]:
        for pattern in row.get("contradicted_by", []):
            for match in re.finditer(pattern, text, re.I):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"line {line}: {match.group(0)!r} (contradicts: {row['what'].split(':')[0]} {row['ran']})")
    return found


def write() -> list[str]:
    """Write the block into every listed page (each must already hold the markers); the pages changed."""
    status, changed = load(), []
    for page in status["pages"]:
        path = ROOT / page
        text = path.read_text()
        found = _BLOCK.search(text)
        if found is None:
            raise SystemExit(f"{page} has no status markers: put {BEGIN!r} and {END!r} where the block goes")
        new = text[: found.start()] + render(page, status) + text[found.end() :]
        if new != text:
            path.write_text(new)
            changed.append(page)
    return changed


if __name__ == "__main__":
    print("\n".join(f"rewrote {page}" for page in write()) or "every page is up to date")
