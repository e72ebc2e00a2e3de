"""Marks on a timeline (nkicpu.timeline.Mark): drawn where they point, labels that never collide
nor hide another mark's line, DMA fixed latency shown, and a mark on a lane the profile lacks
refused by name."""
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Rectangle

import kernels  # noqa: F401  registers nkicpu as `nki` where the Neuron SDK is absent
from nkicpu.profile import profile
from nkicpu.timeline import FONT, Mark, plot_timeline
from tests.test_timeline import scale_rows


@pytest.fixture(scope="module")
def prof():
    x = np.random.default_rng(0).uniform(-1, 1, (256, 256)).astype(np.float32)
    return profile(scale_rows)(x)


def _label_boxes(fig, labels):
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.axes[0].texts if t.get_text().strip() in labels]
    assert len(texts) == len(labels)
    return [t.get_window_extent(renderer) for t in texts]


def _hidden_lines(fig):
    """(line x, label) for every mark line that runs behind a label other than its own: each line
    runs from its label down to the lanes, and the white box behind a label lower down hides it."""
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    boxes = [(t.get_text().strip(), t.get_window_extent(renderer)) for t in ax.texts
             if t.get_bbox_patch() is not None]      # the mark labels: the only texts with a box
    hidden = []
    for line in ax.lines:
        xs, ys = line.get_xdata(), line.get_ydata()
        if xs[0] != xs[1] or ys[0] == ys[1]:
            continue                                 # not a mark's vertical line
        (x, y_a), (_, y_b) = ax.transData.transform([(xs[0], ys[0]), (xs[1], ys[1])])
        low, high = min(y_a, y_b), max(y_a, y_b)
        hidden += [(xs[0], label) for label, b in boxes
                   if low < b.y0 and b.y1 < high and b.x0 + 1 < x < b.x1 - 1]
    return hidden


def test_marks_labels_do_not_overlap(prof):
    t = prof.total_us
    # crowded on purpose: five instants within a few percent of the axis, one near the right edge
    marks = [Mark(f"event number {i}", t * (0.10 + 0.01 * i)) for i in range(5)] + [Mark("at the end", t)]
    fig = plot_timeline(prof, marks=marks)
    labels = {m.label for m in marks} | {f"best {prof.best_us:.2f} µs"}
    boxes = _label_boxes(fig, labels)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), "two mark labels overlap"
    axes = fig.axes[0].get_window_extent()
    assert max(b.x1 for b in boxes) <= axes.x1 + 1, "a label runs past the plot's right edge"
    assert _hidden_lines(fig) == []


@pytest.mark.parametrize("where", [
    # the stage 4 chapter's final version: the last load and the gap from it to the first store
    # start together, an instant just after (there, the HBM roofline), the first store within the
    # first labels' width
    [("last state load lands", 0.40, None, None), ("no DMA moving", 0.40, 0.55, "DMA q2"),
     ("an instant just after", 0.43, None, None), ("first state store", 0.55, None, None)],
    # its version 3: a long label just before a mark, another long one just before the right edge
    [("no DMA moving", 0.15, 0.40, "DMA q2"), ("a long label before the next mark", 0.32, None, None),
     ("first state store", 0.40, None, None), ("last state load lands", 0.93, None, None)],
])
def test_no_label_hides_another_marks_line(prof, where):
    t = prof.total_us
    marks = [Mark(label, t * start, end and t * end, lane) for label, start, end, lane in where]
    assert _hidden_lines(plot_timeline(prof, marks=marks)) == []


def test_span_mark_outlines_its_lane(prof):
    dma = [e for e in prof.events if e["lane"].startswith("DMA")][0]
    fig = plot_timeline(prof, marks=[Mark("first load", dma["start_us"], dma["start_us"] + dma["dur_us"],
                                          dma["lane"])])
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert len(boxes) == 1
    lanes = [t.get_text() for t in ax.get_yticklabels()]
    assert boxes[0].get_x() == dma["start_us"] and abs(boxes[0].get_y() + 0.48 - lanes.index(dma["lane"])) < 1e-9


def test_unknown_lane_is_named(prof):
    with pytest.raises(ValueError, match="lane 'DMA q9' is not in the profile"):
        plot_timeline(prof, marks=[Mark("x", 0.1, 0.2, "DMA q9")])


def test_dma_fixed_latency_is_drawn_and_text_is_large_enough(prof):
    fig = plot_timeline(prof)
    ax = fig.axes[0]
    dma = [e["args"] for e in prof.events if e["lane"].startswith("DMA")]
    assert dma and all(a["trigger_us"] + a["latency_us"] <= e_start + 1e-9 for a, e_start in
                       zip(dma, [e["start_us"] for e in prof.events if e["lane"].startswith("DMA")]))
    spans = sorted((round(min(l.get_xdata()), 9), round(max(l.get_xdata()), 9)) for l in ax.lines
                   if l.get_linewidth() == 0.8 and len(set(l.get_ydata())) == 1)
    assert spans == sorted((round(a["trigger_us"], 9), round(a["trigger_us"] + a["latency_us"], 9))
                           for a in dma), "each DMA's latency drawn from its trigger"
    assert "fixed latency" in ax.get_title()
    # every text in the figure at least FONT points: >= 10 px when 10 inches span >= 800 px
    sizes = [t.get_fontsize() for t in ax.texts + ax.get_yticklabels() + ax.get_xticklabels()]
    assert min(sizes) >= FONT and FONT / 72 * 800 / fig.get_figwidth() >= 10
