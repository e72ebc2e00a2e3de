"""The latency table of the composition steps, which grows from chapter to chapter.

The steps are `kernels.registry.STEPS`, each a sweep variant that runs the whole decode step; a
chapter calls `latency_table(upto=...)` to show every step so far at the configurations the issue
targets, as modeled by the trn2 cost model (best .. likely, the roofline, launches counted apart).
"""
from functools import lru_cache

from kernels.configs import model_shard
from kernels.reference import pipeline_inputs
from kernels.registry import BY_NAME, STEPS
from nkicpu.costs import HBM_ROOFLINE_GBPS

from .sweep import run_row

TARGETS = [("Qwen3-Next-80B", 4), ("Qwen3.5-27B", 8)]   # the shards the issue sets targets for
BATCHES = (1, 32)


@lru_cache(maxsize=None)
def _inputs(model, tp, B):
    return pipeline_inputs(model_shard(model, tp, B))


@lru_cache(maxsize=None)
def step_row(variant, model, tp, B):
    """The sweep's row (a dict) of one step at one shard and batch; raises if the row failed."""
    row = run_row(BY_NAME[variant], model_shard(model, tp, B), _inputs(model, tp, B))
    if row["status"] != "ok":
        raise RuntimeError(f"{variant} at {model} TP{tp} B={B}: {row['error']['message']}")
    return row


def _cell(row):
    ratio = row["modeled_us"] / row["roofline_us"]
    return f"{row['best_us']:.0f} – {row['modeled_us']:.0f} µs ({ratio:.1f}x)"


def latency_table(upto):
    """Markdown: every step up to and including `upto`, modeled at each target shard and batch."""
    steps = STEPS[:BY_NAME[upto].step + 1]
    shards = [(m, tp, B) for m, tp in TARGETS for B in BATCHES]
    head = "| step | launches | " + " | ".join(f"{m} TP{tp}, B = {B}" for m, tp, B in shards) + " |"
    lines = [head, "|" + "---|" * (2 + len(shards))]
    for step in steps:
        cells = [_cell(step_row(step.name, *shard)) for shard in shards]
        launches = step_row(step.name, *TARGETS[0], 1)["launches"]
        lines.append(f"| {step.name}: {step.what} | {launches} | " + " | ".join(cells) + " |")
    roof = [f"{step_row(steps[-1].name, *shard)['roofline_us']:.0f} µs" for shard in shards]
    lines.append(f"| HBM roofline of the last step ({HBM_ROOFLINE_GBPS:g} GB/s per NeuronCore it "
                 "runs on) | | " + " | ".join(roof) + " |")
    return "\n".join(lines)
