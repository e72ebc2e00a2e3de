"""What the composition chapters share: a step's runs, its code as a diff against the step
before, its timeline with every DMA coloured by what it carries, its check, and the exercises'
judge. The latency tables, the climb and the targets are `benchmarks.steps`'; the analyses of a
capture or profile (`dma_parts`, `core_parts`, ...) are nkicpu's (`nkicpu.profile`).

Each chapter in this folder imports it (a notebook runs with its own folder as the working
directory). The runs use the inputs of the benchmark sweep (`kernels.reference.pipeline_inputs`),
so a chapter's profiles are exactly the rows of its latency table. Every time here is modeled by
the trn2 cost model; none is measured.
"""
import ast
import difflib
import importlib
import inspect
import textwrap
from dataclasses import dataclass, replace
from functools import lru_cache

from IPython.display import Markdown, display
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

import kernels  # noqa: F401  (first: makes `import nki` work)
import nkicpu
from benchmarks.roofline import layer_roofline_us
from benchmarks.steps import BATCHES, TARGETS, latency_table, step_row, steps_upto
from kernels.accuracy import OUTPUT, assert_close
from kernels.configs import model_shard
from kernels.reference import gdn_block_tkg_ref, pipeline_inputs, to_numpy, to_torch, token_inputs
from kernels.registry import (BLOCK_ARGS, BLOCK_DMA_KINDS, BLOCK_OUTPUTS, BY_NAME, LAYER_ARGS,
                              LAYER_DMA_KINDS, POOL_ARGS)
from nkicpu import costs
from nkicpu.profile import MODELED, dma_kinds, profile_capture, split_core
from nkicpu.schedule import dependencies, schedule
from nkicpu.timeline import plot_timeline

MODEL, TP = TARGETS[0]          # Qwen3-Next-80B TP4: the shard this part profiles

# Where each fused step's code lives: its plan and its body ("module:function"; step 5 runs step
# 4's body on its own plan). Step 2 has no plan, but `judge` can replace the stage bodies its
# kernel calls (in_proj_hbm, conv1d_decode_hbm, split_heads_hbm, gdn_tkg_hbm).
STEP_CODE = {
    "2_scratch": (None, "kernels.steps.scratch:gdn_block_tkg_scratch"),
    "3_onchip": ("kernels.steps.onchip:onchip_plan", "kernels.steps.onchip:onchip_body"),
    "4_z_last": ("kernels.steps.z_last:z_last_plan", "kernels.steps.z_last:z_last_body"),
    "5_two_cores": ("kernels.steps.two_cores:two_cores_plan", "kernels.steps.z_last:z_last_body"),
    "6_queues": ("kernels.steps.queues:queues_plan", "kernels.steps.queues:queues_body"),
    "7_ready_first": ("kernels.gdn_block:ready_first_plan", "kernels.gdn_block:gdn_block_body"),
}


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
    at: tuple          # (model, tp, B) of the inputs


@lru_cache(maxsize=None)
def launches(step, B=1, model=MODEL, tp=TP):
    """Every kernel launch of a composition step, run on the CPU model and profiled as the sweep
    profiles them: one for a single-launch step, one per stage kernel for a host pipeline."""
    entry = BY_NAME[step]
    shape, x = model_shard(model, tp, B), shard_inputs(model, tp, B)
    runs = []
    for name in entry.launches or (entry.name,):
        e = BY_NAME[name]
        capture = nkicpu.capture(e.load_kernel())(*e.arguments(shape, x))
        runs.append(Launch(name, capture, profile_capture(capture), (model, tp, B)))
    return tuple(runs)


def run(step, B=1, model=MODEL, tp=TP):
    """The one launch of a single-launch step."""
    return launches(step, B, model, tp)[0]


# --- the code ------------------------------------------------------------------------------------

def _code(fn):
    """A function's body without its signature and docstring, dedented."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    body = tree.body[0].body
    if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines()
    return textwrap.dedent("\n".join(lines[body[0].lineno - 1:body[-1].end_lineno])).splitlines()


def _function(target):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def step_functions(step):
    """(plan function, body function) of a fused step (STEP_CODE)."""
    return [_function(target) for target in STEP_CODE[step]]


def show_diff(before, after):
    """Display step `after`'s plan and body as a diff against step `before`'s: every line of the
    new step, those it adds marked +, those it drops -, the rest as they are."""
    parts = []
    for what, old, new in zip(("plan", "body"), step_functions(before), step_functions(after)):
        if new is old:
            parts.append(f"**The {what}**: `{new.__name__}`, step {BY_NAME[before].step}'s as it is.")
            continue
        a, b = _code(old), _code(new)
        diff = list(difflib.unified_diff(a, b, lineterm="", n=max(len(a), len(b))))[3:]
        parts.append(f"**The {what}**, `{new.__name__}` against `{old.__name__}`:\n\n```diff\n"
                     + "\n".join(diff) + "\n```")
    display(Markdown("\n\n".join(parts)))


# --- profiles ------------------------------------------------------------------------------------

def kinds(launch):
    """{instruction index: what the DMA carries} of a single-launch step or the pool form
    (BLOCK_DMA_KINDS), or of the whole layer (LAYER_DMA_KINDS)."""
    if BY_NAME[launch.name].args == LAYER_ARGS:
        return dma_kinds(launch.capture, LAYER_DMA_KINDS["arguments"], LAYER_DMA_KINDS["outputs"])
    outputs = BLOCK_DMA_KINDS["outputs"]
    if BY_NAME[launch.name].args == POOL_ARGS:
        outputs = BLOCK_DMA_KINDS["pool_outputs"]
    return dma_kinds(launch.capture, BLOCK_DMA_KINDS["arguments"], outputs)


# The pools sit at the argument positions of the block's states: 6 the windows, 10 the states.
POOL_STATE = BLOCK_ARGS.index("recurrent_state")


def timeline(launch, title, marks=(), ax=None):
    """A step's likely timeline, every DMA coloured by what it carries, against the block's
    roofline on the step's cores (the latency tables'), or the whole layer's for the layer, the
    lanes banded core by core where it runs on several; modeled."""
    entry = BY_NAME[launch.name]
    if entry.args in (BLOCK_ARGS, POOL_ARGS) and not entry.launches:
        launch = _with_block_roofline(launch)
    elif entry.args == LAYER_ARGS:
        roofline = layer_roofline_us(model_shard(*launch.at), entry.lnc)
        launch = replace(launch, profile=replace(launch.profile, roofline_us=roofline))
    return _band_cores(plot_timeline(launch.profile, ax=ax, title=title, marks=marks,
                                     dma_kinds=kinds(launch)))


def before_after(before, after, B=1, model=MODEL, tp=TP, marks=((), ())):
    """Two timelines, step `before` over step `after`, on one time axis (`timeline`). `marks`:
    the marks of each."""
    runs = (run(before, B, model, tp), run(after, B, model, tp))
    figs = [timeline(r, f"{name}, {_cores(name)}, {model} TP{tp}, B = {B}", m)
            for r, name, m in zip(runs, (before, after), marks)]
    right = max(r.profile.total_us for r in runs) * 1.01
    for fig in figs:
        fig.axes[0].set_xlim(0, right)
    return figs


def _cores(name):
    n = BY_NAME[name].lnc
    return f"{n} core{'s' * (n > 1)}"


def _with_block_roofline(launch):
    """The launch with its profile's roofline replaced by the block's on the step's cores, the
    one the latency tables divide by (the block's minimal bytes at 368 GB/s per core), instead of
    the kernel's own bytes' (which count a tensor every core reads once per core)."""
    roofline = step_row(launch.name, *launch.at)["block_roofline_us"]
    return replace(launch, profile=replace(launch.profile, roofline_us=roofline))


def _band_cores(fig):
    """Shade the odd cores' lanes of a timeline ("c1 ...") and rule a line where the core
    changes, so that the lanes of an LNC launch read apart core by core; returns the figure."""
    ax = fig.axes[0]
    cores = [split_core(t.get_text())[0] for t in ax.get_yticklabels()]
    for y, core in enumerate(cores):
        if core and int(core[1:]) % 2:
            ax.axhspan(y - 0.5, y + 0.5, color="0.5", alpha=0.1, linewidth=0, zorder=0)
        if y and core != cores[y - 1]:
            ax.axhline(y - 0.5, color="0.3", linewidth=0.8)
    return fig


def without_pool_waits(capture):
    """(best, likely) µs of a pool-form capture rescheduled without the waits nkicpu's rule 2 adds
    for indirect accesses (`dependencies(..., dynamic_waits=False)`): what the form would take if
    the rows of its loads and stores were known when the DMAs are scheduled; every other
    dependency stays."""
    shapes = {a: info.shape for a, info in capture.allocations.items()}
    regions = {a: (i.buffer, i.region) for a, i in capture.allocations.items() if i.region}
    deps = dependencies(capture.instructions, shapes, regions, dynamic_waits=False)
    return tuple(max(s.end_us for s in schedule(capture.instructions, band=band, deps=deps))
                 for band in (costs.BEST, costs.LIKELY))


# --- correctness ---------------------------------------------------------------------------------

def check_block(got, x):
    """Assert a step's (out, conv_state, recurrent_state) against `gdn_block_tkg_ref`, each under
    its accuracy rule (`kernels.accuracy`); return the errors as a table row.

    The conv state's shifted columns must be bit-exact; its new column is the in_proj output,
    which may round to the neighbouring bf16 value when the kernel sums in another order than
    torch, so it is held to the output rule (the largest error is the new column's); with T tokens
    per sequence the last T columns are projections, and the whole window takes the output rule.
    """
    want = [to_numpy(t) for t in gdn_block_tkg_ref(*(to_torch(x[name]) for name in BLOCK_ARGS))]
    rules = [rule for _, rule in BLOCK_OUTPUTS]
    if x["hidden"].shape[1] > 1:       # T tokens: the window's last T columns are projections
        rules[1] = OUTPUT
    out, conv, state = [assert_close(g, w, rule, name)
                        for (name, _), rule, g, w in zip(BLOCK_OUTPUTS, rules, got, want)]
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


def same_bits(a, b):
    """Whether two launches (or captures) returned the same results, bit for bit."""
    outputs = [getattr(r, "capture", r).outputs for r in (a, b)]
    return all((x.view("uint8") == y.view("uint8")).all() for x, y in zip(*outputs))


# --- tables --------------------------------------------------------------------------------------

def show_latency(step, previous):
    """This step's rows and the previous step's at the target points, then every step so far in
    a dropdown (benchmarks.steps.latency_table); modeled."""
    new = [e.name for e in steps_upto(step) if e.step == BY_NAME[step].step]
    old = [e.name for e in steps_upto(previous) if e.step == BY_NAME[previous].step]
    display(Markdown(latency_table(old + new)))
    display(Markdown(":::{dropdown} Every step so far\n" + latency_table(
        [e.name for e in steps_upto(step)]) + "\n:::"))


def with_launches(step, model=MODEL, tp=TP, B=1):
    """(best, likely) of a step's kernel time plus its launches' preamble and epilogue, µs."""
    r = step_row(step, model, tp, B)
    return r["best_us"] + r["launch_us"], r["modeled_us"] + r["launch_us"]


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


# --- exercises: the reader's change, judged ------------------------------------------------------

def judge(step, B=1, lnc=None, model=MODEL, tp=TP, T=1, **phases):
    """Run step `step` with some of its phases replaced by the reader's (`phases`: the names its
    plan's or body's module calls them by, e.g. `continue_z=my_continue_z`): is it still right
    (check_block), and what does it cost against the step as it is? On the entry's cores unless
    `lnc` says; T tokens per sequence (the shipped kernel's hidden [B, T, H]) if T > 1."""
    entry = BY_NAME[step]
    modules = [importlib.import_module(t.partition(":")[0]) for t in STEP_CODE[step] if t]
    saved = []                                   # (module, name, its own function)
    for name in phases:
        where = [m for m in modules if name in vars(m)]
        assert where, f"{step}'s plan and body call no function named {name}"
        saved += [(m, name, vars(m)[name]) for m in where]
    x = block_inputs(model, tp, B)
    if T > 1:
        x = token_inputs(model_shard(model, tp, B), T)
    cores = lnc or entry.lnc
    kernel = replace(entry, lnc=cores).load_kernel()
    try:
        for m, name, _ in saved:
            setattr(m, name, phases[name])
        capture = nkicpu.capture(kernel)(*x.values())
    finally:
        for m, name, fn in saved:
            setattr(m, name, fn)
    p = profile_capture(capture)
    was = profile_capture(nkicpu.capture(kernel)(*x.values())) if phases else p
    try:
        check_block(capture.outputs, x)
        right = "right: matches the reference"
    except AssertionError as e:
        right = f"WRONG: {e}"
    print(f"{right}\nmodeled (trn2 cost model), {model} TP{tp}, B = {B}, T = {T}, "
          f"{cores} core(s):\n"
          f"  {step} as it is: {was.best_us:.1f} – {was.total_us:.1f} µs\n"
          f"  yours:           {p.best_us:.1f} – {p.total_us:.1f} µs "
          f"({p.total_us - was.total_us:+.1f} µs likely, {p.best_us - was.best_us:+.1f} best)")
    return {"right": right.startswith("right"), "best_us": p.best_us, "likely_us": p.total_us,
            "was_best_us": was.best_us, "was_likely_us": was.total_us, "capture": capture}


def judge_pipeline(pipeline, against, B=1, model=MODEL, tp=TP):
    """A host pipeline `pipeline(launch, **block arguments)` that runs each kernel as
    `launch(kernel, *args)`: each launch is captured, profiled and paid for; is the result right,
    and what does it cost against step `against`?"""
    x = block_inputs(model, tp, B)
    profiles = []

    def launch(kernel, *args):
        capture = nkicpu.capture(kernel)(*args)
        profiles.append(profile_capture(capture))
        return capture.outputs

    got = pipeline(launch, **x)
    try:
        check_block(got, x)
        right = "right: matches the reference"
    except AssertionError as e:
        right = f"WRONG: {e}"
    best, likely = sum(p.best_us for p in profiles), sum(p.total_us for p in profiles)
    launch_us = sum(p.launch_us for p in profiles)
    r = step_row(against, model, tp, B)
    print(f"{right}\nmodeled (trn2 cost model), {model} TP{tp}, B = {B}:\n"
          f"  {against}: {r['best_us']:.1f} – {r['modeled_us']:.1f} µs + {r['launch_us']:.0f} µs "
          f"of launches\n  yours: {best:.1f} – {likely:.1f} µs + {launch_us:.0f} µs of launches "
          f"({likely + launch_us - r['modeled_us'] - r['launch_us']:+.1f} µs likely, with "
          "launches)")
    return {"right": right.startswith("right"), "best_us": best, "likely_us": likely,
            "launch_us": launch_us, "was_best_us": r["best_us"], "was_likely_us": r["modeled_us"],
            "was_launch_us": r["launch_us"]}
