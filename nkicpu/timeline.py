"""Draw a `Profile` as engine lanes (matplotlib) and write it as a Chrome trace for ui.perfetto.dev.

Both views show one lane per engine and per DMA queue (per core, "c1 VectorE", for an LNC=2
launch), and both carry the profile's label, so a reader always sees whether the picture is
modeled or measured. A modeled profile is drawn on its likely timeline and shows its band (best
and likely time). A lane whose events overlap (which can happen in a real capture, never in the
model) is split into extra rows ("DMA q0 (2)"), because Perfetto requires the slices on one track
to nest and never partially overlap. A timeline can also colour each DMA by what it carries
(`plot_timeline(dma_kinds=...)`, the kinds from `nkicpu.profile.dma_kinds`).
"""
import json
from typing import NamedTuple

from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Patch, Rectangle
from matplotlib.textpath import TextToPath
from matplotlib.transforms import offset_copy

from .profile import is_dma_lane, split_core

_COLORS = {"TensorE": "tab:red", "TensorE load": "lightcoral", "VectorE": "tab:green", "ScalarE": "tab:orange",
           "GpSimd": "tab:purple", "SyncE": "tab:gray"}
_EPS_US = 1e-9


def _kind(lane):
    """The engine of a lane, without its core: "VectorE" for "c1 VectorE", "DMA" for "c1 DMA q0"."""
    return split_core(lane)[1].split()[0]


def _color(lane):
    engine = split_core(lane)[1]
    return _COLORS.get(engine, "tab:blue" if engine.startswith("DMA") else "tab:gray")


# What DMAs carry (plot_timeline's dma_kinds), kinds in order of first appearance: light fills
# from Paul Tol's colour-blind-safe "light" scheme and Okabe-Ito's reddish purple, none an engine's
# colour or the plain DMA blue, each with a hatch of its own, a second cue where fills look alike.
_KIND_STYLES = (("#EEDD88", ""), ("#99DDFF", "//"), ("#CC79A7", ".."), ("#44BB99", "xx"),
                ("#BBCC33", "\\\\"), ("#DDDDDD", "++"))


def _kind_styles(profile, dma_kinds):
    """{kind: (fill, hatch)} for the kinds of `dma_kinds` ({instruction index: kind}), in order of
    first appearance; an index that is none of the profile's DMAs is refused (another capture's?)."""
    dmas = {e["args"].get("index") for e in profile.events if is_dma_lane(e["lane"]) and e.get("args")}
    stray = sorted(set(dma_kinds) - dmas)
    if stray:
        raise ValueError(f"dma_kinds: instructions {stray[:5]} are not DMAs of this profile")
    kinds = list(dict.fromkeys(dma_kinds.values()))
    if len(kinds) > len(_KIND_STYLES):
        raise ValueError(f"dma_kinds: {len(kinds)} kinds {kinds}, more than the {len(_KIND_STYLES)} a "
                         f"timeline tells apart")
    return dict(zip(kinds, _KIND_STYLES))


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


_TEXT = TextToPath()  # measures a label's text as Agg draws it, without a renderer
_SEARCH_STEPS = 5000  # placements the label layout tries before it lets a line run behind a label


def _text_width_pt(text):
    return _TEXT.get_text_width_height_descent(text, FontProperties(size=FONT), ismath=False)[0]


def _label_width_us(label, us_per_pt):
    """The width of a label as drawn (" label " in a box padded by 0.5 pt), in µs on the x axis."""
    return (_text_width_pt(f" {label} ") + 2) * us_per_pt


def _clash(a, b, lines):
    """Whether two placed labels (row, left, right, x, align) collide: they overlap in one row or,
    with `lines`, the upper one's mark line (from its label down to the lanes) runs behind the lower
    label, whose white box would hide it."""
    if a[0] == b[0]:
        return a[1] < b[2] and b[1] < a[2]
    upper, lower = (a, b) if a[0] > b[0] else (b, a)
    return lines and lower[1] < upper[3] < lower[2]


def _place(options, rows, budget, lines=True):
    """Depth first, in the order of `options` (per label: its (align, left, right, x) placements,
    preferred first): a placed label per option in at most `rows` rows, lower rows first; None if
    there is no such layout or the budget (a one-item list, counted down) runs out first."""
    placed = []

    def extend(i):
        if i == len(options):
            return True
        for row in range(rows):
            for align, left, right, x in options[i]:
                budget[0] -= 1
                if budget[0] < 0:
                    return False
                label = (row, left, right, x, align)
                if not any(_clash(label, p, lines) for p in placed):
                    placed.append(label)
                    if extend(i + 1):
                        return True
                    placed.pop()
        return False
    return placed if extend(0) else None


def _label_rows(marks, ax, fig):
    """(row, align) per mark: labels in rows above the lanes, none overlapping another and none
    hiding another mark's line, in few rows. A label starts at its mark ("left") or, where that
    lets it sit lower or it would run past the right edge, ends there ("right"). Labels are placed
    right to left, each in the lowest row it fits, so that marks close together make a staircase
    whose lines pass no label; then fewer rows are tried. Marks too close for any such layout (or
    for one found in _SEARCH_STEPS tries) get the lowest rows where their labels overlap none."""
    x0, x1 = ax.get_xlim()
    width_pt = fig.get_figwidth() * 72 * (ax.get_position().x1 - ax.get_position().x0)
    us_per_pt = (x1 - x0) / width_pt
    order = sorted(range(len(marks)), key=lambda i: -marks[i].start_us)
    options = []
    for i in order:
        x, w = marks[i].start_us, _label_width_us(marks[i].label, us_per_pt)
        both = [("left", x, x + w, x), ("right", x - w, x, x)]
        options.append([o for o in both if x0 <= o[1] and o[2] <= x1] or both[1:])
    budget = [_SEARCH_STEPS]
    placed = _place(options, len(marks), budget)
    while placed:
        fewer = _place(options, max(row for row, *_ in placed), budget)
        if fewer is None:
            break
        placed = fewer
    if placed is None:   # with a row per label, each label finds a row where it overlaps none
        placed = _place(options, len(marks), [2 * len(marks) ** 2], lines=False)
    rows = [None] * len(marks)
    for i, (row, _, _, _, align) in zip(order, placed):
        rows[i] = (row, align)
    return rows


def _draw_marks(ax, fig, marks, tracks, colors):
    """Draw `marks` (with their colors) on the lanes and their labels in rows above the lanes."""
    lanes = {}
    for y, (name, lane, _) in enumerate(tracks):
        lanes.setdefault(lane, y)
    placed = _label_rows(marks, ax, fig)
    top = -0.5 - _LABEL_ROW * (max([row for row, _ in placed], default=-1) + 1)
    for m, color, (row, align) in zip(marks, colors, placed):
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


def _draw_bars(ax, y, lane, events, visible, dma_kinds, styles):
    """A track's bars: a DMA with a kind in its kind's fill and hatch, the others in the lane's
    colour (one collection per kind: a collection has one hatch)."""
    groups = {}
    for e in events:
        kind = dma_kinds.get(e.get("args", {}).get("index")) if is_dma_lane(lane) else None
        groups.setdefault(kind, []).append(e)
    for kind, group in groups.items():
        spans = [(e["start_us"], e["dur_us"]) for e in group]
        edges = ["black" if d >= visible else "none" for _, d in spans]
        fill, hatch = styles[kind] if kind is not None else (_color(lane), None)
        ax.broken_barh(spans, (y - 0.38, 0.76), facecolors=fill, edgecolors=edges, linewidth=0.25, hatch=hatch)


_LEGEND_GAP_PT = 36  # from the axes down to the kinds' legend: room for the x tick labels and x label


def _legend_shape(kinds, fig):
    """(columns, height in points) of the kinds' legend: one row where it fits the figure's width
    (an entry: a 2 em patch, 0.8 em, its text and 2 em to the next), else two."""
    width_pt = sum(_text_width_pt(kind) + 4.8 * FONT for kind in kinds)
    columns = len(kinds) if width_pt <= 0.9 * 72 * fig.get_figwidth() else -(-len(kinds) // 2)
    return columns, -(-len(kinds) // columns) * 1.7 * FONT + FONT


def _draw_kind_legend(ax, fig, styles):
    """The DMA kinds' legend under the axes, below the x label, where it covers no bar and no label."""
    handles = [Patch(facecolor=fill, hatch=hatch, edgecolor="black", linewidth=0.25, label=kind)
               for kind, (fill, hatch) in styles.items()]
    below = offset_copy(ax.transAxes, fig=fig, y=-_LEGEND_GAP_PT, units="points")
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below,
              ncols=_legend_shape(styles, fig)[0], fontsize=FONT, frameon=False)


def _grow_below(fig, margin_in):
    """Grow `fig` downwards so that its axes keep their size in inches and get `margin_in` inches
    under them (no less than they have)."""
    w, h = fig.get_size_inches()
    bottom, top = fig.subplotpars.bottom, fig.subplotpars.top
    grow = max(0.0, margin_in - bottom * h)
    fig.set_size_inches(w, h + grow)
    fig.subplots_adjust(bottom=(bottom * h + grow) / (h + grow), top=1 - (1 - top) * h / (h + grow))


def plot_timeline(profile, ax=None, title=None, marks=(), dma_kinds=None):
    """One horizontal lane per engine and DMA queue, x in microseconds; returns the Figure.

    A thin line just under a DMA lane shows its fixed latency: from the moment its queue triggers
    it until its data may move (descriptor and semaphore time; it overlaps earlier transfers).
    `marks` (a sequence of `Mark`) label the events a text discusses; their labels, and those of the
    HBM roofline and the best time, sit in rows above the lanes, so no label covers a bar, and
    where the marks leave room, none hides another mark's line.
    `dma_kinds` ({instruction index: kind}, e.g. from `nkicpu.profile.dma_kinds`) fills each DMA
    with its kind's colour and hatch, kinds in order of first appearance, and adds a legend of
    the kinds under the axes (a figure drawn into a given `ax` must leave room for it there);
    DMAs without a kind keep the plain DMA blue.
    """
    tracks = _tracks(profile)
    marks = list(marks)
    dma_kinds = dma_kinds or {}
    styles = _kind_styles(profile, dma_kinds)
    if ax is None:
        fig = Figure(figsize=(10, 0.4 * len(tracks) + 1.6 + 0.3 * (len(marks) + 2)))
        ax = fig.add_subplot()
        fig.subplots_adjust(left=0.14, right=0.93)
        if styles:      # the legend's own room under the x label, 4 pt clear of the edge
            _grow_below(fig, (_LEGEND_GAP_PT + _legend_shape(styles, fig)[1] + 4) / 72)
    else:
        fig = ax.figure
    visible = profile.total_us / 400  # outline bars wide enough to see; outlines of tiny ones would grey a lane
    for y, (name, lane, events) in enumerate(tracks):
        _draw_bars(ax, y, lane, events, visible, dma_kinds, styles)
        for e in events:        # a DMA's fixed latency: from its trigger until its data can move
            a = e.get("args", {})
            if a.get("trigger_us") is not None and a.get("latency_us"):
                ax.plot([a["trigger_us"], a["trigger_us"] + a["latency_us"]], [y + 0.45, y + 0.45],
                        color="0.25", linewidth=0.8, solid_capstyle="butt")
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
    if styles:
        _draw_kind_legend(ax, fig, styles)
    ax.text(1.008, 1.0, "busy", transform=ax.transAxes, va="bottom", ha="left", fontsize=FONT,
            color="0.45")
    has_dma = any("DMA" in lane for _, lane, _ in tracks)
    legend = "thin line: a DMA's fixed latency, from its trigger to its first byte" if has_dma else None
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
