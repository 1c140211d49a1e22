"""The thin core every other package stands on, importing no torch: options declared once (:mod:`.options`), the run
configuration (:mod:`.config`), every error and its exit status (:mod:`.errors`, :mod:`.commands`), outputs written
whole or not at all (:mod:`.outputs`, :mod:`.figures`, :mod:`.folders`), and the typed schema of every file a run
(:mod:`.schema`) and a sweep (:mod:`.sweep_records`) write, checked by :mod:`.validation` and documented by
:mod:`.schema_doc`, JSON files (:mod:`.jsonfiles`) and a sweep's results.jsonl (:mod:`.results`).

Example:
    >>> from ignite_ddl.core import Role, TrainConfig, option_specs
    >>> option_specs(TrainConfig)["amp"].role is Role.WORKLOAD
    True
"""

from __future__ import annotations

from ignite_ddl.core.exports import lazy_exports

__all__ = [
    "ConfigError",
    "DatasetError",
    "Interrupted",
    "LaunchFailed",
    "LaunchOptions",
    "Options",
    "OutputError",
    "Role",
    "RunFailed",
    "TrainConfig",
    "load_results",
    "option",
    "option_specs",
    "read_json",
    "write_json",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(
            ("ConfigError", "DatasetError", "Interrupted", "LaunchFailed", "OutputError", "RunFailed"), "errors"
        ),
        "LaunchOptions": "config",
        "TrainConfig": "config",
        "Options": "options",
        "Role": "options",
        "option": "options",
        "option_specs": "options",
        "load_results": "results",
        "read_json": "jsonfiles",
        "write_json": "jsonfiles",
    },
)
