"""A search's study file (``search.journal``, Optuna's ``JournalFileBackend``: one JSON operation a line, appended)
repaired before Optuna reads it, as ``results.jsonl`` is: a line that is not an operation (garbled, or the last
one cut short by a kill) is moved aside to ``search.journal.rejected`` and the search goes on without it.

Optuna numbers a trial by the count of trial creations before it, so a lost creation would hand every later
operation to the wrong trial, or to none. Where an operation names a trial not yet created, the creation was one of
the lines set aside: the earliest such line is stood in for by a plain creation (a running trial of the study, which
the operations that follow fill in again). A gap no line set aside explains is not guessed at: that operation and
every one after it are set aside too, and the study is read as it stood before it (a prefix of an append-only
journal is a study as it once was). The search's runs are in ``results.jsonl`` whatever the journal lost.

Example:
    >>> create = b'{"op_code":4,"worker_id":"w","study_id":0,"datetime_start":null}\\n'
    >>> param = b'{"op_code":5,"worker_id":"w","trial_id":1,"param_name":"x"}\\n'
    >>> kept, rejected = mend([create, b'{"op_co\\n', param])
    >>> [line[:14] for line in kept], [(r.line, r.reason) for r in rejected]
    ([b'{"op_code":4,"', b'{"op_code":4,"', b'{"op_code":5,"'], [(2, 'not JSON')])
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from ignite_ddl.core.outputs import open_output, write_bytes, writing
from ignite_ddl.core.results import RejectedLine, rejected_path

__all__ = ["mend", "repair_journal"]

# The operation codes of Optuna's journal format (``JournalOperation`` in optuna.storages.journal): written in every
# journal, so fixed across Optuna's releases.
CREATE_STUDY, CREATE_TRIAL = 0, 4
MAXIMIZE = 2  # optuna.study.StudyDirection.MAXIMIZE: a search maximises samples/s
STAND_IN = "ignite-ddl-repair"  # the worker that "wrote" a stood-in line: never the one reading it


def _operation(line: bytes, last: bool) -> tuple[dict[str, Any] | None, str]:
    """The operation a line holds, or None and why it holds none."""
    try:
        operation = json.loads(line)
    except ValueError:
        cut = last and not line.endswith(b"\n")
        return None, "incomplete last line (a write cut short)" if cut else "not JSON"
    if not isinstance(operation, dict) or not isinstance(operation.get("op_code"), int):
        return None, "not a journal operation"
    return operation, ""


def _stand_in(operation: dict[str, Any]) -> bytes:
    """A line for a lost creation: ``operation``, written by no worker that reads it, started now."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    line = {**operation, "worker_id": STAND_IN, "datetime_start": now}
    return (json.dumps(line, separators=(",", ":")) + "\n").encode()


def mend(lines: list[bytes], study_name: str = "sweep") -> tuple[list[bytes], list[RejectedLine]]:
    """The journal's lines as Optuna can replay them, and the lines set aside (module docstring)."""
    kept: list[bytes | None] = []  # None: where a line was set aside (a stand-in may take its place)
    gaps: list[int] = []  # those places, earliest first, not yet stood in for
    rejected: list[RejectedLine] = []
    studies = trials = 0  # created so far (stand-ins included): the next study's and trial's number
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        operation, why = _operation(line, last=number == len(lines))
        if operation is None:
            rejected.append(RejectedLine(number, line, why))
            gaps.append(len(kept))
            kept.append(None)
            continue
        code, trial = operation["op_code"], operation.get("trial_id")
        if code != CREATE_STUDY and not studies and gaps[:1] == [0]:
            # the study's own creation (the journal's first line) was lost: its name and direction are known
            kept[gaps.pop(0)] = _stand_in({"op_code": CREATE_STUDY, "study_name": study_name, "directions": [MAXIMIZE]})
            studies += 1
        if isinstance(trial, int) and trial >= trials:
            missing = trial - trials + 1
            if missing > len(gaps):  # not explained by the lines set aside: the rest cannot be replayed
                reason = "after a lost line no stand-in can replace"
                rejected += [RejectedLine(n, rest, reason) for n, rest in enumerate(lines[number - 1 :], number)]
                break
            for place in gaps[:missing]:
                kept[place] = _stand_in({"op_code": CREATE_TRIAL, "study_id": max(studies - 1, 0)})
            del gaps[:missing]
            trials += missing
        studies += code == CREATE_STUDY
        trials += code == CREATE_TRIAL
        kept.append(line if line.endswith(b"\n") else line + b"\n")
    return [line for line in kept if line is not None], [r for r in rejected if r.text.strip()]


def repair_journal(path: str | Path, study_name: str) -> list[RejectedLine]:
    """Move the lines of ``path`` that Optuna cannot replay to ``<name>.rejected`` (appended) and rewrite the
    journal atomically with the rest; return the lines moved (none: the file is left as it is, but for the newline
    a whole last operation may lack)."""
    path = Path(path)
    if not path.is_file():
        return []
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    kept, rejected = mend(lines, study_name)
    if not rejected and (not data or data.endswith(b"\n")):
        return []
    if rejected:
        side_path = rejected_path(path)
        with writing(side_path), open(open_output(side_path), "ab") as side:
            side.write(b"".join(bad.text if bad.text.endswith(b"\n") else bad.text + b"\n" for bad in rejected))
    write_bytes(path, b"".join(kept))
    return rejected
