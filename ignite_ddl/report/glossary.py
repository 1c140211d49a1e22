"""The report's glossary: every term of art the report uses, explained once at its end, and linked from where the
report first uses it (its first paragraph or list item that does). The documentation site's glossary page is made
from the same table, and its pages link each term where they first use it (``docs/hooks.py``).

Example:
    >>> from ignite_ddl.report.document import Document
    >>> doc = Document()
    >>> doc.paragraph("Steps settle by MSER-5; MSER-5 again.")
    >>> add_glossary(doc)
    >>> doc.blocks[0][1]
    'Steps settle by [MSER-5](#glossary-mser-5); MSER-5 again.'
"""

from __future__ import annotations

import re

from ignite_ddl.report.document import Document

__all__ = ["GLOSSARY", "add_glossary", "anchor", "link_first"]

# term -> (how the report and the docs write it, a regular expression; what it means). In the order the glossary
# lists them.
GLOSSARY: dict[str, tuple[str, str]] = {
    "workload": (
        r"\bworkloads?\b",
        "what fixes the work done per sample (by default: model, dataset, amp, optimizer, sync_bn; a spec's "
        "workload key may name others). Configurations are ranked only against others of their workload.",
    ),
    "reference configuration": (
        r"\breference configuration\b|\breference of its workload\b",
        "the configuration of a workload whose validation accuracy (or loss) the others are compared with: the first "
        "(lowest cfg number) without gradient compression (comm_hook=none).",
    ),
    "learns worse": (
        r"\blearns? worse\b",
        "a configuration whose validation accuracy is below its workload's reference configuration's by more "
        "than quality_margin over the whole confidence interval of the difference of the means (or one of whose "
        "runs diverged); for a workload without accuracy, or a language model, whose validation loss is above the "
        "reference's by more than quality_margin_loss of it, alike. It is never recommended, however fast.",
    ),
    "not judged": (
        r"\bnot judged\b",
        "a configuration the verdict passes over: fewer usable runs than min_repeats, most of its runs' step times "
        "never settled, a run with no iteration measured after warm-up, or a counted run measured under contention. "
        "It is listed, never best nor recommended.",
    ),
    "separated": (
        r"\bseparated\b",
        "a configuration named fastest: its confidence interval lies above every other judged configuration's of its "
        "workload, and a one-sided Welch test against each agrees at the Bonferroni-corrected threshold. Adaptive "
        "repeats stop once a best is separated.",
    ),
    "statistically tied": (
        r"\b[Ss]tatistically tied\b|\btied set\b",
        "configurations whose confidence intervals overlap the fastest one's (or that a corrected test does not "
        "show slower): these runs cannot tell them apart. More repeats may.",
    ),
    "equivalent": (
        r"\b[Ee]quivalen(?:t|ce)\b",
        "the equivalence test passed: two one-sided tests at 5 % show the ratio of the mean throughputs within "
        "the margin (equivalence_margin, 3 % by default), i.e. its 90 % interval lies inside it. Unlike a tie, "
        "this is evidence that the difference is small.",
    ),
    "not separable at any practical number of repeats": (
        r"\bnot separable at any practical number of repeats\b",
        "at the spread measured, even 100 repeats of each would not separate the two configurations; that is not "
        "evidence that they are equal (only equivalence is).",
    ),
    "Welch": (
        r"\bWelch(?:'s)?\b",
        "Welch's t-test compares two means without assuming equal spreads; its one-sided p-value is the chance of "
        "a lead this large if the leader were no faster. It is judged against the corrected threshold beside it.",
    ),
    "Bonferroni": (
        r"\bBonferroni\b|\bHolm\b",
        "with k configurations the leader is compared with k - 1 others; each comparison is tested at 5 % / "
        "(k - 1) so that the chance of naming a wrong best stays at most 5 % (Holm's step-down method is a less "
        "conservative relative; the report uses Bonferroni).",
    ),
    "MSER-5": (
        r"\bMSER-5\b",
        "how the report finds when a run's step times settled: batch means of 5 steps, cut where the standard "
        "error of the kept mean is smallest (White 1997). A run whose best cut is in its second half never settled "
        "(unsettled).",
    ),
    "settled": (
        r"\b(?:un)?settled\b",
        "a run's step times settled when MSER-5 finds the end of their warm-up in the run's first half; a run "
        "whose times never did is unsettled, and a configuration most of whose runs are unsettled is not judged.",
    ),
    "contended": (
        r"\bcontended\b|\bcontention\b",
        "other processes used the CPUs (or GPUs) while a run measured, so its timings include waiting for them.",
    ),
    "quiet": (
        r"\bquiet\b",
        "a machine on which no other work ran while it measured: no run contended (other processes under the "
        "contention threshold, 10 % of the CPUs by default).",
    ),
    "own time": (
        r"\b[Oo]wn time\b",
        "data wait + forward + optimizer step of a rank: the parts of a step a rank does alone, which find the "
        "straggler (the all-reduce makes every rank's backward end together).",
    ),
    "busbw": (
        r"\bbusbw\b|\bbus bandwidth\b",
        "bus bandwidth: bytes all-reduced / time x 2(n - 1)/n for n ranks, the rate each link carried (comparable "
        "across rank counts, as in NCCL's tests).",
    ),
    "isolated bandwidth": (
        r"\bisolated\b",
        "the bus bandwidth of an all-reduce of the same size on the same ranks with nothing else running and "
        "nobody late: what the link can do, against which training's busbw is read.",
    ),
    "resident": (
        r"\bresident\b",
        "resident memory (RSS): the pages of a process in RAM, its peak read from /proc (VmHWM) less the shared "
        "libraries' pages mapped from files (RssFile, which depend on how the process started); on CPU it holds "
        "the model, the runtime's own buffers, and any temporary copies.",
    ),
    "held": (
        r"\bheld\b",
        "the bytes a rank holds between steps for parameters, gradients and optimizer state (counted from the "
        "tensors): what sharding divides. The resident peak is larger.",
    ),
    "MFU": (
        r"\bMFU\b",
        "model FLOPs utilisation: the model FLOP/s a run achieved (FLOPs per sample x samples per second) over the "
        "matmul peak of what it ran on. The peak is the machine's, measured once per machine (square matmuls on all "
        "its cores, repeated until two successive estimates agree within 3 %) and shared by every run of a sweep; "
        "each rank is judged against its share of it (on a CPU its threads out of the cores, on a GPU its device), "
        "so runs of one workload on the same cores rank by MFU as by throughput. Layers the FLOP counter cannot see "
        "are counted by formula (recurrent layers) or named, with no MFU given.",
    ),
    "twin": (
        r"\btwins?\b",
        "the same configuration with one thing changed back: its one-process twin runs it in one process (the "
        "step-time model predicts several processes from it); its plain twin runs it without compiling or a "
        "communication hook (what the report measures a faster step against).",
    ),
    "TPE": (
        r"\bTPE\b",
        "tree-structured Parzen estimator: Optuna's default sampler, which proposes the next configuration from "
        "densities of the good and the poor ones measured so far.",
    ),
    "regret": (
        r"\bregret\b",
        "how much slower a search's pick (the best it names, else its leader) ran than the grid's best, both as the "
        "grid's own runs measured them.",
    ),
    "HTA": (
        r"\bHTA\b",
        "Holistic Trace Analysis, Meta's library that reads PyTorch profiler traces; the suite checks its own "
        "figures of time and communication against what HTA reads from the same trace.",
    ),
    "Pareto front": (
        r"\bPareto front\b",
        "the configurations no other beats on both speed and peak memory in all (per rank x processes): faster and "
        "no larger, or smaller and no slower. throughput_vs_memory.png rings it among the configurations that can "
        "be recommended and stars the recommended one.",
    ),
}


def anchor(term: str) -> str:
    """The glossary entry's anchor: ``glossary-learns-worse`` for "learns worse"."""
    return "glossary-" + re.sub(r"[^a-z0-9]+", "-", term.lower()).strip("-")


# What a link must not go inside: code spans, bold (a verdict's headline stays as the verdict states it), links and
# images with their targets, raw HTML tags.
_KEEP = re.compile(r"(`[^`]*`|\*\*.+?\*\*|!?\[[^\]]*\]\([^)]*\)|<[^>]+>)")


def link_first(text: str, pattern: re.Pattern[str], target: str) -> str | None:
    """``text`` (Markdown) with the first match of ``pattern`` outside code spans, bold, links and HTML tags made a
    link to ``target``, or None where there is none."""
    parts = _KEEP.split(text)
    for i in range(0, len(parts), 2):  # the even parts are outside what must be kept
        found = pattern.search(parts[i])
        if found:
            linked = f"[{found.group(0)}]({target})"
            parts[i] = parts[i][: found.start()] + linked + parts[i][found.end() :]
            return "".join(parts)
    return None


def add_glossary(doc: Document) -> None:
    """Link each glossary term from the first paragraph or list item that uses it, and end ``doc`` with the
    glossary of the terms it uses."""
    used = []
    for term, (pattern, meaning) in GLOSSARY.items():
        compiled, entry = re.compile(pattern), anchor(term)
        target = f"#{entry}"
        for number, (kind, value) in enumerate(doc.blocks):
            if kind == "paragraph":
                linked = link_first(value, compiled, target)
                if linked is not None:
                    doc.blocks[number] = (kind, linked)
                    break
            elif kind == "bullets":
                found = next(
                    ((i, linked) for i, item in enumerate(value) if (linked := link_first(item, compiled, target))),
                    None,
                )
                if found is not None:
                    items = list(value)
                    items[found[0]] = found[1]
                    doc.blocks[number] = (kind, items)
                    break
        else:
            continue
        used.append((entry, term, meaning))
    if used:
        doc.heading("Glossary")
        doc.definitions(used)
