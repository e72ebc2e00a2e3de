"""Marks on a timeline (nkicpu.timeline.Mark): drawn where they point, labels that never collide,
DMA fixed latency shown, and a mark on a lane the profile lacks refused by name."""
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
    latencies = [e["args"]["latency_us"] for e in prof.events if e["lane"].startswith("DMA")]
    assert latencies and min(latencies) > 0
    overlays = [c for c in ax.collections if tuple(c.get_facecolor()[0][:3]) == (1.0, 1.0, 1.0)]
    assert overlays, "no fixed-latency overlay on the DMA lanes"
    assert "fixed latency" in ax.get_title()
    # every text in the figure at least FONT points: >= 10 px when 10 inches span >= 800 px
    sizes = [t.get_fontsize() for t in ax.texts + ax.get_yticklabels() + ax.get_xticklabels()]
    assert min(sizes) >= FONT and FONT / 72 * 800 / fig.get_figwidth() >= 10
