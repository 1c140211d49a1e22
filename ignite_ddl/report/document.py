"""A document as a list of blocks (headings, paragraphs, lists, tables, images, code), written as Markdown and as
HTML: the engine the report is written with, knowing nothing of what a report says.

Example:
    >>> doc = Document()
    >>> doc.table(["config", "samples/s"], [["cfg0", 1234.5]])
    >>> print(doc.markdown(), end="")
    | config | samples/s |
    |---|---|
    | cfg0 | 1234 |
"""

from __future__ import annotations

import html
import re
from typing import Any

__all__ = ["Document", "Table"]


class Document:
    """A report as a list of blocks, written as Markdown and as HTML."""

    def __init__(self) -> None:
        self.blocks: list[tuple[str, Any]] = []

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(("heading", (level, text)))

    def paragraph(self, text: str) -> None:
        self.blocks.append(("paragraph", text))

    def bullets(self, items: list[str]) -> None:
        if items:
            self.blocks.append(("bullets", items))

    def table(self, header: list[str], rows: list[list[Any]]) -> None:
        self.blocks.append(("table", (header, [[_cell(v) for v in row] for row in rows])))

    def image(self, path: str, alt: str) -> None:
        self.blocks.append(("image", (path, alt)))

    def code(self, text: str) -> None:
        self.blocks.append(("code", text))

    def definitions(self, items: list[tuple[str, str, str]]) -> None:
        """Terms defined, each ``(anchor, term, definition)``: the anchor is what a link ``[word](#anchor)`` in
        any paragraph or list item of the document goes to (the document's own names: no text from a sweep)."""
        if items:
            self.blocks.append(("definitions", items))

    def markdown(self) -> str:
        out = []
        for kind, value in self.blocks:
            if kind == "heading":
                out.append("#" * value[0] + " " + _md_inline(value[1]))
            elif kind == "paragraph":
                out.append(_md_inline(value))
            elif kind == "bullets":
                out.append("\n".join(f"- {_md_inline(item)}" for item in value))
            elif kind == "table":
                header, rows = value
                lines = ["| " + " | ".join(map(_md_cell, header)) + " |", "|" + "---|" * len(header)]
                lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
                out.append("\n".join(lines))
            elif kind == "image":
                out.append(f"![{value[1]}]({value[0]})")
            elif kind == "definitions":
                out.append("\n".join(f'- <a id="{a}"></a>**{_md_inline(t)}**: {_md_inline(d)}' for a, t, d in value))
            else:
                out.append("```\n" + value + "\n```")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        def e(text: str) -> str:  # escaped, with the Markdown emphasis and code spans the report uses
            text = html.escape(text)
            text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
            text = _LINK.sub(r"<a href='#\2'>\1</a>", text)
            return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)

        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>", _STYLE]
        for kind, value in self.blocks:
            if kind == "heading":
                out.append(f"<h{value[0]}>{e(value[1])}</h{value[0]}>")
            elif kind == "paragraph":
                out.append(f"<p>{e(value)}</p>")
            elif kind == "bullets":
                out.append("<ul>" + "".join(f"<li>{e(item)}</li>" for item in value) + "</ul>")
            elif kind == "table":
                header, rows = value
                # A table scrolls inside its own box, never the page; a header may break after _ or /.
                cells = "".join(f"<th>{_breakable(e(h))}</th>" for h in header)
                out.append(f"<div class='table'><table><thead><tr>{cells}</tr></thead><tbody>")
                out += [
                    "<tr>" + "".join(f"<td{_cell_class(c)}>{_ranges(e(c))}</td>" for c in row) + "</tr>" for row in rows
                ]
                out.append("</tbody></table></div>")
            elif kind == "image":
                out.append(f"<p><img src='{html.escape(value[0])}' alt='{html.escape(value[1])}'></p>")
            elif kind == "definitions":
                out.append(
                    "<dl>"
                    + "".join(
                        f"<dt id='{html.escape(a)}'><strong>{e(t)}</strong></dt><dd>{e(d)}</dd>" for a, t, d in value
                    )
                    + "</dl>"
                )
            else:
                out.append(f"<pre>{html.escape(value)}</pre>")
        return "\n".join(out) + "</body></html>\n"


# The page: text at most 1100 px wide, centred. Tables are compact (a decision table of a dozen columns fits a
# 1366 px laptop screen, tests/test_report_browser.py) and each sits in a box that scrolls sideways on its own
# when it is wider than the page: a wide detail table never pushes the page, or the decision table, off-screen.
_STYLE = (
    "<style>body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 12px;line-height:1.35}"
    "div.table{max-width:100%;overflow-x:auto;margin:0.6em 0}"
    "table{border-collapse:collapse;font-size:14px}"
    "td,th{border:1px solid #ccc;padding:3px 5px;text-align:right}"
    "th{background:#f3f3f3;vertical-align:bottom}"
    "td:first-child,th:first-child{text-align:left}.n{white-space:nowrap}"
    "td.t{text-align:left;font-size:13px}td.t.long{min-width:14em}"
    "img{max-width:100%}pre{overflow-x:auto}</style></head><body>"
)


# A link to a term of the document's glossary, ``[word](#glossary-term)``: the only links it makes.
_LINK = re.compile(r"\[([^\]\[]+)\]\(#(glossary-[a-z0-9-]+)\)")
_RANGE = re.compile(r"\(?-?\d[\d.]* to -?\d[\d.]*\)?")


def _ranges(cell: str) -> str:
    """An escaped cell with each interval (``1.66 to 1.74``) kept on one line."""
    return _RANGE.sub(lambda m: f"<span class='n'>{m.group(0)}</span>", cell)


def _cell_class(text: str) -> str:
    """A figure (no space, or a range ``2817 to 2873``) stays on one line; a text is set left and smaller, and a
    long one (a workload's options) gets room for a few words a line."""
    if " " not in text or _RANGE.fullmatch(text):
        return " class='n'"
    return " class='t long'" if len(text) > 50 else " class='t'" if len(text) > 30 else ""


def _breakable(header: str) -> str:
    """An escaped column header with a break opportunity after each ``_`` and ``/`` (``nproc_per_node``)."""
    return re.sub(r"([_/])", r"\1<wbr>", header)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value).replace("|", "/")


# What turns text from a sweep (a grid value, a name, an error message) into Markdown structure: a line break (a new
# heading, list item or table row), the start of an HTML element or comment (<script>, </p>, <!--), a character
# reference (&lt;). The report's own markup (**bold**, `code`) is left alone.
_MD_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_MD_ENTITY = re.compile(r"&(?=#?\w+;)")


def _md_inline(text: str) -> str:
    """``text`` as one line of Markdown that shows what it says: line breaks become spaces, and what would start an
    HTML element or a character reference is backslash-escaped (``\\<script>`` shows ``<script>`` as text)."""
    text = " ".join(text.splitlines())
    return _MD_ENTITY.sub(r"\\&", _MD_TAG.sub(r"\\<", text))


def _md_cell(text: str) -> str:
    """A Markdown table cell: :func:`_md_inline`, and a ``|`` escaped so that it cannot end the cell."""
    return _md_inline(text).replace("|", "\\|")


Table = tuple[list[str], list[list[Any]]]
