"""Imported first by every benchmark script that imports torch: the script, run as ``python benchmarks/NAME.py``,
then runs in a scratch folder (:func:`ignite_ddl.launcher.scratch.scratch_folder`) removed when it exits.

Importing ``torch._dynamo`` (torch's own imports, the trainer's, a lab's) creates Inductor's cache folder
``$TMPDIR/torchinductor_<user>`` unless ``TORCHINDUCTOR_CACHE_DIR`` already points elsewhere, and nothing removes
it: a benchmark left one behind even for ``--help``. The folder must exist before those imports, so this module
enters it when imported, as the first import of the script, and leaves it at exit (``atexit`` runs on a normal
end, ``sys.exit``, ``--help``, a refusal and an exception alike; it is registered before torch's own exit handlers,
so it runs after them). The processes a benchmark starts inherit the folder (a scratch folder inside it is that
folder), so they do not nest another.

Nothing happens when a benchmark module is imported by something else (a test importing :mod:`overhead`): only a
script of this folder run as the main program is put in a scratch folder.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
from pathlib import Path

from ignite_ddl.launcher.scratch import scratch_folder


def _run_as_a_benchmark() -> bool:
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return main is not None and Path(main).resolve().parent == Path(__file__).resolve().parent


if _run_as_a_benchmark():
    _folder = contextlib.ExitStack()
    _folder.enter_context(scratch_folder())
    atexit.register(_folder.close)
