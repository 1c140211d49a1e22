"""The example notebooks run end to end in a real Jupyter kernel and leave the results they describe."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import matplotlib.image
import nbclient
import nbformat
import pytest
from conftest import load_summary

from ignite_ddl.colab import COLAB_URL, INSTALL_CELL
from ignite_ddl.report.diagram import ddp_step

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
QUICK_EXAMPLE = NOTEBOOKS / "01_quick_example.ipynb"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def python3_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A 'python3' kernelspec running this interpreter, found before any other (JUPYTER_PATH comes first).

    A kernelspec installed elsewhere (a user's ~/.local one, another environment's) could otherwise start a
    different Python, one without ignite_ddl or with another version of it.
    """
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (tests)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "python3"


def execute(path: Path, workdir: Path, kernel_name: str) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel started in ``workdir``; a cell that raises fails the test."""
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name=kernel_name, resources={"metadata": {"path": str(workdir)}}
    )
    client.execute()  # raises CellExecutionError, with the cell's traceback, if any cell fails
    return nb


def stream_text(nb: nbformat.NotebookNode) -> str:
    return "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)


NOTEBOOK_PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_notebooks_are_stored_clean():
    assert QUICK_EXAMPLE in NOTEBOOK_PATHS
    for path in NOTEBOOK_PATHS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3", path.name
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} is stored with outputs"


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=lambda p: p.stem)
def test_notebooks_share_one_layout(path: Path):
    """Title and Colab link; the one install cell, word for word; a parameters cell at CI size; a self-check last."""
    nb = nbformat.read(path, as_version=4)
    first, install, parameters = nb.cells[:3]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert f"[Open in Colab]({COLAB_URL}{path.name})" in first.source
    assert install.cell_type == "code" and install.source == INSTALL_CELL
    assert parameters.metadata.get("tags") == ["parameters"] and 'SIZE = "ci"' in parameters.source
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code[-1].metadata.get("tags") == ["self-check"] and "assert" in code[-1].source
    # A thin caller: training and measuring happen in ignite_ddl, never in a notebook cell.
    forbidden_calls = (
        "loss.backward(",
        "optimizer.step(",
        "Engine(",
        "init_process_group(",
        "DistributedDataParallel(",
    )
    for cell in code:
        for forbidden in forbidden_calls:
            assert forbidden not in cell.source, f"{path.name} re-implements what the library does: {forbidden}"
    # A notebook that shows timings says, in words, that they are the machine's.
    prose = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    if any(TIMINGS.search(cell.source) for cell in code[:-1]):
        assert re.search(r"\bmachine\b", prose), f"{path.name} shows timings without saying they depend on the machine"


# What a cell that shows timings reads: throughput, step and phase times, bandwidths.
TIMINGS = re.compile(r"samples_per_s|_s_mean|step_s|wall_time_s|algbw|busbw")


@contextlib.contextmanager
def beside_a_burner(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A busy machine, as a student's shared one: a process spinning on one core (at the lowest priority, so it
    costs the notebook little time while every contention probe sees it), and the notebook's own busy-machine
    settings in force, not the test suite's (IGNITE_DDL_ON_BUSY=run, IGNITE_DDL_BUSY_STOP_AFTER=0)."""
    monkeypatch.delenv("IGNITE_DDL_ON_BUSY", raising=False)
    monkeypatch.delenv("IGNITE_DDL_BUSY_STOP_AFTER", raising=False)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        os.setpriority(os.PRIO_PROCESS, burner.pid, 19)
        yield
        assert burner.poll() is None, "the burner stopped before the notebook ended"
    finally:
        burner.kill()
        burner.wait()


def runs_sweeps(path: Path) -> bool:
    """Whether a notebook runs a sweep: the part a busy machine can stop (MachineBusy)."""
    nb = nbformat.read(path, as_version=4)
    return any("sweep(" in cell.source for cell in nb.cells if cell.cell_type == "code")


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in NOTEBOOK_PATHS if p != QUICK_EXAMPLE], ids=lambda p: p.stem)
@pytest.mark.distributed
def test_notebook_runs_and_checks_its_claim(
    path: Path, tmp_path: Path, python3_kernel: str, monkeypatch: pytest.MonkeyPatch
):
    """Every notebook runs beside a CPU burner: on a busy machine, as a student's shared one, it must still run to
    the end; one that runs a sweep says the machine is busy and measures anyway."""
    with beside_a_burner(monkeypatch):
        nb = execute(path, tmp_path, python3_kernel)  # a failing assert in the self-check cell fails here
    assert "self-check passed" in stream_text(nb)
    # Everything it writes is under runs/, which git ignores: run from a clone, it leaves notebooks/ as it was.
    assert {p.name for p in tmp_path.iterdir()} - {"jupyter"} <= {"runs"}, sorted(p.name for p in tmp_path.iterdir())
    if runs_sweeps(path):
        assert "the machine is busy" in stream_text(nb)  # it said so, and measured anyway


@pytest.mark.slow
@pytest.mark.distributed
def test_quick_example(tmp_path: Path, python3_kernel: str, monkeypatch: pytest.MonkeyPatch):
    workdir = tmp_path / "work"
    workdir.mkdir()
    with beside_a_burner(monkeypatch):  # as every notebook: a busy machine must not stop it
        nb = execute(QUICK_EXAMPLE, workdir, python3_kernel)
    assert "self-check passed" in stream_text(nb)

    # The notebook's run: 2 gloo processes, one history record per configured epoch, and the model learned.
    out = workdir / "runs" / "01_quick_example"
    summary = load_summary(out, world_size=2)
    config = json.loads((out / "config.json").read_text())["config"]
    assert summary["backend"] == "gloo" and summary["launch_mode"] == "spawn"
    assert summary["model"] == "cnn" and summary["dataset"] == "synthetic"
    assert summary["batch"] == {"requested_global": 128, "per_rank": 64, "global": 128, "accumulate": 1, "micro": 64}
    history = summary["history"]
    assert [record["epoch"] for record in history] == list(range(1, config["epochs"] + 1))
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert summary["best_val_accuracy"] > 0.15  # 10 classes: chance is 0.1
    assert summary["contention"]["foreign_cpu_share"] > 0  # it measured beside the burner, and counted it
    assert sorted(p.name for p in (out / "logs").iterdir()) == [
        "memory_rank0.txt",
        "memory_rank1.txt",
        "rank0.log",
        "rank1.log",
    ]
    assert any((out / "tb").iterdir()) and any((out / "checkpoints").iterdir())

    # Every column of the per-rank table the run printed is explained in the notebook's prose.
    text = stream_text(nb)
    header = next(line for line in text.splitlines() if line.startswith("rank  iters"))
    columns = re.split(r"\s{2,}", header.strip())
    prose = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    explained = set(re.findall(r"`([^`]+)`", prose))
    assert len(columns) >= 10 and not [c for c in columns if c not in explained], columns
    # Library logs reach the notebook on stdout (stderr shows red in Jupyter, as if they were errors).
    streams = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "stream"]
    assert any("rank0 INFO" in o.text for o in streams)
    assert not [o.text for o in streams if o.name == "stderr" and "rank0 INFO" in o.text]
    # The picture of DDP, drawn from this run's step: several buckets, saved and shown.
    step = ddp_step(out)
    assert all(r["buckets"] >= 2 for r in step["ranks"]) and (out / "ddp_step.png").read_bytes()[:8] == PNG_SIGNATURE
    assert all(len(r["bucket_spans"]) == r["buckets"] for r in step["ranks"])  # each bucket's all-reduce, recorded
    assert f"iteration {step['iteration']}:" in text

    # The plot the notebook saved, and showed.
    png = out / "curves.png"
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == PNG_SIGNATURE
    height, width = matplotlib.image.imread(png).shape[:2]
    assert height > 100 and width > 100
    assert any("image/png" in o.get("data", {}) for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)

    # The custom handler ran on rank 0 only, once per epoch of its run, and its prints reached the notebook.
    handler_summary = load_summary(workdir / "runs" / "01_quick_example_handler", world_size=2)
    lines = [line for line in stream_text(nb).splitlines() if line.startswith("[my handler]")]
    assert [line.split(":")[0] for line in lines] == [
        f"[my handler] epoch {epoch}" for epoch in range(1, handler_summary["epochs"] + 1)
    ]
    for line, record in zip(lines, handler_summary["history"]):
        assert f"val accuracy {record['val_accuracy']:.3f}" in line
