"""The documentation site's sources: every package has its API reference page, every navigation entry a page,
README becomes the home page with its links resolved, the glossary page is the reports' glossary and pages link a
term where they first use it, and the docstrings' doctests and Sphinx roles render as code. (CI builds the site
itself with ``mkdocs build --strict``; ``tests/test_docs_browser.py`` builds it and reads it in Chromium.)"""

from __future__ import annotations

import importlib.util
import pkgutil
import posixpath
import re
from pathlib import Path

import yaml

import ignite_ddl
from ignite_ddl.report.glossary import GLOSSARY, anchor

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def test_every_package_has_an_api_page():
    """A package added (or split off) later gets no reference unless a page names it: the pages name packages, and
    mkdocstrings renders every module under each one."""
    documented = "\n".join(p.read_text() for p in (DOCS / "api").glob("*.md"))
    packages = [m.name for m in pkgutil.iter_modules(ignite_ddl.__path__) if m.ispkg]
    modules = [m.name for m in pkgutil.iter_modules(ignite_ddl.__path__) if not m.ispkg and m.name != "__main__"]
    missing = [name for name in packages + modules if f"::: ignite_ddl.{name}\n" not in documented]
    assert packages and not missing, f"no API reference page for: {missing}"


def test_every_navigation_entry_is_a_page():
    """Pages outside the navigation still build (reached by their links); an entry without its page, or a page listed
    twice, fails."""
    generated = {"index.md", "glossary.md", *_load("hooks").experiment_readmes()}
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")} | generated
    nav = _nav_pages(_config()["nav"])
    missing, twice = set(nav) - pages, {page for page in nav if nav.count(page) > 1}
    assert {"index.md", "results.md", "api/core.md"} <= pages and not missing, f"nav entries without a page: {missing}"
    assert not twice, f"pages listed twice in the navigation: {twice}"


def test_readme_links_resolve_on_the_site():
    hooks = _load("hooks")
    text = hooks.readme_for_site(
        "[Sweeps](docs/sweeps.md#the-report) ![shot](docs/img/a.png) [experiments/](experiments/README.md) "
        "[its spec](experiments/quickstart/spec.yaml) [web](https://x.y/z)"
    )
    assert text == (
        "[Sweeps](sweeps.md#the-report) ![shot](img/a.png) [experiments/](experiments/README.md) "
        "its spec (`experiments/quickstart/spec.yaml`) [web](https://x.y/z)"
    )
    site = hooks.readme_for_site((ROOT / "README.md").read_text())
    for target in re.findall(r"\]\((?!https?://)([^)#\s]+)\)", site):
        assert (DOCS / target).is_file() or (ROOT / target).is_file(), f"README links to {target}: no page of the site"


def test_the_experiments_readmes_are_pages_whose_links_resolve():
    """Pages that defer to an experiment's README reach it on the site; its own links (a sibling's folder, the
    docs' images and pages) reach their pages too."""
    hooks = _load("hooks")
    readmes = hooks.experiment_readmes()
    assert "experiments/README.md" in readmes and "experiments/transformer/README.md" in readmes
    assert hooks.links_for_site("[search](../faster_step/)", "experiments/search/README.md") == (
        "[search](../faster_step/README.md)"
    )
    assert hooks.links_for_site("[plan](../../docs/plan.md#fsdp-on-cpu)", "experiments/x/README.md") == (
        "[plan](../../plan.md#fsdp-on-cpu)"
    )
    assert hooks.links_for_site("[s](../experiments/search/README.md)", "docs/search.md") == (
        "[s](experiments/search/README.md)"
    )
    for readme in readmes:
        page = hooks.links_for_site((ROOT / readme).read_text(), readme)
        here = Path(readme).parent
        for target in re.findall(r"\]\((?!https?://)([^)#\s]+)\)", page):
            site = posixpath.normpath((here / target).as_posix())
            assert (DOCS / site).is_file() or (ROOT / site).is_file(), f"{readme} links to {target}: no page"


def test_the_api_index_names_the_entry_points():
    index = (DOCS / "api" / "index.md").read_text()
    for name in ("train", "TrainConfig", "launch", "LaunchSettings", "load", "write_report", "sweep", "Workload"):
        assert f"[`{name}`][ignite_ddl." in index, name


def test_docstrings_render_as_markdown():
    markdown = _load("griffe_markdown")
    text = (
        "See :func:`~ignite_ddl.train` and :mod:`.options`.\n\nExample:\n    >>> x = {'a': [1]}\n    >>> x['a'][0]\n"
        "    1\n\nDone."
    )
    assert markdown.fence_doctests(markdown.strip_roles(text)) == (
        "See `ignite_ddl.train` and `.options`.\n\nExample:\n    ```pycon\n    >>> x = {'a': [1]}\n"
        "    >>> x['a'][0]\n    1\n    ```\n\nDone."
    )


def test_the_glossary_page_is_the_reports_glossary():
    """One source: every term the reports define, with its meaning and the anchor pages link to; among them the
    words a reader of these pages meets before their meaning."""
    page = _load("hooks").glossary_page()
    for term, (_, meaning) in GLOSSARY.items():
        assert f'- <a id="{anchor(term)}"></a>**{term}**: {meaning}\n' in page
    jargon = {"separated", "statistically tied", "equivalent", "contended", "learns worse", "settled", "MFU", "TPE"}
    assert jargon | {"regret", "held", "own time", "HTA", "twin", "quiet"} <= set(GLOSSARY)


def test_a_page_links_each_term_where_its_prose_first_uses_it():
    page = "\n".join(
        [
            "# Runs that learn worse",  # a heading: never linked
            "```bash",
            "ignite-ddl sweep spec.yaml  # learns worse, contended",  # code: never
            "```",
            "<!-- learns worse -->",
            "A run `contended` in code, **learns worse** in bold, [contended](x.md) in a link.",
            "Then a contended run, which learns worse; contended again.",
            "| cfg001 | learns worse | contended |",
        ]
    )
    linked = _load("hooks").link_terms(page, "gpu/README.md").split("\n")
    assert linked[:6] == page.split("\n")[:6]
    assert linked[6] == (
        "Then a [contended](../glossary.md#glossary-contended) run, which "
        "[learns worse](../glossary.md#glossary-learns-worse); contended again."
    )
    assert linked[7] == page.split("\n")[7]  # each term once a page
    assert "](glossary.md#glossary-held)" in _load("hooks").link_terms("Bytes held per rank.", "plan.md")


def test_the_plan_page_opens_with_its_limits():
    """A reader asking "will it fit?" meets what the plan predicts, and what it does not, before anything else."""
    page = (DOCS / "plan.md").read_text()
    first = page.split("\n## ")[1]
    assert first.startswith("What it predicts, and how well\n")
    table = [line for line in first.splitlines() if line.startswith("| ")][1:]  # below the header
    rows = ["the built-in models", "the built-in GPT", "a workload of your own", "FSDP on CPU", "a CUDA rank"]
    assert len(table) == len(rows) and all(line.startswith(f"| {row}") for row, line in zip(rows, table)), table
    # each says, for memory and step time, whether its goal is met, or that it is not predicted or never ran
    said = ("goal met", "goal not met", "not predicted", "never run", "not yet measured")
    assert all(sum(word in cell.lower() for word in said) for line in table for cell in line.split(" | ")[1:])
