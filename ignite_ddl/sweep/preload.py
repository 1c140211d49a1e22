"""What a sweep's fork server imports once, so that its runs start with it imported: the trainer and TensorBoard.

The server imports this module before it serves a fork. multiprocessing's server passes over an ``ImportError`` in a
preloaded module but dies, with a traceback on the sweep's own stderr, of any other error: a torchvision built for
another torch raises ``RuntimeError`` from its import. Whatever fails here is left to the run that imports it again,
which says it in one line (and the command's own imports usually said it first).
"""

from __future__ import annotations

import contextlib

__all__: list[str] = []  # imported for its side effect only

with contextlib.suppress(Exception):
    import torch.utils.tensorboard  # noqa: F401

    import ignite_ddl.trainer.run  # noqa: F401
