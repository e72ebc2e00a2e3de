"""Sweep the GDN decode kernels over real per-device configurations and batch sizes.

    python -m benchmarks.sweep                      # the full sweep (about 12 minutes on 2 cores)
    python -m benchmarks.sweep --quick              # one small shard, B = 1 and 8, T = 1 and 2
    python -m benchmarks.sweep --stages in_proj,gated_delta_rule --configs Qwen3-Next-80B-TP4 --batches 1,64
    python -m benchmarks.sweep --stages 7_ready_first,verify --configs Qwen3-Next-80B-TP4 --batches 1 --tokens 1,2,4,8

For every configuration (`kernels.configs.SWEEP_SHARDS`: Qwen3-Next-80B TP1 and TP4, Qwen3.5-0.8B
TP1, 9B TP2, 27B TP8, 397B-A17B TP16), batch (`SWEEP_BATCHES`: 1, 8, 32, 64) and kernel variant
(`kernels.registry.ENTRIES`: the five stages, gdn_tkg, the composition steps, steps 6 and 7 also on
two cores, the verify form, the pool form on one core and two, on pools of B * T slots, and the
whole layer, gdn_layer_tkg, on one core and two)
it runs the kernel on the CPU model, with the inputs `kernels.reference.pipeline_inputs` draws,
schedules its instruction record with the trn2 cost model (`nkicpu.profile`) and records one row:
the shape, the modeled time as a band (best: documented peak figures; likely: calibrated against
public trn2 measurements, `modeled_us`), the standalone launch overhead apart, HBM bytes, the HBM
roofline of those bytes, for a whole block (a composition step, the verify form) also the roofline
of the block's minimal bytes on its cores and the likely estimate's floor under them
(`benchmarks.roofline`), busy fraction per engine, the instruction count, and the host wall time
the CPU model took.

The entries that take several tokens per sequence (`max_tokens` in the registry: the fused
kernel, step 7, on one core and two, its verify form, its pool form and the layer) also run with hidden [B, T, H] for every
T > 1 of --tokens (`SWEEP_TOKENS`: 2, 4, 8, at `SWEEP_TOKEN_BATCHES`: B = 1 and 8, or at
--batches when given), on
`kernels.reference.token_inputs`. Every row says its T and its modeled time per token,
modeled_us / (B x T); a T > 1 row also its modeled time over the same variant's T = 1 row (T
single-token launches take T times that).

Every time in the output is MODELED (trn2 cost model), never measured on hardware. The one wall
time, `cpu_model_wall_s`, is how long this machine took to run the CPU model (functional run +
scheduling); it says nothing about Trainium.

Writes, in --out (default benchmarks/results/, git-ignored):
    sweep.json   {"metadata": {...}, "rows": [one record per (config, B, T, variant)]}; rewritten
                 after every row, so an interrupted sweep leaves the rows it finished
    sweep.png    the T = 1 rows: modeled band (best .. likely) vs B per variant (log-log), the HBM
                 roofline dashed
    sweep_tokens.png  when there are T > 1 rows: modeled time per token vs T, a panel per config,
                 a line per (variant, B)

A row that fails is recorded with its error (status "error") and the sweep goes on; the exit
status is 1 if any row failed. The sweep always uses nkicpu (the cost model needs its instruction
record): run as a script it sets NKICPU=1 unless the environment already says otherwise.
"""
import argparse
import datetime
import gc
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

if __name__ == "__main__":
    os.environ.setdefault("NKICPU", "1")  # before `kernels` is imported: the cost model runs on nkicpu

import kernels  # noqa: E402  (registers nkicpu as `nki`)
import nkicpu  # noqa: E402
from kernels.configs import (MODELS, SWEEP_BATCHES, SWEEP_SHARDS, SWEEP_TOKEN_BATCHES,  # noqa: E402
                             SWEEP_TOKENS, model_shard)
from nkicpu import costs  # noqa: E402
from nkicpu.profile import MODELED, profile_capture  # noqa: E402

from kernels.reference import pipeline_inputs, token_inputs  # noqa: E402
from kernels.registry import (BLOCK_ARGS, BY_NAME, LAYER_ARGS, POOL_ARGS, POOL_OUTPUTS, RENAMED,  # noqa: E402
                              VERIFY_OUTPUTS)

from .roofline import block_min_bytes, layer_min_bytes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results"
JSON_NAME, PLOT_NAME, TOKENS_PLOT_NAME = "sweep.json", "sweep.png", "sweep_tokens.png"
QUICK_CONFIG, QUICK_BATCHES, QUICK_TOKENS = "Qwen3.5-397B-A17B-TP16", (1, 8), (1, 2)

COST_MODEL_SOURCE = (
    "nkicpu/costs.py TABLE: documented trn2 NeuronCore-v3 numbers (Neuron documentation) "
    "and public trn2 measurements ('measured:'), each constant with "
    "its source, the estimate it belongs to (best, likely, both, launch) and where measurements "
    "disagree; rows marked 'estimate:' are reasoned where both are silent. Scheduling: "
    "nkicpu/schedule.py (in-order engine and DMA queues, dependencies from overlapping memory "
    "regions, DMA sharing each core's bandwidth), run once per estimate.")

# What each row field means; copied into the JSON so that no figure can be mistaken for another.
FIELDS = {
    "variant": "kernel variant (kernels.registry): a stage, gdn_tkg, a composition step "
               "'<n>_<name>' (with '_lnc2': on two NeuronCores), or 'verify' (step 7 keeping every "
               "token's window and state); metadata.renamed maps the keys of the ladder before the "
               "rebuild around one idea per step to these",
    "kind": "'stage' or 'composition'",
    "kernel": "module:function of the @nki.jit entry point (of the host function for a multi-launch step)",
    "lnc": "NeuronCores of one launch (kernel[lnc]); the roofline is over all of them",
    "launches": "kernel launches the variant takes: 1, or the stage kernels a host pipeline runs one after "
                "another (their modeled times, bytes and instructions are summed; launch_us counts each)",
    "config": "per-device configuration, '<model> TP<tp>'",
    "model": "model name (kernels.configs.MODELS)",
    "tp": "tensor-parallel degree the heads are split by",
    "B, H, nk, nv, dk, dv, K": "GDNShape: batch, hidden size, key heads, value heads, head dims, conv window",
    "T": "tokens per sequence in the launch, hidden [B, T, H]: 1, or for a variant that takes several "
         "(kernels.registry max_tokens) each of --tokens",
    "G, conv_dim, value_dim": "derived: nv/nk, 2*nk*dk + nv*dv, nv*dv",
    "label": "always 'modeled (trn2 cost model)': no time here is measured on hardware",
    "status": "'ok' or 'error' (then the figures are null and `error` says why)",
    "modeled_us": "modeled kernel time, the LIKELY estimate (calibrated against public trn2 measurements), "
                  "microseconds (trn2 cost model)",
    "best_us": "modeled kernel time, the BEST estimate (documented peak figures), microseconds; "
               "roofline_us <= best_us <= modeled_us",
    "modeled_us_per_token": "modeled_us / (B x T): the likely time per token, microseconds (trn2 cost model)",
    "modeled_over_T1": "a T > 1 row: modeled_us over the same variant's T = 1 row at this config and B; the "
                       "same B x T tokens as T single-token launches take T times that row, so per token "
                       "this launch costs modeled_over_T1 / T of them; null at T = 1 or without an ok "
                       "T = 1 row",
    "launch_us": "modeled standalone launch preamble + epilogue, microseconds, times the launches; not in "
                 "modeled_us or best_us",
    "roofline_us": "HBM roofline of the kernel's own bytes: (read + written) / (lnc x HBM_ROOFLINE_GBPS), "
                   "microseconds; a kernel that reads a byte twice raises it",
    "modeled_over_roofline": "modeled_us / roofline_us (>= 1; large means latency or engine bound)",
    "block_min_bytes": "a whole block's row (a composition step, verify): the block's minimal HBM bytes at "
                       "this shape and T, every input, weight and state byte read once and every "
                       "result byte written once (the verify form: T windows and states) "
                       "(benchmarks.roofline.block_min_bytes); a layer row (gdn_layer_tkg): the whole "
                       "layer's, its input norm weight and W_out in, its partial sum out, the block's "
                       "output rows on chip (benchmarks.roofline.layer_min_bytes); null for a stage "
                       "and gdn_tkg",
    "block_roofline_us": "block_min_bytes / (lnc x HBM_ROOFLINE_GBPS), microseconds: the HBM roofline of the "
                         "block on the step's cores, the one its ratios are judged against; "
                         "block_roofline_us <= roofline_us and <= best_us",
    "block_floor_us": "block_min_bytes / (lnc x DMA_ACHIEVED_GBPS), microseconds: the least likely time, the "
                      "likely estimate's DMA rate on the block's bytes; block_floor_us <= modeled_us",
    "best_over_block_roofline": "best_us / block_roofline_us (>= 1)",
    "modeled_over_block_roofline": "modeled_us / block_roofline_us (>= 1): kernel waste times the likely "
                                   "estimate's fixed DMA haircut, HBM_ROOFLINE_GBPS / DMA_ACHIEVED_GBPS",
    "modeled_over_block_floor": "modeled_us / block_floor_us (>= 1): the kernel waste alone, likely estimate",
    "hbm_over_block_min": "(hbm_read_bytes + hbm_write_bytes) / block_min_bytes (>= 1): the bytes a step moves "
                          "beyond the block's, e.g. weights read on both cores or activations through HBM",
    "hbm_read_bytes, hbm_write_bytes": "HBM bytes the kernel's DMAs read and write",
    "busy_fraction": "per engine lane / DMA queue: modeled fraction of modeled_us it is busy",
    "busiest_lane": "the lane with the largest busy fraction",
    "instructions": "instructions in the CPU model's record (DMAs included)",
    "peak_sbuf_bytes, peak_psum_banks": "peak on-chip allocation per partition in the CPU model",
    "cpu_model_wall_s": "host wall time, seconds (time.perf_counter) to run the CPU model + schedule; "
                        "says nothing about Trainium",
    "cpu_model_run_s, cpu_model_schedule_s": "the two parts of cpu_model_wall_s",
    "error": "null, or {type, message, traceback} of a failed row",
}
SHAPE_FIELDS = ("B", "H", "nk", "nv", "dk", "dv", "K")


# --- choosing what to run ---------------------------------------------------------------------

def _norm(name):
    return re.sub(r"[\s:_]+", "-", name.strip()).lower()


def config_id(shape):
    """'Qwen3-Next-80B TP4' -> 'Qwen3-Next-80B-TP4', the spelling --configs takes."""
    return shape.name.replace(" ", "-")


def parse_config(name):
    """A per-device shape from '<model>-TP<tp>' (case, spaces, ':' and '_' are forgiven), B = 1."""
    m = re.fullmatch(r"(.+)-tp(\d+)", _norm(name))
    models = {_norm(model): model for model in MODELS}
    if not m or m.group(1) not in models:
        raise ValueError(f"--configs: expected '<model>-TP<tp>' with a model among {list(MODELS)} "
                         f"(e.g. {config_id(SWEEP_SHARDS[1])}), got {name!r}")
    return model_shard(models[m.group(1)], int(m.group(2)))


def _csv(text):
    return [item for item in (t.strip() for t in text.split(",")) if item]


def batch_sizes(text):
    """'1,8,64' -> [1, 8, 64]; argparse names this function in its message for a bad value."""
    return [int(b) for b in _csv(text)]


def token_counts(text):
    """'1,2,4,8' -> [1, 2, 4, 8]; argparse names this function in its message for a bad value."""
    return [int(t) for t in _csv(text)]


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep",
        description="Profile the GDN decode kernels over real per-device configurations and batch "
                    "sizes with the trn2 cost model (every time is modeled, not measured).")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"output directory for {JSON_NAME} and {PLOT_NAME} (default: benchmarks/results/)")
    p.add_argument("--stages", type=_csv, default=None,
                   help=f"comma-separated variants (default: all of {', '.join(BY_NAME)})")
    p.add_argument("--configs", type=_csv, default=None,
                   help="comma-separated '<model>-TP<tp>' (default: kernels.configs.SWEEP_SHARDS: "
                        f"{', '.join(config_id(s) for s in SWEEP_SHARDS)})")
    p.add_argument("--batches", type=batch_sizes, default=None,
                   help=f"comma-separated batch sizes (default: {','.join(map(str, SWEEP_BATCHES))})")
    p.add_argument("--tokens", type=token_counts, default=None,
                   help=f"comma-separated tokens per sequence; T > 1 runs only the variants that "
                        f"take tokens (default: {','.join(map(str, SWEEP_TOKENS))}, T > 1 at "
                        f"B = {','.join(map(str, SWEEP_TOKEN_BATCHES))} or at --batches when given)")
    p.add_argument("--quick", action="store_true",
                   help=f"a tiny subset: {QUICK_CONFIG} at B = {','.join(map(str, QUICK_BATCHES))}, "
                        f"T = {','.join(map(str, QUICK_TOKENS))} "
                        "(--configs / --batches / --tokens / --stages still override)")
    args = p.parse_args(argv)

    stages = args.stages or list(BY_NAME)
    unknown = [s for s in stages if s not in BY_NAME]
    if unknown:
        p.error(f"--stages: expected names among {list(BY_NAME)}, got {unknown}")
    args.variants = [BY_NAME[s] for s in stages]

    configs = args.configs or ([QUICK_CONFIG] if args.quick else None)
    try:
        args.shapes = [parse_config(c) for c in configs] if configs else list(SWEEP_SHARDS)
    except ValueError as e:
        p.error(str(e))
    # explicit (or --quick) batches hold for every T; by default T > 1 runs at fewer batches
    default_batches = QUICK_BATCHES if args.quick else None
    args.token_batches = list(args.batches or default_batches or SWEEP_TOKEN_BATCHES)
    args.batches = args.batches or list(default_batches or SWEEP_BATCHES)
    if any(b < 1 for b in args.batches):
        p.error(f"--batches: expected positive integers, got {args.batches}")
    args.tokens = args.tokens or list(QUICK_TOKENS if args.quick else SWEEP_TOKENS)
    most = max(e.max_tokens for e in BY_NAME.values())
    if any(not 1 <= t <= most for t in args.tokens):
        p.error(f"--tokens: expected integers in 1..{most}, got {args.tokens}")
    return args


def plan(args):
    """[(shape at its batch, T, variants)] in run order: every config and batch at T = 1 with every
    variant, and at each T > 1 of args.tokens (at args.token_batches) with the variants that
    take T tokens."""
    runs = []
    for shape in args.shapes:
        for B in dict.fromkeys(args.batches + args.token_batches):
            for T in args.tokens:
                if B not in (args.batches if T == 1 else args.token_batches):
                    continue
                variants = [v for v in args.variants if v.max_tokens >= T]
                if variants:
                    runs.append((shape.with_batch(B), T, variants))
    return runs


# --- one row ----------------------------------------------------------------------------------

def _row_base(variant, shape, T):
    model, tp = shape.name.rsplit(" TP", 1)
    row = {"variant": variant.name, "kind": variant.kind, "kernel": variant.kernel,
           "launches": len(variant.launches) or 1, "lnc": variant.lnc, "config": shape.name, "model": model, "tp": int(tp)}
    row.update({f: getattr(shape, f) for f in SHAPE_FIELDS})
    row.update(T=T, G=shape.G, conv_dim=shape.conv_dim, value_dim=shape.value_dim, label=MODELED)
    verify = variant.outputs in (VERIFY_OUTPUTS, POOL_OUTPUTS)     # every token's checkpoint
    least = None
    if variant.args in (BLOCK_ARGS, POOL_ARGS):
        least = block_min_bytes(shape, T, verify)
    elif variant.args == LAYER_ARGS:
        least = layer_min_bytes(shape, T)
    row.update(block_min_bytes=least,
               block_roofline_us=None if least is None else costs.roofline_us(least, variant.lnc),
               block_floor_us=None if least is None else costs.roofline_us(
                   least, variant.lnc, costs.DMA_ACHIEVED_GBPS))
    return row


def _error(exc):
    return {"type": type(exc).__name__, "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])}


def failed_row(variant, shape, exc, wall_s=None, T=1):
    row = _row_base(variant, shape, T)
    row.update(status="error", modeled_us=None, modeled_us_per_token=None, modeled_over_T1=None,
               best_us=None, launch_us=None, roofline_us=None,
               modeled_over_roofline=None, best_over_block_roofline=None,
               modeled_over_block_roofline=None, modeled_over_block_floor=None, hbm_over_block_min=None,
               hbm_read_bytes=None, hbm_write_bytes=None, busy_fraction=None, busiest_lane=None,
               instructions=None, peak_sbuf_bytes=None, peak_psum_banks=None,
               cpu_model_wall_s=wall_s, cpu_model_run_s=None, cpu_model_schedule_s=None,
               error=_error(exc))
    return row


def _profile(variant, shape, inputs):
    """(Profile, Capture, run seconds, schedule seconds) of one kernel launch."""
    kernel = variant.load_kernel()
    args = variant.arguments(shape, inputs)
    t0 = time.perf_counter()
    capture = nkicpu.capture(kernel)(*args)
    t1 = time.perf_counter()
    prof = profile_capture(capture)
    return prof, capture, t1 - t0, time.perf_counter() - t1


def run_row(variant, shape, inputs):
    """Profile `variant` at `shape` on `inputs` (from `kernels.reference.pipeline_inputs`, or
    `token_inputs` for T tokens per sequence); one JSON-ready record.

    A host pipeline (variant.launches) is its launches back to back: their modeled times, bytes and
    instructions add up, each lane's busy fraction is weighted by the launches' times, and launch_us
    counts every launch.
    """
    T = inputs["hidden"].shape[1]
    t0 = time.perf_counter()
    try:
        parts = [_profile(BY_NAME[name], shape, inputs)
                 for name in variant.launches or (variant.name,)]
    except Exception as exc:  # recorded in the JSON; the sweep goes on
        return failed_row(variant, shape, exc, wall_s=time.perf_counter() - t0, T=T)
    profs = [p for p, _, _, _ in parts]
    total = sum(p.total_us for p in profs)
    busy = {}
    for p in profs:
        for lane, frac in p.busy.items():
            busy[lane] = busy.get(lane, 0.0) + frac * p.total_us / total
    busy = {lane: round(frac, 6) for lane, frac in busy.items()}
    roofline = sum(p.roofline_us for p in profs)
    run_s, schedule_s = sum(r for _, _, r, _ in parts), sum(s for _, _, _, s in parts)
    row = _row_base(variant, shape, T)
    row.update(
        label=profs[0].label, status="ok", launches=len(profs),
        modeled_us=total, modeled_us_per_token=total / (shape.B * T), modeled_over_T1=None,
        best_us=sum(p.best_us for p in profs), launch_us=sum(p.launch_us for p in profs),
        roofline_us=roofline, modeled_over_roofline=total / roofline if roofline else None,
        hbm_read_bytes=sum(p.hbm_read_bytes for p in profs), hbm_write_bytes=sum(p.hbm_write_bytes for p in profs),
        busy_fraction=busy, busiest_lane=max(busy, key=busy.get) if busy else None,
        instructions=sum(p.instructions for p in profs),
        peak_sbuf_bytes=max(c.peak_sbuf_bytes for _, c, _, _ in parts),
        peak_psum_banks=max(c.peak_psum_banks for _, c, _, _ in parts),
        cpu_model_wall_s=run_s + schedule_s, cpu_model_run_s=run_s, cpu_model_schedule_s=schedule_s,
        error=None)
    if row["block_min_bytes"] is not None:
        row.update(best_over_block_roofline=row["best_us"] / row["block_roofline_us"],
                   modeled_over_block_roofline=total / row["block_roofline_us"],
                   modeled_over_block_floor=total / row["block_floor_us"],
                   hbm_over_block_min=(row["hbm_read_bytes"] + row["hbm_write_bytes"]) / row["block_min_bytes"])
    else:
        row.update(best_over_block_roofline=None, modeled_over_block_roofline=None,
                   modeled_over_block_floor=None, hbm_over_block_min=None)
    return row


# --- output -----------------------------------------------------------------------------------

def _git(*args):
    try:
        r = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def metadata(argv, args):
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain") if commit else None
    return {
        "label": MODELED,
        "note": "All kernel times are modeled by the trn2 cost model from the CPU model's instruction "
                "record; none is measured on Trainium. cpu_model_wall_s is this host's time to run "
                "the CPU model.",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": commit,
        "git_dirty": bool(status) if status is not None else None,
        "command": " ".join(["python -m benchmarks.sweep", *argv]),
        "nki_backend": kernels.NKI_BACKEND,
        "cost_model": {
            "source": COST_MODEL_SOURCE,
            "hbm_roofline_gbps": costs.HBM_ROOFLINE_GBPS,
            "dma_achieved_gbps": costs.DMA_ACHIEVED_GBPS,
            "constants": [{"name": c.name, "value": c.value, "unit": c.unit, "source": c.source,
                           "band": c.band, "disagreement": c.disagreement} for c in costs.TABLE],
        },
        "host": {"python": platform.python_version(), "platform": platform.platform(),
                 "cpu_count": os.cpu_count()},
        "configs": [config_id(s) for s in args.shapes],
        "batches": list(args.batches),
        "tokens": list(args.tokens),
        "token_batches": list(args.token_batches),
        "variants": [v.name for v in args.variants],
        "renamed": RENAMED,
        "fields": FIELDS,
    }


def write_json(path, meta, rows):
    """Write atomically (temp file + rename), so a reader never sees half a file."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"metadata": meta, "rows": rows}, indent=1) + "\n")
    os.replace(tmp, path)


def plot(rows, path):
    """One log-log panel per variant: the modeled band vs B per config (shaded from best to likely,
    likely solid), its HBM roofline dashed, a whole block's roofline dotted. The T = 1 rows only:
    the T > 1 rows are `plot_tokens`'s."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing global
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = [r for r in rows if r["T"] == 1]
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    configs = list(dict.fromkeys(r["config"] for r in rows))
    batches = sorted({r["B"] for r in rows})
    ncols = min(3, len(variants))
    nrows = -(-len(variants) // ncols)
    fig = Figure(figsize=(5.2 * ncols, 4.2 * nrows + (0 if nrows * ncols > len(variants) else 1.0)),
                 layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    colors = {c: f"C{i}" for i, c in enumerate(configs)}
    for ax, variant in zip(axes, variants):
        for config in configs:
            ok = sorted((r for r in rows if r["variant"] == variant and r["config"] == config
                         and r["status"] == "ok"), key=lambda r: r["B"])
            if not ok:
                continue
            bs = [r["B"] for r in ok]
            ax.fill_between(bs, [r["best_us"] for r in ok], [r["modeled_us"] for r in ok], color=colors[config],
                            alpha=0.2, linewidth=0)
            ax.plot(bs, [r["modeled_us"] for r in ok], "o-", color=colors[config], label=config)
            ax.plot(bs, [r["roofline_us"] for r in ok], "--", color=colors[config], alpha=0.7)
            if ok[0]["block_roofline_us"] is not None:
                ax.plot(bs, [r["block_roofline_us"] for r in ok], ":", color=colors[config], alpha=0.7)
        failed = [r for r in rows if r["variant"] == variant and r["status"] != "ok"]
        title = variant + (f"  ({len(failed)} failed rows)" if failed else "")
        ax.set_title(title)
        _log_axes(ax, batches, "batch B", "µs per call, modeled (trn2 cost model)")
    for ax in axes[len(variants):]:
        ax.axis("off")
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [Line2D([], [], color="gray", ls="-", marker="o"), Patch(color="gray", alpha=0.2),
                Line2D([], [], color="gray", ls="--"), Line2D([], [], color="gray", ls=":")]
    labels += ["likely time (solid)", "band: best .. likely (shaded)", "HBM roofline, same bytes (dashed)",
               "HBM roofline, the block's minimal bytes (dotted)"]
    if len(axes) > len(variants):  # a spare panel holds the legend
        axes[len(variants)].legend(handles, labels, loc="center", frameon=False, title="per-device config")
    else:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), frameon=False)
    fig.suptitle("GDN decode kernels, one layer per device: time vs batch as a band (best .. likely), "
                 "modeled (trn2 cost model); "
                 f"HBM roofline at {costs.HBM_ROOFLINE_GBPS:g} GB/s per NeuronCore")
    fig.savefig(path, dpi=110)


def _log_axes(ax, xs, xlabel, ylabel):
    """A log-log panel (x in powers of 2) with a tick at each of xs and a major grid."""
    from matplotlib.ticker import NullLocator
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def plot_tokens(rows, path):
    """One log-log panel per config that ran at T > 1: the modeled time per token
    (modeled_us / (B x T)) vs T, a line per (variant, B) that ran at T > 1 (colour: B; a dash
    pattern per variant), shaded from best to likely; a flat line would cost as
    much per token as T single-token launches."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullLocator

    ran = list(dict.fromkeys((r["config"], r["variant"], r["B"]) for r in rows if r["T"] > 1))
    configs = list(dict.fromkeys(c for c, _, _ in ran))
    variants = list(dict.fromkeys(v for _, v, _ in ran))
    colors = {B: f"C{i}" for i, B in enumerate(sorted({B for _, _, B in ran}))}
    dashes = ("-", "--", "-.", ":", (0, (6, 2, 1, 2, 1, 2)))
    styles = {v: dashes[i % len(dashes)] for i, v in enumerate(variants)}
    ncols = min(3, len(configs))
    nrows = -(-len(configs) // ncols)
    fig = Figure(figsize=(max(5.2 * ncols, 7.0), 4.0 * nrows + 0.8), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, config in zip(axes, configs):
        tokens = set()
        for _, variant, B in (k for k in ran if k[0] == config):
            ok = sorted((r for r in rows if (r["config"], r["variant"], r["B"]) == (config, variant, B)
                         and r["status"] == "ok"), key=lambda r: r["T"])
            ts = [r["T"] for r in ok]
            tokens.update(ts)
            ax.fill_between(ts, [r["best_us"] / (r["B"] * r["T"]) for r in ok],
                            [r["modeled_us_per_token"] for r in ok], color=colors[B], alpha=0.12, linewidth=0)
            ax.plot(ts, [r["modeled_us_per_token"] for r in ok], marker="o", ls=styles[variant], color=colors[B])
        ax.set_title(config)
        _log_axes(ax, sorted(tokens), "tokens per sequence T", "µs per token, modeled (trn2 cost model)")
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_locator(NullLocator())
    for ax in axes[len(configs):]:
        ax.axis("off")
    handles = [Line2D([], [], color=c, marker="o") for c in colors.values()]
    handles += [Line2D([], [], color="gray", ls=styles[v]) for v in variants]
    labels = [f"B = {B}" for B in colors] + list(variants)
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False)
    fig.suptitle("T tokens per sequence in one launch: time per token,\n"
                 "likely (line) and best .. likely (shaded), modeled (trn2 cost model)")
    fig.savefig(path, dpi=110)


# --- the sweep --------------------------------------------------------------------------------

HEADER = (f"{'config':<24}{'B':>4}{'T':>3}  {'variant':<18}{'best_us':>9}{'modeled_us':>11}{'roofline_us':>12}{'ratio':>8}"
          f"{'block':>8}"
          f"{'instr':>7}  {'busiest lane':<20}{'cpu_model_s':>11}")


def over_single_tokens(row, rows):
    """Set a T > 1 row's modeled_over_T1 from the same variant's ok T = 1 row at its config and B
    among `rows`, if there is one."""
    key = (row["variant"], row["config"], row["B"])
    single = [r for r in rows if (r["variant"], r["config"], r["B"]) == key and r["T"] == 1]
    if row["T"] > 1 and row["status"] == "ok" and single and single[0]["status"] == "ok":
        row["modeled_over_T1"] = row["modeled_us"] / single[0]["modeled_us"]


def token_table(rows):
    """The rows of each (variant, config, B) that ran at T > 1, per token: the likely time, per
    token, over the T = 1 launch and over T single-token launches (all modeled)."""
    ran = {(r["variant"], r["config"], r["B"]) for r in rows if r["T"] > 1}
    lines = [f"per token, {MODELED}:",
             f"{'config':<24}{'B':>4}  {'variant':<16}{'T':>3}{'modeled_us':>11}{'us/token':>10}"
             f"{'x T=1':>8}{'x T launches':>14}"]
    for r in sorted(rows, key=lambda r: (r["config"], r["B"], r["variant"], r["T"])):
        if (r["variant"], r["config"], r["B"]) in ran and r["status"] == "ok":
            over = r["modeled_over_T1"]
            ratios = (f"{over:.2f}", f"{over / r['T']:.2f}") if over else ("-", "-")
            lines.append(f"{r['config']:<24}{r['B']:>4}  {r['variant']:<16}{r['T']:>3}{r['modeled_us']:11.2f}"
                         f"{r['modeled_us_per_token']:10.2f}{ratios[0]:>8}{ratios[1]:>14}")
    return "\n".join(lines)


def _line(row):
    if row["status"] != "ok":
        wall = row["cpu_model_wall_s"]
        return f"FAILED {row['error']['type']}: {row['error']['message'][:90]}" + (
            f"  ({wall:.1f} s)" if wall is not None else "")
    ratio = row["modeled_over_roofline"]
    block = row["modeled_over_block_roofline"]
    lane = row["busiest_lane"]
    busiest = f"{lane} {row['busy_fraction'][lane]:.0%}" if lane else "-"
    return (f"{row['best_us']:9.2f}{row['modeled_us']:11.2f}{row['roofline_us']:12.2f}"
            f"{(f'{ratio:.1f}x' if ratio else '-'):>8}{(f'{block:.1f}x' if block else '-'):>8}"
            f"{row['instructions']:7d}  {busiest:<20}"
            f"{row['cpu_model_wall_s']:11.2f}")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if kernels.NKI_BACKEND != "nkicpu":
        print(f"benchmarks.sweep: the cost model needs nkicpu, but `nki` is {kernels.NKI_BACKEND}; "
              "run with NKICPU=1", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / JSON_NAME, args.out / PLOT_NAME
    meta = metadata(argv, args)
    rows, runs = [], plan(args)
    start = time.perf_counter()
    print(f"GDN decode sweep, {MODELED}: {len(args.shapes)} configs x {len(args.batches)} batches x "
          f"{len(args.variants)} variants, T > 1 for {sum(len(v) for _, T, v in runs if T > 1)} "
          f"more rows -> {json_path}")
    print(HEADER, flush=True)
    for s, T, variants in runs:
        try:
            inputs = pipeline_inputs(s) if T == 1 else token_inputs(s, T)
            input_error = None
        except Exception as exc:  # every row of this (config, B, T) fails with it
            inputs, input_error = None, exc
        for variant in variants:
            print(f"{s.name:<24}{s.B:>4}{T:>3}  {variant.name:<18}", end="", flush=True)
            row = (failed_row(variant, s, input_error, T=T) if input_error is not None
                   else run_row(variant, s, inputs))
            over_single_tokens(row, rows)
            print(_line(row), flush=True)
            rows.append(row)
            write_json(json_path, {**meta, "complete": False}, rows)
        del inputs
        gc.collect()

    failed = [r for r in rows if r["status"] != "ok"]
    total = time.perf_counter() - start
    meta.update(complete=True, total_wall_s=total, rows_total=len(rows), rows_failed=len(failed))
    write_json(json_path, meta, rows)
    png_path = png_path if any(r["T"] == 1 for r in rows) else None
    tokens_path = args.out / TOKENS_PLOT_NAME if any(r["T"] > 1 for r in rows) else None
    try:
        if png_path:
            plot(rows, png_path)
        if tokens_path:
            plot_tokens(rows, tokens_path)
        plot_error = None
    except Exception as exc:  # the JSON is written; say so and fail at the end
        plot_error = f"{type(exc).__name__}: {exc}"

    print(f"\n{len(rows)} rows in {total:.1f} s host wall time; slowest row per variant (CPU model):")
    for variant in args.variants:
        timed = [r for r in rows if r["variant"] == variant.name and r["cpu_model_wall_s"] is not None]
        if timed:
            r = max(timed, key=lambda r: r["cpu_model_wall_s"])
            print(f"  {variant.name:<18}{r['cpu_model_wall_s']:7.2f} s  ({r['config']}, B={r['B']}, T={r['T']})")
    if tokens_path:
        print("\n" + token_table(rows))
    print(f"wrote {json_path}")
    written = [str(p) for p in (png_path, tokens_path) if p]
    print(f"wrote {' and '.join(written)}" if plot_error is None else f"plot FAILED: {plot_error}")
    if failed:
        print(f"{len(failed)} row(s) FAILED (errors recorded in {json_path})", file=sys.stderr)
    return 1 if failed or plot_error else 0


if __name__ == "__main__":
    sys.exit(main())
