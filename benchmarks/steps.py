"""The composition steps of the book, and the latency table that grows from chapter to chapter.

Each step is a sweep variant (benchmarks.variants) that runs the whole decode step; a chapter calls
`latency_table(upto=...)` to show every step so far at the configurations the issue targets, as
modeled by the trn2 cost model (best .. likely, the roofline, launches counted apart).
"""
from functools import lru_cache

from kernels.configs import model_shard
from kernels.reference import pipeline_inputs

from .sweep import run_row
from .variants import VARIANTS_BY_NAME

# (variant, what changed), in book order
STEPS = [
    ("0_staged", "five stage kernels, activations through HBM"),
    ("1_staged_tkg", "stages 4 and 5 fused: gdn_tkg"),
    ("2_scratch", "one kernel, HBM scratch between stages (the reference design)"),
    ("3_onchip", "intermediates stay on chip"),
    ("4_gqa_index", "GQA by indexing, no copy"),
    ("5_fused", "z after the recurrence when its weights outweigh the state: they stream under the compute"),
    ("6_lnc2", "heads split across the two NeuronCores of an LNC=2 launch"),
]
TARGETS = [("Qwen3-Next-80B", 4), ("Qwen3.5-27B", 8)]   # the shards the issue sets targets for
BATCHES = (1, 32)


@lru_cache(maxsize=None)
def _inputs(model, tp, B):
    return pipeline_inputs(model_shard(model, tp, B))


@lru_cache(maxsize=None)
def step_row(variant, model, tp, B):
    """The sweep's row (a dict) of one step at one shard and batch; raises if the row failed."""
    row = run_row(VARIANTS_BY_NAME[variant], model_shard(model, tp, B), _inputs(model, tp, B))
    if row["status"] != "ok":
        raise RuntimeError(f"{variant} at {model} TP{tp} B={B}: {row['error']['message']}")
    return row


def latency_table(upto):
    """Markdown: every step up to and including `upto`, modeled at each target shard and batch."""
    names = [name for name, _ in STEPS]
    steps = STEPS[:names.index(upto) + 1]
    head = "| step | launches | " + " | ".join(f"{m} TP{tp}, B = {B}" for m, tp in TARGETS for B in BATCHES) + " |"
    lines = [head, "|" + "---|" * (2 + len(TARGETS) * len(BATCHES))]
    for name, what in steps:
        cells = []
        for m, tp in TARGETS:
            for B in BATCHES:
                r = step_row(name, m, tp, B)
                cells.append(f"{r['best_us']:.0f} – {r['modeled_us']:.0f} µs ({r['modeled_us'] / r['roofline_us']:.1f}x)")
        lines.append(f"| {name}: {what} | {step_row(name, *TARGETS[0], 1)['launches']} | " + " | ".join(cells) + " |")
    roof = [f"{step_row(steps[-1][0], m, tp, B)['roofline_us']:.0f} µs" for m, tp in TARGETS for B in BATCHES]
    lines.append("| HBM roofline of the last step (368 GB/s per NeuronCore it runs on) | | " + " | ".join(roof) + " |")
    return "\n".join(lines)
