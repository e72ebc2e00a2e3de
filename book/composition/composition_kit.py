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
from nkicpu.profile import MODELED, capture_slots, core_parts, profile_capture


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
    """Markdown: one row per (label, check_block result), short headers."""
    head = {"out max abs err": "out: max err", "out cosine": "out: cosine",
            "conv new column max abs err": "conv state: max err",
            "state max abs err": "state: max err"}
    keys = list(next(iter(rows.values())))
    lines = ["| run | " + " | ".join(head[k] for k in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for label, r in rows.items():
        cells = [f"{r[k]:.6f}" if "cosine" in k else f"{r[k]:.1e}" for k in keys]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- profiles --------------------------------------------------------------------------------

def launch_table(runs):
    """Markdown: per launch of a step, its band (µs) against its roofline; the launch apart."""
    lines = ["| launch | roofline | best | likely | likely / roofline | launch |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        p = r.profile
        lines.append(f"| {r.name} | {p.roofline_us:.2f} | {p.best_us:.2f} | {p.total_us:.2f} "
                     f"| {p.total_us / p.roofline_us:.1f}x | {p.launch_us:.0f} |")
    best, likely = sum(r.profile.best_us for r in runs), sum(r.profile.total_us for r in runs)
    launch = sum(r.profile.launch_us for r in runs)
    roof = sum(r.profile.roofline_us for r in runs)
    lines.append(f"| **all {len(runs)}** | {roof:.2f} | **{best:.2f}** | **{likely:.2f}** | "
                 f"| **{launch:.0f}** |")
    return "\n".join(lines)


def plot_launches(panels, title):
    """Horizontal bars, one per launch: the kernel time up to best (dark), best .. likely (light),
    then the launch preamble + epilogue (hatched). `panels`: {panel title: [Launch]}."""
    rows = max(len(runs) for runs in panels.values()) * len(panels)
    fig = Figure(figsize=(10, 1.2 + 0.45 * rows), layout="constrained")
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
        ax.set_title(name, fontsize=10, loc="left")
        ax.set_xlabel("µs per call")
        ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color="tab:blue"), Patch(color="tab:blue", alpha=0.35),
               Patch(facecolor="0.85", hatch="//", edgecolor="0.5"),
               Line2D([], [], color="black", ls="", marker="|", markersize=14)]
    labels = ["kernel, best", "kernel, best .. likely", "launch preamble + epilogue",
              "HBM roofline"]
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=10, frameon=False)
    fig.suptitle(f"{title}\n{MODELED}", fontsize=10)
    return fig


def parts_table(captures):
    """Markdown: `core_parts` (µs) under both estimates, one row per (label, capture) and core."""
    lines = ["| run | estimate | total | bytes at full rate | DMA below full rate | no DMA |",
             "|---|---|---|---|---|---|"]
    for label, capture in captures.items():
        for band in costs.BANDS:
            parts = core_parts(capture, band)
            for core, d in enumerate(parts):
                run = label if len(parts) == 1 else f"{label}, core {core}"
                lines.append(f"| {run} | {band} | {d['total']:.1f} | {d['full_rate']:.1f} "
                             f"| {d['below_rate']:.1f} | {d['no_dma']:.1f} |")
    return "\n".join(lines)


def input_reads(capture):
    """{instruction index: block argument name} of the DMAs that read an argument of a
    single-launch step (its arguments are the block's, in `BLOCK_ARGS` order)."""
    assert sorted(capture.arguments) == list(range(len(BLOCK_ARGS))), \
        f"expected the {len(BLOCK_ARGS)} block arguments, got {sorted(capture.arguments)}"
    name = {capture.arguments[k]: arg for k, arg in enumerate(BLOCK_ARGS)}
    return {i.index: name[a.alloc] for i in capture.instructions if i.engine == "dma"
            for a in i.reads if a.alloc in name}


def z_and_state(run):
    """z's weight loads and the new state's stores, as events of a single-launch step's likely
    timeline (`Launch.profile`)."""
    reads, cap = input_reads(run.capture), run.capture
    alloc_names = {a: info.name for a, info in cap.allocations.items()}
    events = run.profile.events[:run.profile.instructions]
    z = [e for e in events if reads.get(e["args"]["index"]) == "W_in_z"]
    stores = [e for e, ins in zip(events, cap.instructions)
              if ins.engine == "dma" and alloc_names.get(ins.writes[0].alloc) == "new_recurrent_state"]
    return z, stores


def z_tail(capture, band):
    """Where the time goes after the recurrence of a single-launch step that projects z after it,
    µs in one band of the cost model: when z's weights have landed ("landed"), when the
    recurrence's last TensorE instruction ends ("recurrence"), z's matmuls' TensorE time
    ("matmuls"), the kernel's end after z's last matmul ("chain"), the total, and the least total
    with z's matmuls after the recurrence's on TensorE ("floor": recurrence + matmuls + chain)."""
    slots = capture_slots(capture, band)
    reads = input_reads(capture)
    loads = [i for i in reads if reads[i] == "W_in_z"]
    tiles = {capture.instructions[i].writes[0].alloc for i in loads}
    matmuls = [ins.index for ins in capture.instructions
               if ins.engine != "dma" and any(a.alloc in tiles for a in ins.reads)]
    lane = slots[matmuls[0]].lane
    t = {"landed": max(slots[i].end_us for i in loads),
         "recurrence": max(s.end_us for s in slots[:matmuls[0]] if s.lane == lane),
         "matmuls": sum(slots[i].end_us - slots[i].start_us for i in matmuls),
         "total": max(s.end_us for s in slots)}
    t["chain"] = t["total"] - max(slots[i].end_us for i in matmuls)
    t["floor"] = t["recurrence"] + t["matmuls"] + t["chain"]
    return t


# --- the tables of the part -----------------------------------------------------------------------

def with_launches(step, model, tp, B):
    """(best, likely) of a step's kernel time plus its launches' preamble and epilogue, µs."""
    r = step_row(step, model, tp, B)
    return r["best_us"] + r["launch_us"], r["modeled_us"] + r["launch_us"]


def launches_table(upto, B=1):
    """Markdown: every step so far at batch B, one table per target shard: its launches, the
    kernel time (the latency table's, likely), the time with the launches, and the speedup over
    step 0 counted both ways."""
    names = [step.name for step in STEPS]
    tables = []
    for m, tp in TARGETS:
        lines = [f"**{m} TP{tp}, B = {B}** (likely, µs)", "",
                 "| step | launches | kernel | + launches | speedup: kernel | speedup: + launches |",
                 "|---|---|---|---|---|---|"]
        r0, w0 = step_row(names[0], m, tp, B), with_launches(names[0], m, tp, B)[1]
        for name in names[:names.index(upto) + 1]:
            r, w = step_row(name, m, tp, B), with_launches(name, m, tp, B)[1]
            lines.append(f"| {name} | {r['launches']} ({r['launch_us']:.0f} µs) | "
                         f"{r['modeled_us']:.0f} | {w:.0f} "
                         f"| {r0['modeled_us'] / r['modeled_us']:.2f}x | {w0 / w:.2f}x |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


# --- exercises: the reader's version of a step, judged ------------------------------------------

def _verdict(got, x, best, likely, launch, against, model, tp, B):
    try:
        check_block(got, x)
        right = "right: matches the reference"
    except AssertionError as e:
        right = f"WRONG: {e}"
    r = step_row(against, model, tp, B)
    was = (r["best_us"], r["modeled_us"], r["launch_us"])
    v = {"right": right.startswith("right"), "best_us": best, "likely_us": likely,
         "launch_us": launch, "was_best_us": was[0], "was_likely_us": was[1],
         "was_launch_us": was[2]}
    print(f"{right}\nmodeled (trn2 cost model), {model_shard(model, tp, B).name}, B = {B}:\n"
          f"  {against}: {was[0]:.1f} – {was[1]:.1f} µs + {was[2]:.0f} µs of launches\n"
          f"  yours: {best:.1f} – {likely:.1f} µs + {launch:.0f} µs of launches "
          f"({likely + launch - was[1] - was[2]:+.1f} µs likely, with launches)")
    return v


def judge(kernel, against, B=1, model=TARGETS[0][0], tp=TARGETS[0][1]):
    """Run a reader's single-launch version of a step (the block's 11 arguments) on the CPU
    model: is it right (check_block), and what does it cost against step `against`?"""
    x = block_inputs(model, tp, B)
    capture = nkicpu.capture(kernel)(*x.values())
    p = profile_capture(capture)
    return _verdict(capture.outputs, x, p.best_us, p.total_us, p.launch_us, against, model, tp, B)


def judge_pipeline(pipeline, against, B=1, model=TARGETS[0][0], tp=TARGETS[0][1]):
    """The same for a host pipeline `pipeline(launch, **block arguments)` that runs each kernel
    as `launch(kernel, *args)`: each launch is captured, profiled and paid for."""
    x = block_inputs(model, tp, B)
    profiles = []

    def launch(kernel, *args):
        capture = nkicpu.capture(kernel)(*args)
        profiles.append(profile_capture(capture))
        return capture.outputs

    got = pipeline(launch, **x)
    return _verdict(got, x, sum(p.best_us for p in profiles), sum(p.total_us for p in profiles),
                    sum(p.launch_us for p in profiles), against, model, tp, B)
