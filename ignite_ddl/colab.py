"""Notebook set-up in one call, the same in Colab, local Jupyter and CI: what this kernel can run on.

A notebook's first cell installs ignite-ddl where it is missing and then calls :func:`prepare_runtime`. On a Colab
TPU runtime without torch_xla that installs a torch / torch_xla pair of one release (torch_xla is built against its
own torch; the ``tpu`` extra brings libtpu) and points PJRT at the TPU; everywhere else it installs nothing. It
returns (and prints) what the kernel has, so that hardware-specific cells can say plainly what they need, and where
the ignite-ddl it runs was installed from.

Where to install from (:func:`ignite_ddl_source`): ``$IGNITE_DDL_SOURCE`` if set, else the GitHub repository and
branch Colab opened the notebook from (``colab.research.google.com/github/<owner>/<repo>/blob/<branch>/...``; the
kernel asks Colab's Jupyter server which notebook it runs, as ``/api/sessions`` lists it), else
:data:`DEFAULT_SOURCE`. The install cell runs before ignite-ddl exists, so it carries a copy of that function's
source (:data:`INSTALL_CELL` is built from it). Neither Colab's session listing nor :data:`DEFAULT_SOURCE` could be
checked from where this was written (no network): docs/labs.md (Notebooks) says so.

Importing this module does not import torch (``ignite_ddl`` loads its public names lazily): a TPU runtime must get
its torch before the kernel first imports one.

Example:
    >>> runtime = prepare_runtime(install=False, show=False)
    >>> runtime.cpu_cores >= 1 and runtime.gpus >= 0
    True
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ignite_ddl.launcher.tpu import tpu_attached, tpu_available

__all__ = [
    "COLAB_URL",
    "DEFAULT_SOURCE",
    "INSTALL_CELL",
    "TPU_PACKAGES",
    "Runtime",
    "contention_note",
    "ignite_ddl_source",
    "installed_from",
    "prepare_runtime",
]

# Where Colab opens the notebooks from (a fork replaces the owner and name).
COLAB_URL = "https://colab.research.google.com/github/ignite-ddl/ignite-ddl/blob/main/notebooks/"
# The project's repository as the notebooks' links name it: not verified to exist (docs/labs.md, Notebooks).
DEFAULT_SOURCE = "git+https://github.com/ignite-ddl/ignite-ddl.git"


def ignite_ddl_source(sessions_url: str | None = None) -> str:
    """Where pip installs ignite-ddl from: $IGNITE_DDL_SOURCE if set, else the GitHub repository and branch Colab
    opened this notebook from (Colab's Jupyter server lists it: fileId=https://github.com/<owner>/<repo>/blob/
    <branch>/...), else the project's repository. Not verified on Colab: docs/labs.md, Notebooks."""
    import json
    import os
    import re
    import urllib.parse
    import urllib.request

    if os.environ.get("IGNITE_DDL_SOURCE"):
        return os.environ["IGNITE_DDL_SOURCE"]
    if sessions_url is None and "COLAB_JUPYTER_IP" in os.environ:
        port = os.environ.get("KMP_TARGET_PORT", "9000")
        sessions_url = f"http://{os.environ['COLAB_JUPYTER_IP']}:{port}/api/sessions"
    opened = ""
    if sessions_url:
        try:
            with urllib.request.urlopen(sessions_url, timeout=5) as reply:
                opened = " ".join(urllib.parse.unquote(str(s.get("path", ""))) for s in json.load(reply))
        except (OSError, ValueError, AttributeError, TypeError):
            pass
    found = re.search(r"github(?:\.com)?/([\w.-]+)/([\w.-]+)/blob/([\w.-]+)/", opened)
    if found:
        return "git+https://github.com/{}/{}.git@{}".format(*found.groups())
    return "git+https://github.com/ignite-ddl/ignite-ddl.git"


# The first code cell of every notebook, word for word (a test holds them to it).
INSTALL_CELL = f"""\
# Setup (Colab, local Jupyter, CI alike): installs ignite-ddl where it is missing; a Colab TPU runtime also gets
# torch_xla. Where ignite-ddl is installed already it only says what this kernel can run on.
import importlib.util
import subprocess
import sys


{inspect.getsource(ignite_ddl_source).rstrip()}


IGNITE_DDL_SOURCE = ignite_ddl_source()  # or your fork / branch: "git+https://github.com/<owner>/<repo>.git@<branch>"
if importlib.util.find_spec("ignite_ddl") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", IGNITE_DDL_SOURCE], check=True)

runtime = importlib.import_module("ignite_ddl.colab").prepare_runtime(source=IGNITE_DDL_SOURCE)"""

# One release of each, known to work together on Colab's TPU runtime.
TPU_PACKAGES = ("torch==2.9.0", "torch_xla[tpu]==2.9.0", "torchvision==0.24.0")


def installed_from() -> str:
    """Where the ignite-ddl this kernel imports was installed from, as pip recorded it (``direct_url.json``): a
    git URL and revision, an (editable) local folder, or ``a package index``."""
    found = [d.read_text("direct_url.json") for d in importlib.metadata.distributions(name="ignite-ddl")]
    if not found:
        return "not installed (imported from its folder)"
    text = next((t for t in found if t), None)  # a checkout's own egg-info, found first from its folder, has none
    if text is None:
        return "a package index"
    record = json.loads(text)
    url, vcs, folder = record.get("url", "?"), record.get("vcs_info"), record.get("dir_info") or {}
    if vcs:
        return f"git+{url}@{vcs.get('requested_revision') or vcs.get('commit_id', '?')[:12]}"
    local = url.removeprefix("file://")
    return f"{local} (editable)" if folder.get("editable") else local


@dataclass(frozen=True)
class Runtime:
    """What the kernel can train on."""

    colab: bool
    cpu_cores: int
    gpus: int
    gpu_name: str | None
    tpu: bool  # torch_xla can drive a TPU here (tpu.tpu_available: what --backend auto runs on)
    torch: str
    ignite: str
    source: str = DEFAULT_SOURCE  # where this notebook says to install ignite-ddl from (ignite_ddl_source)
    installed: str = ""  # where the ignite-ddl imported here came from (installed_from)

    def describe(self) -> str:
        where = "Colab" if self.colab else "this machine"
        devices = [f"{self.cpu_cores} CPU cores"]
        if self.gpus:
            devices.append(f"{self.gpus} x {self.gpu_name}")
        if self.tpu:
            devices.append("a TPU (PJRT)")
        text = f"{where}: {', '.join(devices)}; torch {self.torch}, pytorch-ignite {self.ignite}"
        if self.installed:
            text += f"; ignite-ddl from {self.installed}"
        if (
            self.colab
            and self.installed.startswith("git+")
            and self.installed.split("@")[0] != self.source.split("@")[0]
        ):
            text += (
                f"\nnote: this notebook was opened from {self.source}, but ignite-ddl came from elsewhere; to use "
                f"the notebook's own: pip install --force-reinstall --no-deps {self.source}, then restart the runtime"
            )
        return text


def contention_note(summaries: Mapping[Any, Mapping[str, Any]], threshold: float | None = None) -> str:
    """One sentence on the timings of the runs in ``summaries`` (name -> a run's summary, as ``train`` returns it):
    which were measured while other processes used more than ``threshold`` of the CPUs (default: the contention
    threshold of sweeps and ``ignite-ddl train``'s warning, 10 %), whose samples/s and speed-ups are then not to be
    trusted; or that none was.

    Example:
        >>> runs = {"1 process": {"contention": {"foreign_cpu_share": 0.02}},
        ...         "2 processes": {"contention": {"foreign_cpu_share": 0.57}}}
        >>> print(contention_note(runs))  # doctest: +ELLIPSIS
        CONTENDED: 2 processes (others used 57% of the CPUs), above the 10% threshold: ...
    """
    from ignite_ddl.measure.contention import CONTENTION_THRESHOLD

    limit = CONTENTION_THRESHOLD if threshold is None else threshold
    shares = {name: (s.get("contention") or {}).get("foreign_cpu_share") for name, s in summaries.items()}
    contended = {name: v for name, v in shares.items() if isinstance(v, (int, float)) and v > limit}
    if contended:
        which = ", ".join(f"{name} (others used {v:.0%} of the CPUs)" for name, v in contended.items())
        return (
            f"CONTENDED: {which}, above the {limit:.0%} threshold: these runs' samples/s, and any speed-up computed "
            "from them, measure the other programs as much as DDP; do not trust them (run again on a quiet "
            "machine). Losses, accuracies and weights are not affected."
        )
    measured = [v for v in shares.values() if isinstance(v, (int, float))]
    top = f" (others used at most {max(measured):.0%} of the CPUs)" if measured else ""
    return (
        f"No run was contended{top}: the timings are this machine's own, and would differ on another machine or "
        "with other programs running."
    )


def _on_colab() -> bool:
    return "google.colab" in sys.modules


def prepare_runtime(install: bool = True, show: bool = True, source: str | None = None) -> Runtime:
    """Install what a Colab TPU runtime lacks (with ``install``), then describe the kernel's devices and where its
    ignite-ddl came from; ``source``: where the notebook says to install it from (default: :func:`ignite_ddl_source`,
    which on Colab derives it from the repository the notebook was opened from)."""
    if _on_colab() and tpu_attached():
        if importlib.util.find_spec("torch_xla") is None and install:
            if "torch" in sys.modules:
                raise RuntimeError("torch is already imported: restart the runtime and run this cell first")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", *TPU_PACKAGES], check=True)
            importlib.invalidate_caches()
        os.environ.setdefault("PJRT_DEVICE", "TPU")
    import ignite
    import torch

    from ignite_ddl.core.environment import cpu_cores

    gpus = torch.cuda.device_count()  # does not initialise CUDA: the kernel can still fork ranks afterwards
    runtime = Runtime(
        colab=_on_colab(),
        cpu_cores=cpu_cores(),
        gpus=gpus,
        gpu_name=_gpu_name() if gpus else None,
        tpu=tpu_available(),
        torch=torch.__version__,
        ignite=ignite.__version__,
        source=source or ignite_ddl_source(),
        installed=installed_from(),
    )
    if show:
        print(runtime.describe())
    return runtime


def _gpu_name() -> str | None:
    """The first GPU's name from nvidia-smi: asking torch would initialise CUDA in the kernel, after which no run
    started from it may fork its ranks."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = done.stdout.strip().splitlines()
    return names[0].strip() if done.returncode == 0 and names else None
