"""Draw a `Profile` as engine lanes (matplotlib) and write it as a Chrome trace for ui.perfetto.dev.

Both views show one lane per engine and per DMA queue (per core, "c1 VectorE", for an LNC=2
launch), and both carry the profile's label, so a reader always sees whether the picture is
modeled or measured. A modeled profile is drawn on its likely timeline and shows its band (best
and likely time). A lane whose events overlap (which can happen in a real capture, never in the
model) is split into extra rows ("DMA q0 (2)"), because Perfetto requires the slices on one track
to nest and never partially overlap.
"""
import json
from typing import NamedTuple

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .profile import split_core

_COLORS = {"TensorE": "tab:red", "TensorE load": "lightcoral", "VectorE": "tab:green", "ScalarE": "tab:orange",
           "GpSimd": "tab:purple", "SyncE": "tab:gray"}
_EPS_US = 1e-9


def _kind(lane):
    """The engine of a lane, without its core: "VectorE" for "c1 VectorE", "DMA" for "c1 DMA q0"."""
    return split_core(lane)[1].split()[0]


def _color(lane):
    engine = split_core(lane)[1]
    return _COLORS.get(engine, "tab:blue" if engine.startswith("DMA") else "tab:gray")


def _tracks(profile):
    """[(row name, lane, events)] in display order; a lane's events packed into rows without overlaps."""
    by_lane = {lane: [] for lane in profile.busy}
    for e in profile.events:
        by_lane.setdefault(e["lane"], []).append(e)
    tracks = []
    for lane, events in by_lane.items():
        rows, ends = [[]], [float("-inf")]
        for e in sorted(events, key=lambda e: e["start_us"]):
            k = next((k for k, end in enumerate(ends) if e["start_us"] >= end - _EPS_US), None)
            if k is None:
                rows.append([])
                ends.append(float("-inf"))
                k = len(rows) - 1
            rows[k].append(e)
            ends[k] = e["start_us"] + e["dur_us"]
        tracks += [(lane if k == 0 else f"{lane} ({k + 1})", lane, row) for k, row in enumerate(rows)]
    return tracks


class Mark(NamedTuple):
    """An event the text discusses, drawn on a timeline: a span [start_us, end_us] on one lane (a
    vertical line across all lanes when `lane` is None or `end_us` is None), with its label."""
    label: str
    start_us: float
    end_us: float = None
    lane: str = None


FONT = 9           # points: >= 10 px when the 10-inch figure is shown in a column of 800 px or more
_LABEL_ROW = 0.9   # label rows above the lanes, in lane heights


def _label_rows(marks, ax, fig):
    """(row, align) per mark so that no two labels in one row overlap. A label starts at its mark,
    or ends there when it would run past the right edge; a character is about 0.6 em wide."""
    x0, x1 = ax.get_xlim()
    width_pt = fig.get_figwidth() * 72 * (ax.get_position().x1 - ax.get_position().x0)
    us_per_pt = (x1 - x0) / width_pt
    ends, placed = [], []
    for m in marks:
        w = (len(m.label) + 2) * 0.6 * FONT * us_per_pt
        left, align = (m.start_us, "left") if m.start_us + w <= x1 else (m.start_us - w, "right")
        row = 0
        while row < len(ends) and ends[row] > left:
            row += 1
        if row == len(ends):
            ends.append(0.0)
        ends[row] = left + w
        placed.append((row, align))
    return placed


def _draw_marks(ax, fig, marks, tracks, colors):
    """Draw `marks` (with their colors) on the lanes and their labels in rows above the lanes."""
    lanes = {}
    for y, (name, lane, _) in enumerate(tracks):
        lanes.setdefault(lane, y)
    order = sorted(range(len(marks)), key=lambda i: marks[i].start_us)
    placed = _label_rows([marks[i] for i in order], ax, fig)
    top = -0.5 - _LABEL_ROW * (max([row for row, _ in placed], default=-1) + 1)
    for i, (row, align) in zip(order, placed):
        m, color = marks[i], colors[i]
        y_label = -0.5 - _LABEL_ROW * (row + 0.5)
        if m.lane is None or m.end_us is None:
            y_end = len(tracks) - 0.5 if m.lane is None else lanes[m.lane] + 0.45
            ax.plot([m.start_us, m.start_us], [y_label, y_end], color=color, linewidth=1.0,
                    linestyle="--" if m.lane is None else "-")
        else:
            if m.lane not in lanes:
                raise ValueError(f"mark {m.label!r}: lane {m.lane!r} is not in the profile "
                                 f"(lanes: {', '.join(lanes)})")
            y = lanes[m.lane]
            ax.add_patch(Rectangle((m.start_us, y - 0.48), m.end_us - m.start_us, 0.96, fill=False,
                                   edgecolor=color, linewidth=1.6, zorder=5))
            ax.plot([m.start_us, m.start_us], [y_label, y - 0.48], color=color, linewidth=0.8)
        ax.text(m.start_us, y_label, f" {m.label} ", fontsize=FONT, color=color, va="center",
                ha=align, zorder=6, bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
    ax.set_ylim(len(tracks) - 0.5, top)


def plot_timeline(profile, ax=None, title=None, marks=()):
    """One horizontal lane per engine and DMA queue, x in microseconds; returns the Figure.

    DMA bars show their fixed latency (descriptor and semaphore time before data moves) lighter.
    `marks` (a sequence of `Mark`) label the events a text discusses; their labels, and those of the
    HBM roofline and the best time, sit in rows above the lanes, so no label covers a bar.
    """
    tracks = _tracks(profile)
    marks = list(marks)
    if ax is None:
        fig = Figure(figsize=(10, 0.4 * len(tracks) + 1.6 + 0.3 * (len(marks) + 2)))
        ax = fig.add_subplot()
        fig.subplots_adjust(left=0.14, right=0.93)
    else:
        fig = ax.figure
    visible = profile.total_us / 400  # outline bars wide enough to see; outlines of tiny ones would grey a lane
    for y, (name, lane, events) in enumerate(tracks):
        spans = [(e["start_us"], e["dur_us"]) for e in events]
        edges = ["black" if d >= visible else "none" for _, d in spans]
        ax.broken_barh(spans, (y - 0.38, 0.76), facecolors=_color(lane), edgecolors=edges, linewidth=0.25)
        fixed = [(e["start_us"], min(e["args"]["latency_us"], e["dur_us"])) for e in events
                 if e.get("args", {}).get("latency_us")]
        if fixed:
            ax.broken_barh(fixed, (y - 0.38, 0.76), facecolors="white", alpha=0.55, edgecolors="none")
        if name == lane:
            ax.text(1.008, y, f"{profile.busy.get(lane, 0.0):.0%}", transform=ax.get_yaxis_transform(),
                    va="center", ha="left", fontsize=FONT, color="0.45")
    ax.set_yticks(range(len(tracks)), [name for name, _, _ in tracks], fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.set_xlim(0, profile.total_us * 1.01 or 1.0)
    ax.set_xlabel("time (µs)", fontsize=FONT)
    ax.grid(axis="x", alpha=0.3)
    colors = ["tab:red"] * len(marks)
    if profile.roofline_us:
        marks.append(Mark(f"HBM roofline {profile.roofline_us:.2f} µs", profile.roofline_us))
        colors.append("0.3")
    if profile.best_us is not None:  # the band: the timeline drawn is the likely one
        ax.axvspan(profile.best_us, profile.total_us, color="tab:blue", alpha=0.08, linewidth=0)
        marks.append(Mark(f"best {profile.best_us:.2f} µs", profile.best_us))
        colors.append("tab:blue")
    _draw_marks(ax, fig, marks, tracks, colors)
    ax.text(1.008, 1.0, "busy", transform=ax.transAxes, va="bottom", ha="left", fontsize=FONT,
            color="0.45")
    has_dma = any("DMA" in lane for _, lane, _ in tracks)
    legend = "lighter start of a DMA bar: its fixed latency" if has_dma else None
    head = f"{title} — " if title else ""
    ax.set_title(f"{head}{profile.label}, {profile.band()}" + (f"\n{legend}" if legend else ""),
                 fontsize=FONT + 1, pad=10)
    return fig


def _check_no_partial_overlaps(slices):
    by_tid = {}
    for s in slices:
        by_tid.setdefault(s["tid"], []).append((s["ts_ns"], s["ts_ns"] + s["dur_ns"]))
    for tid, spans in by_tid.items():
        stack = []
        for start, end in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"trace track {tid}: slices partially overlap at {start} ns"
            stack.append(end)


def trace_events(profile, pid=1):
    """The profile as Chrome trace-event JSON (Object form): one "X" slice per event, ts/dur in µs,
    one thread (tid) per lane, named and sorted by metadata events; opens in ui.perfetto.dev."""
    cores = "NeuronCore 0" if profile.cores == 1 else f"NeuronCores 0-{profile.cores - 1}"
    meta = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
             "args": {"name": f"{cores} — {profile.label}, {profile.band()}"}}]
    slices = []
    for tid, (name, lane, events) in enumerate(_tracks(profile), start=1):
        meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}},
                 {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]
        for e in events:
            # Whole nanoseconds, rounded once per edge, so back-to-back slices stay back to back.
            start = round(e["start_us"] * 1000)
            end = max(start, round((e["start_us"] + e["dur_us"]) * 1000))
            slices.append({"name": e["name"], "cat": _kind(lane), "ph": "X", "pid": pid, "tid": tid,
                           "ts_ns": start, "dur_ns": end - start, "args": e.get("args", {})})
    _check_no_partial_overlaps(slices)
    for s in slices:
        s["ts"], s["dur"] = s.pop("ts_ns") / 1000, s.pop("dur_ns") / 1000
    other = {"label": profile.label, "total_us": profile.total_us, "best_us": profile.best_us,
             "launch_us": profile.launch_us}
    return {"traceEvents": meta + slices, "displayTimeUnit": "ns", "otherData": other}


def write_trace(profile, path):
    """Write `trace_events(profile)` as JSON to `path` (open it in ui.perfetto.dev)."""
    with open(path, "w") as f:
        json.dump(trace_events(profile), f)
    return path
