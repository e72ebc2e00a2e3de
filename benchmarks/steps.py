"""The latency table of the composition steps, which grows from chapter to chapter.

The steps are `kernels.registry.STEPS`, each a sweep variant that runs the whole decode step; a
chapter calls `latency_table(upto=...)` to show every step so far at the target shards, as
modeled by the trn2 cost model (best .. likely, launches counted apart), each step against the
roofline of the block's minimal bytes on its cores and the likely floor under them
(`benchmarks.roofline`).
"""
from functools import lru_cache

from kernels.configs import model_shard
from kernels.reference import pipeline_inputs
from kernels.registry import BY_NAME, STEPS
from nkicpu.costs import DMA_ACHIEVED_GBPS, HBM_ROOFLINE_GBPS

from .roofline import block_floor_us, block_roofline_us
from .sweep import run_row

TARGETS = [("Qwen3-Next-80B", 4), ("Qwen3.5-27B", 8)]   # the shards the book's targets are set for
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
    return (f"{row['best_us']:.0f} – {row['modeled_us']:.0f} "
            f"({row['modeled_over_block_roofline']:.2f}x; {row['modeled_over_block_floor']:.2f}x)")


def latency_table(upto):
    """Markdown: every step up to and including `upto`, one table per target shard, a column per
    batch: best – likely µs (likely over the block's HBM roofline on the step's cores; likely over
    the likely floor of the block's bytes), then that roofline and floor for each core count."""
    steps = [s for s in STEPS if s.step <= BY_NAME[upto].step]
    tables = []
    for m, tp in TARGETS:
        lines = [f"**{m} TP{tp}** (µs, best – likely; likely / roofline; likely / floor)", "",
                 "| step | launches | " + " | ".join(f"B = {B}" for B in BATCHES) + " |",
                 "|" + "---|" * (2 + len(BATCHES))]
        for step in steps:
            cells = [_cell(step_row(step.name, m, tp, B)) for B in BATCHES]
            launches = step_row(step.name, m, tp, 1)["launches"]
            lines.append(f"| {step.name} | {launches} | " + " | ".join(cells) + " |")
        shapes = [model_shard(m, tp, B) for B in BATCHES]
        for cores in sorted({step.lnc for step in steps}):
            on = f"{cores} core{'s' if cores > 1 else ''}"
            lines.append(f"| HBM roofline, the block's bytes on {on} ({HBM_ROOFLINE_GBPS:g} GB/s per core) | | "
                         + " | ".join(f"{block_roofline_us(s, cores):.1f}" for s in shapes) + " |")
            lines.append(f"| likely floor, the block's bytes on {on} ({DMA_ACHIEVED_GBPS:g} GB/s per core) | | "
                         + " | ".join(f"{block_floor_us(s, cores):.1f}" for s in shapes) + " |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)
