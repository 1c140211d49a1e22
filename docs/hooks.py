"""MkDocs hooks: pages the site makes from the repository's own sources, and the glossary's links.

- The home page is the repository's README, and every experiment's README (``experiments/*/README.md``, and the
  folder's own) a page at the same path, their links rewritten for the site. The sources link as GitHub resolves
  paths in the repository (README to ``docs/<page>.md``, a page of ``docs/`` to ``../experiments/<name>/README.md``,
  an experiment to ``../../docs/...`` or to a sibling's folder); on the site ``docs/`` is the root and the
  experiments sit under it. A link to anything else of the repository (a file, a folder without a README) has no
  page on the site, so it becomes the path in code, which still tells the reader where to look.
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

ROOT = Path(__file__).resolve().parents[1]
_LINK = re.compile(r"(!?)\[([^\]]*)\]\((?!https?://|#|mailto:)([^)\s#]*)(#[^)\s]*)?\)")


def experiment_readmes(root: Path = ROOT) -> list[str]:
    """The experiments' READMEs, as paths in the repository: each a page of the site at the same path."""
    return sorted(str(p.relative_to(root)) for p in (root / "experiments").rglob("README.md"))


def site_path(path: str, root: Path = ROOT) -> str | None:
    """Where the repository's file (or folder) ``path`` is on the site, relative to its root: a page of ``docs/``
    or an experiment's README; None where the site has no page for it."""
    if path.startswith("docs/"):
        return path.removeprefix("docs/")
    if path.startswith("experiments/"):
        readme = path if path.endswith("README.md") else posixpath.join(path, "README.md")
        return readme if (root / readme).is_file() else None
    return None


def links_for_site(markdown: str, source: str, root: Path = ROOT) -> str:
    """``markdown`` of the repository's file ``source`` with each relative link resolved as GitHub resolves it, then
    pointed at the same file on the site; a link to what the site lacks becomes its path in code."""
    here = posixpath.dirname(source)
    page = "index.md" if source == "README.md" else source.removeprefix("docs/")  # README.md is the home page

    def rewrite(match: re.Match[str]) -> str:
        bang, text, target, fragment = match.groups()
        if not target:  # a link within the page
            return match.group(0)
        path = posixpath.normpath(posixpath.join(here, target))
        found = site_path(path, root)
        if found is not None:
            return f"{bang}[{text}]({posixpath.relpath(found, posixpath.dirname(page) or '.')}{fragment or ''})"
        return f"{text} (`{path}`)" if text != path and not text.startswith("`") else f"`{path}`"

    return _LINK.sub(rewrite, markdown)


def readme_for_site(readme: str) -> str:
    """The README with its links resolved for the site (it is the home page)."""
    return links_for_site(readme, "README.md")


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
    files.append(File.generated(config, "index.md", content=readme_for_site((ROOT / "README.md").read_text())))
    for readme in experiment_readmes():
        files.append(File.generated(config, readme, content=links_for_site((ROOT / readme).read_text(), readme)))
    files.append(File.generated(config, GLOSSARY_PAGE, content=glossary_page()))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    source = page.file.src_uri
    if source == GLOSSARY_PAGE or source.startswith("api/"):
        return markdown
    if page.file.generated_by is None:  # a page of docs/: its links into the experiments point at their pages
        markdown = links_for_site(markdown, f"docs/{source}")
    return link_terms(markdown, source)
