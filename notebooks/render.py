"""Execute the notebooks and publish the executed copies, outputs included, in docs/notebooks/.

    python notebooks/render.py                  # every notebook, at CI size (SIZE = "ci"), one after the other
    python notebooks/render.py 01 06            # only those whose name starts with 01 or 06
    python notebooks/render.py --check          # no execution: say which copies are missing or stale (exit 1)

Each notebook runs in a fresh Jupyter kernel of this interpreter (a kernelspec written to a temporary JUPYTER_PATH,
so no other environment's kernel is picked up), in a temporary working folder (the runs it makes are thrown away),
and its copy is written only when every cell ran. A copy is current when its code cells are the source's, word for
word: tests/test_notebook_copies.py checks that on every test run, without executing anything. The figures in the
copies are those of the machine that rendered them (2 CPU cores for the published ones): the notebooks say where a
figure depends on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks"
COPIES = ROOT / "docs" / "notebooks"


def code_cells(path: Path) -> list[str]:
    """The source of every code cell, in order: what a copy must share with its notebook."""
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def stale(source: Path) -> str | None:
    """Why ``source``'s executed copy is not current, or None when it is."""
    copy = COPIES / source.name
    if not copy.is_file():
        return f"{_shown(copy)} is missing"
    if code_cells(copy) != code_cells(source):
        return f"{_shown(copy)} has other code cells than {_shown(source)}"
    return None


CHECKOUT = "<checkout>"  # what a copy shows for this checkout's path: the folder is the renderer's, not the reader's


def published(text: str, workdir: str | None = None) -> str:
    """A copy's text as published: this checkout's absolute path (in the setup cell's "ignite-ddl from ...", in
    tracebacks) replaced by ``<checkout>``, and the temporary working folder's by the relative paths it holds."""
    if workdir:
        text = text.replace(workdir.rstrip("/") + "/", "")
    return text.replace(str(ROOT), CHECKOUT)


def render(source: Path, timeout: int) -> float:
    """Execute ``source`` in a fresh kernel and write its executed copy; the seconds it took."""
    import nbclient
    import nbformat

    nb = nbformat.read(source, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"render-{source.stem}-") as workdir:
        client = nbclient.NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": workdir}},
            record_timing=False,
        )
        client.execute()
    COPIES.mkdir(parents=True, exist_ok=True)
    copy = COPIES / source.name
    tmp = copy.with_suffix(".tmp")
    tmp.write_text(published(nbformat.writes(nb), workdir) + "\n")
    tmp.replace(copy)
    return time.perf_counter() - start


def _kernelspec(folder: Path) -> Path:
    """A 'python3' kernelspec that runs this interpreter, in ``folder``/kernels (put first on JUPYTER_PATH)."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"}))
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="notebooks whose name starts with one of these (default: all)")
    parser.add_argument("--check", action="store_true", help="execute nothing: list the missing or stale copies")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one cell may take (default: 600)")
    args = parser.parse_args(argv)
    sources = [p for p in sorted(SOURCES.glob("*.ipynb")) if not args.only or p.name.startswith(tuple(args.only))]
    if not sources:
        parser.error(f"no notebook in {SOURCES} starts with {' or '.join(args.only)}")
    if args.check:
        problems = [reason for p in sources if (reason := stale(p))]
        print("\n".join(problems) or f"all {len(sources)} executed copies are current")
        return 1 if problems else 0
    # As in the tests: a sweep on a busy machine runs anyway (its runs are flagged contended) rather than waiting.
    os.environ.setdefault("IGNITE_DDL_ON_BUSY", "run")
    os.environ.setdefault("IGNITE_DDL_BUSY_STOP_AFTER", "0")
    with tempfile.TemporaryDirectory(prefix="render-jupyter-") as jupyter:
        os.environ["JUPYTER_PATH"] = str(_kernelspec(Path(jupyter))) + os.pathsep + os.environ.get("JUPYTER_PATH", "")
        for source in sources:
            print(f"{source.name}: executing ...", flush=True)
            seconds = render(source, args.timeout)
            print(f"{source.name}: {seconds:.0f} s -> {_shown(COPIES / source.name)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
