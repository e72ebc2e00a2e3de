"""Draw a `Profile` as engine lanes (matplotlib) and write it as a Chrome trace for ui.perfetto.dev.

Both views show one lane per engine and per DMA queue (per core, "c1 VectorE", for an LNC=2
launch), and both carry the profile's label, so a reader always sees whether the picture is
modeled or measured. A modeled profile is drawn on its likely timeline and shows its band (best
and likely time). A lane whose events overlap (which can happen in a real capture, never in the
model) is split into extra rows ("DMA q0 (2)"), because Perfetto requires the slices on one track
to nest and never partially overlap.
"""
import json

from matplotlib.figure import Figure

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


def plot_timeline(profile, ax=None, title=None):
    """One horizontal lane per engine and DMA queue, x in microseconds; returns the Figure."""
    tracks = _tracks(profile)
    if ax is None:
        fig = Figure(figsize=(10, 0.4 * len(tracks) + 1.4))
        ax = fig.add_subplot()
        fig.subplots_adjust(left=0.12, right=0.93)
    else:
        fig = ax.figure
    visible = profile.total_us / 400  # outline bars wide enough to see; outlines of tiny ones would grey a lane
    for y, (name, lane, events) in enumerate(tracks):
        spans = [(e["start_us"], e["dur_us"]) for e in events]
        edges = ["black" if d >= visible else "none" for _, d in spans]
        ax.broken_barh(spans, (y - 0.38, 0.76), facecolors=_color(lane), edgecolors=edges, linewidth=0.25)
        if name == lane:
            ax.text(1.008, y, f"{profile.busy.get(lane, 0.0):.0%}", transform=ax.get_yaxis_transform(),
                    va="center", ha="left", fontsize=8, color="0.45")
    ax.text(1.008, -0.9, "busy", transform=ax.get_yaxis_transform(), va="center", ha="left", fontsize=8,
            color="0.45")
    ax.set_yticks(range(len(tracks)), [name for name, _, _ in tracks])
    ax.set_ylim(len(tracks) - 0.5, -0.5)
    ax.set_xlim(0, profile.total_us * 1.01 or 1.0)
    ax.set_xlabel("time (µs)")
    ax.grid(axis="x", alpha=0.3)
    if profile.roofline_us:
        ax.axvline(profile.roofline_us, color="0.3", linestyle="--", linewidth=0.9)
        ax.text(profile.roofline_us, -0.55, f" HBM roofline {profile.roofline_us:.2f} µs", fontsize=8,
                color="0.3", va="bottom")
    if profile.best_us is not None:  # the band: the timeline drawn is the likely one
        ax.axvspan(profile.best_us, profile.total_us, color="tab:blue", alpha=0.08, linewidth=0)
        ax.axvline(profile.best_us, color="tab:blue", linestyle=":", linewidth=0.9)
        ax.text(profile.best_us, len(tracks) - 0.5, f" best {profile.best_us:.2f} µs", fontsize=8,
                color="tab:blue", va="bottom")
    head = f"{title} — " if title else ""
    ax.set_title(f"{head}{profile.label}, {profile.band()}", fontsize=10, pad=14)
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
