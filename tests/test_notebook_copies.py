"""The executed copies of the notebooks in docs/notebooks/ are current: each has its notebook's code cells word for
word, every one of them executed, the self-check passed, and its plots inside. Nothing is executed here (that is
``python notebooks/render.py``, minutes on 2 cores); a notebook edited without rendering its copy again fails."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
COPIES = ROOT / "docs" / "notebooks"
RERENDER = "python notebooks/render.py"


def _render_module():
    spec = importlib.util.spec_from_file_location("notebooks_render", ROOT / "notebooks" / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _render_module()


def test_every_notebook_has_a_copy_and_no_copy_lacks_a_notebook():
    assert len(NOTEBOOKS) == 17
    assert sorted(p.name for p in COPIES.glob("*.ipynb")) == [p.name for p in NOTEBOOKS], f"run {RERENDER}"


@pytest.mark.parametrize("source", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_executed_copy_is_current(source: Path):
    reason = render.stale(source)
    assert reason is None, f"{reason}: run {RERENDER} {source.name[:2]}"
    cells = json.loads((COPIES / source.name).read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(c["execution_count"] is not None for c in code), "a code cell of the copy was not executed"
    texts = ["".join(o.get("text", "")) for c in code for o in c["outputs"] if o["output_type"] == "stream"]
    assert "self-check passed" in texts[-1] if texts else False, "the copy's self-check did not pass"
    assert not any(o["output_type"] == "error" for c in code for o in c["outputs"])
    assert all(
        o["name"] == "stdout"
        for c in code
        for o in c["outputs"]
        if o["output_type"] == "stream" and "rank0 INFO" in "".join(o["text"])
    ), "library logs reached stderr (red in Jupyter)"


def test_a_changed_code_cell_makes_the_copy_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    source = NOTEBOOKS[0]
    notebook = json.loads(source.read_text())
    code = next(c for c in notebook["cells"] if c["cell_type"] == "code" and "SIZE" in "".join(c["source"]))
    code["source"] = ["SIZE = 'full'\n"]
    edited = tmp_path / source.name
    edited.write_text(json.dumps(notebook))
    assert "has other code cells" in render.stale(edited)
    monkeypatch.setattr(render, "COPIES", tmp_path / "nowhere")
    assert "is missing" in render.stale(source).replace(str(tmp_path), "")


def test_the_copies_show_the_plots():
    with_plots = {"01_quick_example", "06_data_split", "11_ddp_equals_large_batch_sgd", "13_dp_vs_ddp"}
    for source in NOTEBOOKS:
        if source.stem not in with_plots:
            continue
        cells = json.loads((COPIES / source.name).read_text())["cells"]
        images = [
            o for c in cells if c["cell_type"] == "code" for o in c["outputs"] if "image/png" in o.get("data", {})
        ]
        assert images, f"{source.name}'s copy holds no image"


def test_the_copies_name_no_folder_of_the_machine_that_rendered_them():
    """The setup cell prints where ignite-ddl was installed from: a copy shows ``<checkout>``, not a local path."""
    assert render.published(f"ignite-ddl from {ROOT} (editable)") == "ignite-ddl from <checkout> (editable)"
    for source in NOTEBOOKS:
        text = (COPIES / source.name).read_text()
        assert "ignite-ddl from /" not in text and str(ROOT) not in text, source.name
