"""What the composition chapters share: a step's runs, its check against the reference, and the
figures and tables its profile is read from. The analyses of any capture or profile that the tables
use (`dma_parts`, `core_parts`, `scratch_chain`, ...) are nkicpu's (`nkicpu.profile`).

Each chapter in this folder imports it (a notebook runs with its own folder as the working
directory). The runs use the inputs of the benchmark sweep (`kernels.reference.pipeline_inputs`),
so a chapter's profiles are exactly the rows of its latency table (`benchmarks.steps`). Every time
here is modeled by the trn2 cost model; none is measured.
"""
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

import kernels  # noqa: F401  (first: makes `import nki` work)
import nkicpu
from benchmarks.steps import TARGETS, step_row
from kernels.accuracy import assert_close
from kernels.configs import model_shard
from kernels.reference import gdn_block_tkg_ref, pipeline_inputs, to_numpy, to_torch
from kernels.registry import BLOCK_ARGS, BLOCK_OUTPUTS, BY_NAME, STEPS
from nkicpu import costs
from nkicpu.profile import MODELED, core_parts, profile_capture


@lru_cache(maxsize=None)
def shard_inputs(model, tp, B):
    """The sweep's inputs at a shard: the 11 block inputs (make_inputs, seed 0) and every stage's
    intermediates as the torch reference computes them."""
    return pipeline_inputs(model_shard(model, tp, B))


def block_inputs(model, tp, B):
    """The 11 arguments of the block, by name, in signature order."""
    x = shard_inputs(model, tp, B)
    return {name: x[name] for name in BLOCK_ARGS}


@dataclass
class Launch:
    name: str          # the registry entry the launch runs
    capture: object    # nkicpu.Capture: outputs and instruction record
    profile: object    # nkicpu.profile.Profile, modeled (trn2 cost model)


def launches(step, model, tp, B):
    """Every kernel launch of a composition step, run on the CPU model and profiled as the sweep
    profiles them: one for a single-launch step, one per stage kernel for a host pipeline."""
    entry = BY_NAME[step]
    shape, x = model_shard(model, tp, B), shard_inputs(model, tp, B)
    runs = []
    for name in entry.launches or (entry.name,):
        e = BY_NAME[name]
        capture = nkicpu.capture(e.load_kernel())(*e.arguments(shape, x))
        runs.append(Launch(name, capture, profile_capture(capture)))
    return runs


# --- correctness ----------------------------------------------------------------------------------

def check_block(got, x):
    """Assert a step's (out, conv_state, recurrent_state) against `gdn_block_tkg_ref`, each under
    its accuracy rule (`kernels.accuracy`); return the errors as a table row.

    The conv state's shifted columns must be bit-exact; its new column is the in_proj output,
    which may round to the neighbouring bf16 value when the kernel sums in another order than
    torch, so it is held to the output rule (the largest error is the new column's).
    """
    want = [to_numpy(t) for t in gdn_block_tkg_ref(*(to_torch(x[name]) for name in BLOCK_ARGS))]
    out, conv, state = [assert_close(g, w, rule, name)
                        for (name, rule), g, w in zip(BLOCK_OUTPUTS, got, want)]
    return {"out max abs err": out["max_abs_err"], "out cosine": out["cosine"],
            "conv new column max abs err": conv["max_abs_err"],
            "state max abs err": state["max_abs_err"]}


def check_table(rows):
    """Markdown: one row per (label, check_block result)."""
    keys = list(next(iter(rows.values())))
    lines = ["| run | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for label, r in rows.items():
        lines.append(f"| {label} | " + " | ".join(f"{r[k]:.6f}" if "cosine" in k else f"{r[k]:.1e}" for k in keys)
                     + " |")
    return "\n".join(lines)


# --- profiles --------------------------------------------------------------------------------------

def launch_table(runs):
    """Markdown: per launch of a step, the band against its roofline and the launch cost apart."""
    lines = ["| launch | HBM roofline (µs) | best (µs) | likely (µs) | likely / roofline | launch (µs) |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        p = r.profile
        lines.append(f"| {r.name} | {p.roofline_us:.2f} | {p.best_us:.2f} | {p.total_us:.2f} "
                     f"| {p.total_us / p.roofline_us:.1f}x | {p.launch_us:.0f} |")
    best, likely = sum(r.profile.best_us for r in runs), sum(r.profile.total_us for r in runs)
    launch = sum(r.profile.launch_us for r in runs)
    lines.append(f"| **all {len(runs)}** | {sum(r.profile.roofline_us for r in runs):.2f} | **{best:.2f}** "
                 f"| **{likely:.2f}** | | **{launch:.0f}** |")
    return "\n".join(lines)


def plot_launches(panels, title):
    """Horizontal bars, one per launch: the kernel time up to best (dark), best .. likely (light),
    then the launch preamble + epilogue (hatched). `panels`: {panel title: [Launch]}."""
    fig = Figure(figsize=(10, 1.2 + 0.45 * max(len(runs) for runs in panels.values()) * len(panels)),
                 layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (name, runs) in zip(axes, panels.items()):
        for y, r in enumerate(runs):
            p = r.profile
            ax.barh(y, p.best_us, color="tab:blue")
            ax.barh(y, p.total_us - p.best_us, left=p.best_us, color="tab:blue", alpha=0.35)
            ax.barh(y, p.launch_us, left=p.total_us, color="0.85", hatch="//", edgecolor="0.5")
            ax.plot([p.roofline_us], [y], "|", color="black", markersize=14)
        ax.set_yticks(range(len(runs)), [r.name for r in runs])
        ax.invert_yaxis()
        ax.set_title(name, fontsize=9, loc="left")
        ax.set_xlabel("µs per call")
        ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color="tab:blue"), Patch(color="tab:blue", alpha=0.35),
               Patch(facecolor="0.85", hatch="//", edgecolor="0.5"), Line2D([], [], color="black", ls="", marker="|",
                                                                           markersize=14)]
    fig.legend(handles, ["kernel, best", "kernel, best .. likely", "launch preamble + epilogue", "HBM roofline"],
               loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    fig.suptitle(f"{title}\n{MODELED}", fontsize=10)
    return fig


def parts_table(captures):
    """Markdown: `core_parts` under both estimates, one row per (label, capture) and core."""
    lines = ["| run | estimate | total (µs) | bytes at full rate | DMA below full rate | no DMA moving |",
             "|---|---|---|---|---|---|"]
    for label, capture in captures.items():
        for band in costs.BANDS:
            parts = core_parts(capture, band)
            for core, d in enumerate(parts):
                run = label if len(parts) == 1 else f"{label}, core {core}"
                lines.append(f"| {run} | {band} | {d['total']:.1f} | {d['full_rate']:.1f} | {d['below_rate']:.1f} "
                             f"| {d['no_dma']:.1f} |")
    return "\n".join(lines)


def input_reads(capture):
    """{instruction index: block argument name} of the DMAs that read an argument of a
    single-launch step (its arguments are the block's, in `BLOCK_ARGS` order)."""
    assert sorted(capture.arguments) == list(range(len(BLOCK_ARGS))), \
        f"expected the {len(BLOCK_ARGS)} block arguments, got {sorted(capture.arguments)}"
    name = {capture.arguments[k]: arg for k, arg in enumerate(BLOCK_ARGS)}
    return {i.index: name[a.alloc] for i in capture.instructions if i.engine == "dma" for a in i.reads
            if a.alloc in name}


# --- the tables of the part -----------------------------------------------------------------------

def with_launches(step, model, tp, B):
    """(best, likely) of a step's kernel time plus its launches' preamble and epilogue, µs."""
    r = step_row(step, model, tp, B)
    return r["best_us"] + r["launch_us"], r["modeled_us"] + r["launch_us"]


def launches_table(upto, B=1):
    """Markdown: every step so far at batch B on both target shards, the kernel time (the latency
    table's) beside the time with its launches, and the speedup over step 0 counted both ways."""
    names = [step.name for step in STEPS]
    head, rule = "| step | launches (their cost) |", "|---|---|"
    for m, tp in TARGETS:
        head += f" {m} TP{tp}: kernel | with launches | speedup over step 0, likely |"
        rule += "---|---|---|"
    lines = [head, rule]
    for name in names[:names.index(upto) + 1]:
        row = step_row(name, *TARGETS[0], B)
        cells = [f"{row['launches']} ({row['launch_us']:.0f} µs)"]
        for m, tp in TARGETS:
            r, r0 = step_row(name, m, tp, B), step_row(names[0], m, tp, B)
            best, likely = with_launches(name, m, tp, B)
            cells += [f"{r['best_us']:.0f} – {r['modeled_us']:.0f} µs", f"{best:.0f} – {likely:.0f} µs",
                      f"{r0['modeled_us'] / r['modeled_us']:.2f}x kernel, "
                      f"{with_launches(names[0], m, tp, B)[1] / likely:.2f}x with launches"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
