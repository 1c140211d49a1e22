"""Configurations against each other: speed-up against the same configuration with one process, each option that
makes a step faster against its plain twin (compile, a communication hook, ...), and utilisation against one matmul
reference per device."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ignite_ddl.core.config import LAYOUT_OPTIONS, TrainConfig, declared_default
from ignite_ddl.core.options import Role, names_with_role
from ignite_ddl.report.model import ConfigResult
from ignite_ddl.report.stats import Estimate, ratio_interval

__all__ = ["VERSUS", "one_matmul_reference", "speedups", "versus", "versus_text"]


def one_matmul_reference(configs: list[ConfigResult]) -> None:
    """Runs before schema 3 each measured their own matmul rate, per rank, under whatever else ran then: their
    utilisation is recomputed against one reference per device, the same for every row, the highest rate any such
    run of the sweep measured there. Newer runs are judged against their share of their machine's one measured
    peak already (:func:`~ignite_ddl.measure.flops.utilisation_record`): their figures stand."""
    best: dict[tuple[str | None, str | None], float] = {}
    for config in configs:
        key = (config.environment, config.device_type)
        if config.matmul_rate is not None:
            best[key] = max(best.get(key, 0.0), config.matmul_rate)
    for config in configs:
        reference = best.get((config.environment, config.device_type))
        if reference is not None and config.machine_peak is None and config.achieved_flops_per_s is not None:
            config.matmul_reference = reference
            config.utilisation_attainable = config.achieved_flops_per_s / reference


def _kind(config: ConfigResult) -> tuple:
    """What a configuration's speed-up baseline must share with it: every option but the layout, and where it ran."""
    options = sorted((k, repr(v)) for k, v in config.config.items() if k not in LAYOUT_OPTIONS)
    return (config.environment, *options)


def speedups(configs: list[ConfigResult], confidence: float) -> None:
    """Each configuration's speed-up and efficiency, with their intervals, against the same configuration run with
    one process where the sweep has one."""
    by_kind: dict[tuple, list[ConfigResult]] = defaultdict(list)
    for config in configs:
        by_kind[_kind(config)].append(config)
    for group in by_kind.values():
        base = next((c for c in group if c.world_size == 1 and c.samples_per_s), None)
        if base is None:
            continue
        for config in group:
            if not config.samples_per_s:
                continue
            if config is base:
                config.speedup = Estimate(1.0, 1.0, 1.0, len(base.samples_per_s), 0.0)
            else:
                config.speedup = ratio_interval(config.samples_per_s, base.samples_per_s, confidence)
            config.efficiency = config.speedup.scaled(1.0 / config.world_size)
            config.baseline = base.name


# What makes a step faster, each against the configuration equal to it but for that option's plain value: the
# options it is compared on, and the options that only tune it (ignored when looking for the plain twin).
# The plain value is each option's declared default.
VERSUS = {
    option: (declared_default(option), tuning)
    for option, tuning in (
        ("compile", ("compile_mode",)),
        ("comm_hook", ("powersgd_rank", "powersgd_start_iter")),
        ("static_graph", ()),
        ("gradient_as_bucket_view", ()),
    )
}


def versus(configs: list[ConfigResult], confidence: float) -> None:
    """Each configuration that compiles or changes DDP's communication, against its plain twin: the speed-up with its
    interval, and for a compiled one the iterations after which its compilation has paid for itself."""
    by_options = {}
    for config in configs:
        by_options[(config.environment, _plain_key(config.config))] = config
    for config in configs:
        for option, (plain, tuning) in VERSUS.items():
            value = config.config.get(option, plain)
            if value == plain or not config.samples_per_s:
                continue
            twin_options = {k: v for k, v in config.config.items() if k not in tuning}
            twin_options[option] = plain
            twin = by_options.get((config.environment, _plain_key(twin_options)))
            if twin is None or not twin.samples_per_s:
                continue
            found: dict[str, Any] = {"option": option, "value": value, "plain": twin.name}
            found["speedup"] = ratio_interval(config.samples_per_s, twin.samples_per_s, confidence)
            if option == "compile" and config.compile_s is not None and config.global_batch:
                fast, slow = config.throughput.value, twin.throughput.value
                saved = config.global_batch / slow - config.global_batch / fast if fast and slow else 0.0
                cost = config.compile_s.value or 0.0
                found["compile_s"] = cost
                # A payback only from a separated difference: the speed-up's whole interval above 1.
                low = found["speedup"].low
                found["separated"] = low is not None and low > 1
                found["payback_iterations"] = cost / saved if saved > 0 and found["separated"] else None
            if option == "comm_hook":
                found["bytes"] = (twin.comm_bytes_per_step, config.comm_bytes_per_step)
                exposed = [1e3 * c.phases["exposed_comm"] if c.comm_timed else None for c in (twin, config)]
                found["exposed_ms"] = tuple(exposed)
                found["val_accuracy"] = (twin.val_accuracy, config.val_accuracy)
            config.versus.append(found)


_RUNS_OWN = set(names_with_role(TrainConfig, Role.OUTPUT, Role.MEASUREMENT))


def _plain_key(options: dict[str, Any]) -> tuple:
    """A configuration's options as a key, leaving out where its files went and what it measured (a run's own), and
    the options that only tune another (compile_mode, ...)."""
    left_out = {t for _, ts in VERSUS.values() for t in ts} | _RUNS_OWN
    plain = {k: value for k, (value, _) in VERSUS.items()}  # a plain value is the same as none given (older records)
    return tuple(
        sorted((k, repr(v)) for k, v in options.items() if k not in left_out and not (k in plain and v == plain[k]))
    )


def payback_verdict(found: dict[str, Any]) -> str:
    """What a compilation's payback is, in one of four words, for the table and the sentence alike:
    "after" (a separated speed-up: payback_iterations holds when), "not separated" (faster on the mean only),
    "none shown" (slower on the mean, not shown slower) or "never" (shown slower or no faster)."""
    speedup: Estimate = found["speedup"]
    if found.get("payback_iterations") is not None:
        return "after"
    if speedup.value is not None and speedup.value > 1 and not found.get("separated"):
        return "not separated"
    if speedup.high is not None and speedup.high > 1:
        # Slower on the mean, but not shown slower: "never" would claim what these runs cannot tell.
        return "none shown"
    return "never"


def versus_text(config: ConfigResult, found: dict[str, Any]) -> str:
    """One comparison of :attr:`ConfigResult.versus` in words."""
    speedup: Estimate = found["speedup"]
    change = f"{100 * (speedup.value - 1):+.0f} % samples/s" if speedup.value is not None else "samples/s unknown"
    if speedup.low is not None and speedup.high is not None:
        change += f" (95 % interval {100 * (speedup.low - 1):+.0f} to {100 * (speedup.high - 1):+.0f} %)"
    head = f"{config.name} ({found['option']}={found['value']}) vs {found['plain']}: {change}"
    if found["option"] == "compile" and "compile_s" in found:
        verdict = payback_verdict(found)
        if verdict == "not separated":
            return (
                f"{head}; its {found['compile_s']:.0f} s of compilation: no payback figure, the compiled speed is not "
                f"separated from {found['plain']}'s (the speed-up's interval reaches 1 or below, or is missing)"
            )
        if verdict == "none shown":
            return (
                f"{head}; its {found['compile_s']:.0f} s of compilation: no payback shown (not faster per step on the "
                "mean, and the speed-up's interval reaches above 1: more repeats may tell)"
            )
        if verdict == "never":
            return f"{head}; its {found['compile_s']:.0f} s of compilation never pay back (not faster per step)"
        return (
            f"{head}; pays its {found['compile_s']:.0f} s of compilation back after "
            f"{found['payback_iterations']:.0f} iterations"
        )
    if found["option"] == "comm_hook":
        parts = []
        before, after = found["bytes"]
        if before and after:
            phase = ""
            if found["value"] == "powersgd":
                start = config.option("powersgd_start_iter")
                early = (config.warmup_phase or {}).get("comm_bytes_per_step") or before  # measured, where it was
                phase = (
                    f" (its steady phase, measured after iteration {start} (powersgd_start_iter): its first {start} "
                    f"iterations send the uncompressed {early / 1e6:.3g} MB; see Two phases)"
                )
            parts.append(f"bytes per step {before / 1e6:.3g} -> {after / 1e6:.3g} MB{phase}")
        before, after = found["exposed_ms"]
        if before is not None and after is not None:
            parts.append(f"exposed communication {before:.1f} -> {after:.1f} ms")
        before, after = found["val_accuracy"]
        if before is not None and after is not None:
            parts.append(f"val accuracy {before:.3f} -> {after:.3f}")
        return head + ("; " + ", ".join(parts) if parts else "")
    return head
