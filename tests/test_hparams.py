"""A sweep's TensorBoard HParams, read back with TensorBoard's own hparams plugin data: each kind of flag the report
raises on a configuration is a 0/1 metric of its own, declared in the experiment, and the experiment's metrics are
exactly those docs/results.md lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import rank_steps
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as plugin_metadata
from tensorboard.plugins.hparams import plugin_data_pb2
from test_report import record

from ignite_ddl.report import analyze
from ignite_ddl.report.hparams import CONFIG_FLAGS, config_flags, write_hparams
from ignite_ddl.report.model import FLAG_MEANINGS, Analysis

DOC = Path(__file__).parents[1] / "docs" / "results.md"


def _record(index: int, repeat: int, rate: float, procs: int = 1, model: str = "cnn", **summary) -> dict:
    """A completed run's record (test_report's), about 600 MiB peak memory, its summary updated with ``summary``."""
    memory = {"ranks": [], "max": {"peak_rss_bytes": (600 + repeat) * 2**20, "held_bytes": 2**20}}
    return record(index, repeat, rate, procs=procs, model=model, summary={"memory": memory, **summary})


def _steps(**extra) -> dict:
    """Two ranks' step statistics, with timed gradient communication."""
    ranks = [rank_steps(rank, 0.002, 0.004) for rank in (0, 1)]
    figures = {"window_s": 3.0, "step_s_p50": 0.034, "step_s_p90": 0.035, "data_share": 0.06}
    return {"ranks": ranks, "straggler": None, "global": figures | {"overlap": 0.4, "busbw_Bps": 2e8}, **extra}


# What each configuration of the sweep below is flagged for (cfg002, unsettled, is not judged: its workload's
# verdict is provisional).
EXPECTED = {
    "cfg000": {"contended", "provisional"},
    "cfg001": {"superlinear", "does-not-fit", "provisional"},
    "cfg002": {"high-variation", "recompiled", "unsettled", "provisional"},
    "cfg003": {"provisional"},
}


def _sweep() -> Analysis:
    """cfg000: 1 process, one run contended; cfg001: 2 processes, efficiency 1.18, above the memory limit, with
    communication and FLOPs figures; cfg002: 1 process, repeats far apart, recompiled and never settled; cfg003:
    another workload, two repeats only."""
    records = [_record(0, r, v) for r, v in enumerate([100.0, 101.0, 99.0])]
    records.append(_record(0, 3, 300.0) | {"contended": True})
    flops = {"per_sample": {"total": 3e7}, "achieved_flops_per_s": 2.5e10}
    flops |= {"utilisation_attainable": 0.2, "utilisation_peak": 0.1}
    records += [_record(1, r, v, procs=2, steps=_steps(), flops=flops) for r, v in enumerate([235.0, 236.0, 234.0])]
    for number in (-3, -2, -1):
        records[number]["summary"]["memory"]["max"]["peak_rss_bytes"] += 300 * 2**20
    compiled = _steps(compile={"compile_s": 1.0, "recompilations": 2, "reasons": ["size mismatch"]})
    compiled["steady"] = {"settled": False}
    records += [_record(2, r, v, steps=compiled) for r, v in enumerate([90.0, 130.0, 60.0])]
    records += [_record(3, r, v, model="mlp") for r, v in enumerate([400.0, 401.0])]
    return analyze(records, {"spec": {"memory_limit_mb": 750}})


def _experiment(logdir: Path):
    """The experiment description TensorBoard's HParams plugin reads at ``logdir``."""
    root = EventAccumulator(str(logdir))
    root.Reload()
    content = root.PluginTagToContent(plugin_metadata.PLUGIN_NAME)[plugin_metadata.EXPERIMENT_TAG]
    return plugin_metadata.parse_experiment_plugin_data(content)


def _documented() -> set[str]:
    """The tags of docs/results.md's table of HParams metrics (every tag quoted in a row's first cell)."""
    lines = DOC.read_text().splitlines()
    start = lines.index("| tag | session | meaning |")
    tags: set[str] = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        tags |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return tags


def test_each_flag_kind_is_a_declared_hparams_metric_of_every_configuration(tmp_path):
    analysis = _sweep()
    raised = {(f.kind, f.config) for f in analysis.flags}
    assert {(kind, name) for name, kinds in EXPECTED.items() for kind in kinds if kind != "provisional"} <= raised
    assert ("provisional", None) in raised  # raised on cfg003's workload
    assert set(CONFIG_FLAGS) == set(FLAG_MEANINGS) - {"unreadable"}  # every kind that can concern a configuration
    assert {"contended", "superlinear", "high-variation", "recompiled", "unsettled", "does-not-fit"} <= set(
        CONFIG_FLAGS
    )
    assert write_hparams(analysis, tmp_path) is None

    declared = {m.name.tag for m in _experiment(tmp_path).metric_infos}
    assert {f"flag/{kind}" for kind in CONFIG_FLAGS} <= declared
    assert "flag/unreadable" not in declared
    for name, kinds in EXPECTED.items():
        events = EventAccumulator(str(tmp_path / "configs" / name))
        events.Reload()
        start = plugin_data_pb2.HParamsPluginData.FromString(
            events.PluginTagToContent(plugin_metadata.PLUGIN_NAME)[plugin_metadata.SESSION_START_INFO_TAG]
        )
        assert start.session_start_info.hparams["repeat"].string_value == "all"
        values = {kind: [e.value for e in events.Scalars(f"flag/{kind}")] for kind in CONFIG_FLAGS}
        assert values == {kind: [1.0 if kind in kinds else 0.0] for kind in CONFIG_FLAGS}, name
    runs = EventAccumulator(str(tmp_path / "runs" / "cfg000-r0"))
    runs.Reload()
    assert not [tag for tag in runs.Tags()["scalars"] if tag.startswith("flag/")]  # configurations' only


def test_the_hparams_metrics_are_exactly_those_docs_results_md_lists(tmp_path):
    documented = _documented()
    assert "hparam/samples_per_s" in documented and "flag/contended" in documented
    write_hparams(_sweep(), tmp_path)  # a sweep that writes every metric
    declared = [m.name.tag for m in _experiment(tmp_path).metric_infos]
    assert len(declared) == len(set(declared))
    assert set(declared) == documented, (
        f"undocumented: {sorted(set(declared) - documented)}; documented but not written: "
        f"{sorted(documented - set(declared))}"
    )


def test_configurations_split_by_environment_or_thread_count_carry_the_mixed_environments_flag():
    # cfg000's repeats 4-5 ran with 1 intra-op thread, its first three with 2: reported as two configurations.
    records = [_record(0, r, v) for r, v in enumerate([100.0, 101.0, 99.0, 60.0, 61.0])]
    records += [_record(1, r, v) for r, v in enumerate([110.0, 111.0, 109.0])]
    for r in records:
        r["summary"]["threads_per_process"] = 1 if r["index"] == 0 and r["repeat"] >= 3 else 2
    flags = config_flags(analyze(records))
    mixed = {name: values["flag/mixed-environments"] for name, values in flags.items()}
    assert mixed == {"cfg000": 1.0, "cfg000@threads=1": 1.0, "cfg001": 0.0}
    # A sweep resumed with another torch: every configuration is one environment's of two.
    versions = {"python": "3.11.7", "torch": "2.14.1", "ignite": "0.5.5", "cuda": ""}
    records = [_record(i, r, 100.0 + i + r) for i in (0, 1) for r in range(6)]
    for r in records:
        r["summary"]["versions"] = versions | ({"torch": "2.15.0"} if r["repeat"] >= 3 else {})
    flags = config_flags(analyze(records))
    assert list(flags) == ["cfg000", "cfg000@env2", "cfg001", "cfg001@env2"]
    assert all(values["flag/mixed-environments"] == 1.0 for values in flags.values())


@pytest.mark.parametrize("kind", CONFIG_FLAGS)
def test_each_flag_kind_is_documented_as_a_configuration_metric(kind):
    rows = [line for line in DOC.read_text().splitlines() if line.startswith(f"| `flag/{kind}` |")]
    assert len(rows) == 1 and rows[0].split("|")[2].strip() == "configuration"


def test_every_declared_metric_carries_its_description(tmp_path):
    """TensorBoard shows each metric's description beside its column: every metric the sweep declares has one."""
    write_hparams(_sweep(), tmp_path)
    infos = _experiment(tmp_path).metric_infos
    assert infos and all(info.description for info in infos), [i.name.tag for i in infos if not i.description]
    described = {info.name.tag: info.description for info in infos}
    assert described["hparam/samples_per_s_low"].startswith("the low end of the confidence interval")
    assert "quality_margin" in described["flag/learns-worse"]


def test_a_report_written_again_replaces_its_hparams_files(tmp_path):
    """TensorBoard shows the sessions of every event file in a folder: a second `ignite-ddl report` once added a
    second file to each session's folder and the root, so every session appeared twice."""
    from test_report import configs

    from ignite_ddl.cli import main
    from ignite_ddl.core.results import append_record

    for r in configs([100.0, 101.0, 99.0], [150.0, 160.0, 155.0]):
        append_record(tmp_path / "results.jsonl", r)
    for _ in range(2):
        assert main(["report", str(tmp_path)]) == 0
    root = tmp_path / "tb_hparams"
    folders = [root, *(p for p in root.rglob("*") if p.is_dir() and any(p.glob("events.out.tfevents.*")))]
    assert len(folders) > 3
    for folder in folders:
        assert len(list(folder.glob("events.out.tfevents.*"))) == 1, folder
