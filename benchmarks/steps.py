"""The composition steps at the book's target points: their rows, the latency tables that grow
from chapter to chapter, the climb, and the targets.

The steps are `kernels.registry.STEPS`, each a sweep variant that runs the whole decode step
(steps 5 to 7 also on two NeuronCores: the two-core track, kept apart from the one-core track).
A chapter shows its step's rows at the target points against the roofline of the block's
minimal bytes on the step's cores (`benchmarks.roofline`), every time modeled by the trn2 cost
model, best and likely. Rows are cached on disk under the build folder, keyed by the source of
everything that computes them, so that the book's chapters share them within one build.
"""
import hashlib
import json
from functools import lru_cache
from pathlib import Path

from kernels.configs import model_shard
from kernels.reference import pipeline_inputs
from kernels.registry import BY_NAME, STEPS

from .sweep import run_row

TARGETS = [("Qwen3-Next-80B", 4), ("Qwen3.5-27B", 8)]   # the shards the book's targets are set for
BATCHES = (1, 32)
# The targets, over the block's roofline on the step's cores, by (cores, B): best, likely.
TARGET_RATIOS = {(1, 1): (1.15, 1.6), (1, 32): (1.12, 1.6),
                 (2, 1): (1.6, 2.2), (2, 32): (1.25, 2.2)}

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "_build" / ".step_rows"
SOURCES = ("kernels", "nkicpu", "benchmarks")


@lru_cache(maxsize=None)
def _source_hash():
    h = hashlib.sha256()
    for folder in SOURCES:
        for path in sorted((REPO / folder).rglob("*.py")):
            h.update(str(path.relative_to(REPO)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=None)
def step_row(variant, model, tp, B):
    """The sweep's row (a dict) of one step at one shard and batch, on its entry's cores; raises
    if the row failed. Cached in memory and on disk (CACHE, keyed by the source of kernels/,
    nkicpu/ and benchmarks/)."""
    path = CACHE / _source_hash() / f"{variant}_{model}_TP{tp}_B{B}.json"
    if path.exists():
        return json.loads(path.read_text())
    row = run_row(BY_NAME[variant], model_shard(model, tp, B),
                  pipeline_inputs(model_shard(model, tp, B)))
    if row["status"] != "ok":
        raise RuntimeError(f"{variant} at {model} TP{tp} B={B}: {row['error']['message']}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row))
    tmp.replace(path)
    return row


def steps_upto(upto):
    """The step entries up to step `upto`'s number (a name), one-core track first."""
    last = BY_NAME[upto].step
    steps = [s for s in STEPS if s.step <= last]
    return [s for s in steps if s.lnc == 1] + [s for s in steps if s.lnc == 2]


def _cell(row):
    return (f"{row['best_us']:.1f} – {row['modeled_us']:.1f} "
            f"({row['best_over_block_roofline']:.2f}x – {row['modeled_over_block_roofline']:.2f}x)")


def latency_table(names):
    """Markdown: the steps `names` (registry entries), one table per target shard, a column per
    batch: best – likely µs (each over the block's HBM roofline on the step's cores), the
    one-core and two-core tracks apart, each closed by its roofline."""
    entries = [BY_NAME[n] for n in names]
    tables = []
    for m, tp in TARGETS:
        lines = [f"**{m} TP{tp}**: best – likely µs (best – likely over the block's roofline on "
                 "the step's cores), modeled", "",
                 "| step | cores | " + " | ".join(f"B = {B}" for B in BATCHES) + " |",
                 "|" + "---|" * (2 + len(BATCHES))]
        for cores in (1, 2):
            track = [e for e in entries if e.lnc == cores]
            for e in track:
                cells = [_cell(step_row(e.name, m, tp, B)) for B in BATCHES]
                lines.append(f"| {e.name} | {cores} | " + " | ".join(cells) + " |")
            if track:
                roofs = [step_row(track[0].name, m, tp, B)["block_roofline_us"] for B in BATCHES]
                lines.append(f"| *roofline, {cores} core{'s' * (cores > 1)}* | | "
                             + " | ".join(f"*{r:.1f}*" for r in roofs) + " |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def climb(model=TARGETS[0][0], tp=TARGETS[0][1]):
    """The climb at one shard: per step entry, in track order (one core, then two), its row at
    each of BATCHES: [(entry, {B: row})]."""
    return [(e, {B: step_row(e.name, model, tp, B) for B in BATCHES})
            for e in steps_upto(STEPS[-1].name)]


def climb_table(model=TARGETS[0][0], tp=TARGETS[0][1]):
    """Markdown: step | idea | best – likely µs | x roofline at each of BATCHES, the one-core
    and two-core tracks apart (each over the block's roofline on its cores)."""
    head = " | ".join(f"B = {B}: µs | x roofline" for B in BATCHES)
    lines = [f"| step | idea | launches | {head} |", "|" + "---|" * (3 + 2 * len(BATCHES))]
    for cores in (1, 2):
        rows = [(e, r) for e, r in climb(model, tp) if e.lnc == cores]
        roofs = " / ".join(f"{rows[0][1][B]['block_roofline_us']:.1f}" for B in BATCHES)
        lines.append(f"| **{cores} core{'s' * (cores > 1)}** | roofline {roofs} µs | "
                     + "| " * (2 * len(BATCHES)) + "|")
        for e, r in rows:
            cells = [f"{r[BATCHES[0]]['launches']}"]
            for B in BATCHES:
                cells += [f"{r[B]['best_us']:.1f} – {r[B]['modeled_us']:.1f}",
                          f"{r[B]['best_over_block_roofline']:.2f} – "
                          f"{r[B]['modeled_over_block_roofline']:.2f}"]
            lines.append(f"| {e.step} | {_idea(e)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _idea(entry):
    """The idea of a step entry in a few words: its registry line up to the first colon."""
    return entry.what.split(":")[0]


def target_table():
    """Markdown: the shipped kernel (step 7, one core and two) at the four target points, its best
    and likely ratios to the block's roofline against TARGET_RATIOS, met or not, and the likely
    floor (the block's bytes at the likely DMA rate) over the same roofline."""
    lines = ["| shard | B | cores | best / roofline | target | likely / roofline | target | "
             "likely floor / roofline |", "|---|---|---|---|---|---|---|---|"]
    for m, tp in TARGETS:
        for B in BATCHES:
            for cores in (1, 2):
                name = "7_ready_first" if cores == 1 else "7_ready_first_lnc2"
                r = step_row(name, m, tp, B)
                best, likely = TARGET_RATIOS[cores, B]
                floor = r["block_floor_us"] / r["block_roofline_us"]
                lines.append(
                    f"| {m} TP{tp} | {B} | {cores} | {r['best_over_block_roofline']:.3f} | "
                    f"{_met(r['best_over_block_roofline'], best)} | "
                    f"{r['modeled_over_block_roofline']:.3f} | "
                    f"{_met(r['modeled_over_block_roofline'], likely)} | {floor:.3f} |")
    return "\n".join(lines)


def _met(ratio, target):
    return f"≤ {target} {'met' if ratio <= target else 'missed'}"


def climb_figure(model=TARGETS[0][0], tp=TARGETS[0][1]):
    """The climb as bars, a panel per batch: each step's best time (dark) and best .. likely
    (light), the one-core track above the two-core one, each track's block roofline dashed;
    modeled (trn2 cost model)."""
    from matplotlib.figure import Figure
    from nkicpu.profile import MODELED

    rows = climb(model, tp)
    colors = {1: "tab:blue", 2: "tab:orange"}
    fig = Figure(figsize=(10, 1.4 + 0.32 * len(rows) * len(BATCHES)), layout="constrained")
    axes = fig.subplots(len(BATCHES), 1)
    for ax, B in zip(axes, BATCHES):
        for y, (e, r) in enumerate(rows):
            row = r[B]
            ax.barh(y, row["best_us"], color=colors[e.lnc])
            ax.barh(y, row["modeled_us"] - row["best_us"], left=row["best_us"],
                    color=colors[e.lnc], alpha=0.35)
        for cores in (1, 2):
            roof = next(r[B]["block_roofline_us"] for e, r in rows if e.lnc == cores)
            ax.axvline(roof, color=colors[cores], ls="--", lw=1)
        ax.set_yticks(range(len(rows)),
                      [f"{e.step} {_idea(e)}" + (", 2 cores" if e.lnc == 2 and e.step > 5 else "")
                       for e, _ in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"{model} TP{tp}, B = {B}", fontsize=10, loc="left")
        ax.set_xlabel("kernel time, µs (launches apart; dark: best, light: to likely; dashed: the "
                      "block's roofline on one core, on two)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"The composition steps, one core and two\n{MODELED}", fontsize=10)
    return fig
