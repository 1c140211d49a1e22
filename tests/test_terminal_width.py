"""What ``plan`` and ``sweep`` print fits the terminal it is read in: the plan's table keeps its answer (config, peak,
fits) and leaves out the parts a narrow terminal cannot show, saying which, with each configuration's grid below it;
progress and verdict lines wrap between words. In a file or a pipe lines stay whole (a log keeps one line an event).
"""

from __future__ import annotations

import errno
import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SMALL_SWEEP

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.text import fit_line, output_width
from ignite_ddl.predict.memory import PARTS, Prediction
from ignite_ddl.sweep.forecast import Planned, format_plan
from ignite_ddl.sweep.plan import Refused

MIB = 2**20


def _plan() -> tuple[list[Planned], list[Refused]]:
    """Three configurations of a wide grid (one with a long note), and one refused."""
    planned = []
    for index, (strategy, procs) in enumerate([("ddp", 1), ("ddp", 2), ("fsdp", 2)]):
        grid = {"strategy": strategy, "nproc_per_node": procs, "accumulate": 4, "amp": "bf16", "batch_size": 2048}
        parts = {part: (index + 1) * 1234 * MIB for part in PARTS}
        unpredicted = ("the C allocator's heap kept beside FSDP's freed gathered units and gradients",) * (index == 2)
        planned.append(Planned(index, grid, TrainConfig(), Prediction(parts, unpredicted=unpredicted)))
    refused = Refused(3, {"strategy": "zero1", "nproc_per_node": 1}, "zero1 needs two or more processes", {})
    return planned, [refused]


def test_the_plan_fits_a_narrow_terminal_and_keeps_its_answer():
    planned, refused = _plan()
    peak = 1234 * len(PARTS)  # MiB, the first configuration's; the others twice and three times that
    limit = 2.5 * peak
    whole = format_plan(planned, limit, refused)
    assert max(map(len, whole.splitlines())) > 150  # the table as a file or a pipe gets it, one row a line
    for width in (100, 72, 40):
        text = format_plan(planned, limit, refused, width=width)
        lines = text.splitlines()
        assert max(map(len, lines)) <= width, f"{width} columns:\n{text}"
        top = next(i for i, line in enumerate(lines) if line.startswith("config"))
        header = lines[top].split()
        assert header[:3] == ["config", "peak", "fits"], header  # the answer first, whatever is left out
        peaks = {line.split()[0]: line.split()[1:3] for line in lines[top + 1 : top + 5]}
        expected = {f"cfg00{i}": [f"{(i + 1) * peak:.1f}", "yes" if i < 2 else "NO"] for i in range(3)}
        assert peaks == expected | {"cfg003": ["-", "refused"]}
        shown = [part for part in PARTS if part in header]
        left_out = [part for part in PARTS if part not in header]
        assert shown == list(PARTS[: len(shown)])  # the parts in their order, the last ones left out first
        # what is left out said, then each configuration's grid under the table, and every note, in whole words
        words = " ".join(line.strip() for line in lines[top + 5 :])
        said = f"not shown in {width} columns: {', '.join(left_out)} (plan/plan.json has every part)"
        assert (said in words) == bool(left_out), words
        assert "cfg002  strategy=fsdp nproc_per_node=2 accumulate=4 amp=bf16 batch_size=2048" in words
        assert "cfg003: refused: zero1 needs two or more processes" in words


def test_lines_wrap_between_words_only_on_a_terminal(monkeypatch):
    line = "[2/6] cfg002 nproc_per_node=2 batch_size=32 (repeat 1/2) ok: 1713 samples/s in 0.7 s; CONTENDED: " * 2
    wrapped = fit_line(line.strip(), 60).splitlines()
    assert max(map(len, wrapped)) <= 60 and " ".join(w.strip() for w in wrapped) == line.strip()
    assert fit_line(line, None) == line
    monkeypatch.setenv("COLUMNS", "72")
    assert output_width(io.StringIO()) is None  # a file or a pipe: whole lines, whatever COLUMNS says
    main, side = pty.openpty()
    with open(side, "w") as terminal:
        assert output_width(terminal) == 72
        monkeypatch.setenv("COLUMNS", "12")
        assert output_width(terminal) == 40
    os.close(main)


def _in_a_terminal(args: list[str], columns: int, cwd: Path, timeout: float) -> tuple[int, str]:
    """``python -m ignite_ddl ARGS`` with its standard output on a pseudo-terminal of ``columns`` columns: its exit
    status and what the terminal received."""
    main, side = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.Popen([sys.executable, "-m", "ignite_ddl", *args], stdout=side, cwd=cwd, env=env)
    os.close(side)
    received = b""
    try:
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError as e:  # the other side closed: everything was read
                if e.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            received += chunk
        return proc.wait(timeout=timeout), received.decode().replace("\r\n", "\n")
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_a_sweeps_output_fits_the_columns_it_is_given(tmp_path):
    """A real sweep of one process whose progress, report and verdict lines run long: all of them within COLUMNS."""
    grid = ["--grid", "batch_size=32", "--grid", "num_workers=0", "--grid", "optimizer=adam", "--grid", "seed=7"]
    args = ["sweep", *grid, *SMALL_SWEEP, "--repeats", "1", "--no-predict", "--on-busy", "run"]
    # a relative folder: a path is one word, which no width breaks
    code, shown = _in_a_terminal([*args, "--output-dir", "out"], 72, tmp_path, timeout=300)
    assert code == 0, shown
    lines = shown.splitlines()
    words = " ".join(line.strip() for line in lines)
    assert "(repeat 1/1) ok: " in words and "sweep done: 1 of 1 runs completed" in words, shown
    assert "ignite-ddl: report: out/report.md" in words
    assert any(line.startswith("    ") for line in lines)  # long lines were wrapped, not merely short
    assert max(map(len, lines)) <= 72, "\n".join(line for line in lines if len(line) > 72)
