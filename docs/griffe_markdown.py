"""Griffe extension for the API reference: the package's docstrings, written for ``help()`` and doctest, as Markdown.

- Doctest blocks become fenced Python console code. The docstrings hold runnable examples (``>>> ...`` lines and
  their output), often in free text rather than under an ``Examples:`` heading; Markdown would render those lines as
  prose and read ``x["key"][0]`` as a link reference.
- Sphinx roles (``:mod:`.options```, ``:func:`train```) become code: their targets are often relative, which
  neither Markdown nor the site's cross-references resolve.

The docstrings themselves stay plain text that ``help()`` and ``python -m doctest`` read.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_PROMPT = re.compile(r"^(\s*)>>> ")
_ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|obj|exc|const):`~?([^`]+)`")


def strip_roles(text: str) -> str:
    """``:mod:`.options``` -> ``.options`` in code."""
    return _ROLE.sub(lambda m: f"`{m.group(1)}`", text)


def fence_doctests(text: str) -> str:
    """Wrap each run of lines starting at a ``>>>`` prompt and ending before a blank or dedented line in a fence."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        start = _PROMPT.match(lines[i])
        if not start:
            out.append(lines[i])
            i += 1
            continue
        indent = start.group(1)
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class DocstringsAsMarkdown(griffe.Extension):
    """Rewrites every object's docstring before it is parsed."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(strip_roles(obj.docstring.value))
