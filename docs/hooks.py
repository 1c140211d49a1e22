"""MkDocs hooks: pages the site makes from the repository's own sources, and the glossary's links.

- The home page is the repository's README, its links rewritten for the site. README links to the topic pages as
  ``docs/<page>.md`` (what GitHub resolves from the repository's root); on the site those pages sit at the root. A
  link to anything outside ``docs/`` (a folder of the repository) has no page on the site, so it becomes the path in
  code, which still tells the reader where to look.
- The glossary page is the reports' glossary (:data:`ignite_ddl.report.glossary.GLOSSARY`), one entry per term,
  and every page links each term it uses where it first uses it in prose, as a report does.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from ignite_ddl.report.glossary import GLOSSARY, anchor, link_first

GLOSSARY_PAGE = "glossary.md"

_LINK = re.compile(r"(!?)\[([^\]]*)\]\((?!https?://|#)([^)\s]+)\)")


def _site_link(match: re.Match[str]) -> str:
    bang, text, target = match.groups()
    if target.startswith("docs/"):
        return f"{bang}[{text}]({target.removeprefix('docs/')})"
    return f"{text} (`{target}`)" if text != target and not text.startswith("`") else text


def readme_for_site(readme: str) -> str:
    """The README with its links resolved from ``docs/``."""
    return _LINK.sub(_site_link, readme)


def glossary_page() -> str:
    """The site's glossary: every term of the reports' glossary with its meaning, alphabetically, each with the
    anchor a page's link reaches."""
    lines = [
        "# Glossary",
        "",
        "The terms of art of these pages and of every sweep's report, defined once: a report ends with the entries",
        "of the terms it uses, from the same table (`ignite_ddl/report/glossary.py`). Each page links a term where",
        "it first uses it.",
        "",
    ]
    for term in sorted(GLOSSARY, key=str.lower):
        lines.append(f'- <a id="{anchor(term)}"></a>**{term}**: {GLOSSARY[term][1]}')
    return "\n".join(lines) + "\n"


# Lines that are not prose: headings, HTML (comments included), a table's rule, an image.
_NOT_PROSE = ("#", "<", "|---", "![")


def link_terms(markdown: str, page: str) -> str:
    """``markdown`` of the page at ``page`` (its path in the site's sources) with each glossary term linked to its
    entry where the page first uses it in prose: not in a code block, a heading or HTML, nor inside code, bold or a
    link."""
    lines, prose, fence = markdown.split("\n"), [], ""
    for number, line in enumerate(lines):
        stripped = line.lstrip()
        if fence:
            fence = "" if stripped.startswith(fence) else fence
        elif stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif stripped and not stripped.startswith(_NOT_PROSE):
            prose.append(number)
    glossary = posixpath.relpath(GLOSSARY_PAGE, posixpath.dirname(page) or ".")
    for term, (pattern, _) in GLOSSARY.items():
        compiled = re.compile(pattern)
        for number in prose:
            linked = link_first(lines[number], compiled, f"{glossary}#{anchor(term)}")
            if linked is not None:
                lines[number] = linked
                break
    return "\n".join(lines)


def on_files(files: Files, config: Any, **_: Any) -> Files:
    readme = Path(config["config_file_path"]).parent / "README.md"
    files.append(File.generated(config, "index.md", content=readme_for_site(readme.read_text())))
    files.append(File.generated(config, GLOSSARY_PAGE, content=glossary_page()))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    source = page.file.src_uri
    if source == GLOSSARY_PAGE or source.startswith("api/"):
        return markdown
    return link_terms(markdown, source)
