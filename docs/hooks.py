"""MkDocs hook: the site's home page is the repository's README, its links rewritten for the site.

README links to the topic pages as ``docs/<page>.md`` (what GitHub resolves from the repository's root); on the
site those pages sit at the root. A link to anything outside ``docs/`` (a folder of the repository) has no page on
the site, so it becomes the path in code, which still tells the reader where to look.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

_LINK = re.compile(r"(!?)\[([^\]]*)\]\((?!https?://|#)([^)\s]+)\)")


def _site_link(match: re.Match[str]) -> str:
    bang, text, target = match.groups()
    if target.startswith("docs/"):
        return f"{bang}[{text}]({target.removeprefix('docs/')})"
    return f"{text} (`{target}`)" if text != target and not text.startswith("`") else text


def readme_for_site(readme: str) -> str:
    """The README with its links resolved from ``docs/``."""
    return _LINK.sub(_site_link, readme)


def on_files(files: Files, config: Any, **_: Any) -> Files:
    readme = Path(config["config_file_path"]).parent / "README.md"
    files.append(File.generated(config, "index.md", content=readme_for_site(readme.read_text())))
    return files
