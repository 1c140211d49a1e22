"""What a notebook's first cell and its library calls do for a reader: where ignite-ddl is installed from (the
repository Colab opened the notebook from, asked of a real HTTP server shaped like Colab's Jupyter server), where
the installed one came from, the sentence on contended timings, and library logs on stdout in a notebook."""

from __future__ import annotations

import json
import logging
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest

from ignite_ddl import colab
from ignite_ddl.colab import DEFAULT_SOURCE, INSTALL_CELL, contention_note, ignite_ddl_source, installed_from


@pytest.fixture
def sessions_server():
    """A Jupyter server's ``/api/sessions`` on 127.0.0.1 answering what ``served["body"]`` holds; yields its URL."""
    served: dict = {"body": b"[]"}

    class Sessions(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = served["body"]
            self.send_response(200 if self.path == "/api/sessions" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sessions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}/api/sessions"
    finally:
        server.shutdown()
        server.server_close()


def _session(path: str) -> bytes:
    return json.dumps([{"id": "1", "path": path, "name": "01_quick_example.ipynb", "type": "notebook"}]).encode()


def _cell_function():
    """The install cell's own copy of ignite_ddl_source, defined as a notebook would (the cell runs before the
    package exists)."""
    source = INSTALL_CELL[INSTALL_CELL.index("def ignite_ddl_source") : INSTALL_CELL.index("\n\n\nIGNITE_DDL_SOURCE")]
    namespace: dict = {}
    exec(compile(source, "<install cell>", "exec"), namespace)
    return namespace["ignite_ddl_source"]


@pytest.mark.parametrize("find", [ignite_ddl_source, _cell_function()], ids=["library", "install-cell"])
@pytest.mark.parametrize(
    "opened, expected",
    [
        # Colab opened from GitHub: its Jupyter server lists the notebook as a URL-encoded fileId
        (
            "fileId=" + quote("https://github.com/someone/ignite-ddl-fork/blob/dev/notebooks/01_quick_example.ipynb"),
            "git+https://github.com/someone/ignite-ddl-fork.git@dev",
        ),
        (
            "fileId=https://colab.research.google.com/github/a-b/c.d/blob/main/x.ipynb",
            "git+https://github.com/a-b/c.d.git@main",
        ),
        ("fileId=1AbCdEfGhIjK", DEFAULT_SOURCE),  # opened from Google Drive: no repository to derive
    ],
)
def test_the_source_is_the_repository_colab_opened(sessions_server, monkeypatch, find, opened, expected):
    monkeypatch.delenv("IGNITE_DDL_SOURCE", raising=False)
    served, url = sessions_server
    served["body"] = _session(opened)
    assert find(url) == expected
    monkeypatch.setenv("IGNITE_DDL_SOURCE", "git+https://example.org/mine.git@branch")  # the reader's choice wins
    assert find(url) == "git+https://example.org/mine.git@branch"


@pytest.mark.parametrize("find", [ignite_ddl_source, _cell_function()], ids=["library", "install-cell"])
def test_without_colab_or_an_answer_the_source_is_the_default(sessions_server, monkeypatch, find):
    monkeypatch.delenv("IGNITE_DDL_SOURCE", raising=False)
    monkeypatch.delenv("COLAB_JUPYTER_IP", raising=False)
    assert find() == DEFAULT_SOURCE  # not on Colab: nothing is asked
    served, url = sessions_server
    served["body"] = b"not json"
    assert find(url) == DEFAULT_SOURCE
    assert find(url.replace("/api/sessions", "/nothing-here")) == DEFAULT_SOURCE  # 404
    monkeypatch.setenv("COLAB_JUPYTER_IP", "127.0.0.1")  # Colab's variables, pointing at the server here
    monkeypatch.setenv("KMP_TARGET_PORT", url.split(":")[-1].split("/")[0])
    served["body"] = _session("fileId=https://github.com/o/r/blob/b/n.ipynb")
    assert find() == "git+https://github.com/o/r.git@b"


def test_the_install_cell_installs_from_what_it_derives():
    assert "IGNITE_DDL_SOURCE = ignite_ddl_source()" in INSTALL_CELL
    assert '"pip", "install", "-q", IGNITE_DDL_SOURCE]' in INSTALL_CELL
    assert "prepare_runtime(source=IGNITE_DDL_SOURCE)" in INSTALL_CELL
    runtime = colab.prepare_runtime(install=False, show=False, source="git+https://github.com/o/r.git@b")
    assert runtime.source == "git+https://github.com/o/r.git@b" and runtime.installed == installed_from()
    assert f"ignite-ddl from {runtime.installed}" in runtime.describe()


def test_a_colab_runtime_installed_from_elsewhere_says_so():
    runtime = colab.Runtime(
        colab=True,
        cpu_cores=2,
        gpus=0,
        gpu_name=None,
        tpu=False,
        torch="2",
        ignite="0.5",
        source="git+https://github.com/me/fork.git@dev",
        installed="git+https://github.com/ignite-ddl/ignite-ddl.git@main",
    )
    assert "pip install --force-reinstall --no-deps git+https://github.com/me/fork.git@dev" in runtime.describe()
    same = colab.Runtime(**{**runtime.__dict__, "installed": "git+https://github.com/me/fork.git@1a2b3c4d5e6f"})
    assert "note:" not in same.describe()


def test_contention_note_names_the_contended_runs():
    runs = {
        "1 process": {"contention": {"foreign_cpu_share": 0.03}},
        "2 processes": {"contention": {"foreign_cpu_share": 0.42}},
        "4 processes": {"contention": {"foreign_cpu_share": None}},
    }
    note = contention_note(runs)
    assert note.startswith("CONTENDED: 2 processes (others used 42% of the CPUs), above the 10% threshold")
    assert "1 process" not in note and "do not trust them" in note
    quiet = contention_note({"1 process": runs["1 process"]})
    assert quiet.startswith("No run was contended (others used at most 3% of the CPUs)")
    assert contention_note(runs, threshold=0.5).startswith("No run was contended")


@pytest.mark.parametrize("in_notebook", [True, False])
def test_library_logs_go_to_stdout_in_a_notebook(tmp_path, monkeypatch, in_notebook):
    from ignite_ddl.trainer.run import rank_logger

    if in_notebook:
        monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    else:
        monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    logger = rank_logger(tmp_path, 0)
    try:
        (console,) = [h for h in logger.handlers if type(h) is logging.StreamHandler]
        assert console.stream is (sys.stdout if in_notebook else sys.stderr)
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
