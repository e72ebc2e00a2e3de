"""DMA bars coloured by what they carry: nkicpu.profile.dma_kinds names each DMA of a capture from
the caller's labels, and plot_timeline(dma_kinds=...) fills each with its kind's colour and hatch,
with a legend of the kinds present that covers no bar and no label."""
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba

import kernels  # noqa: F401  registers nkicpu as `nki` where the Neuron SDK is absent
import nki
import nki.isa as nisa
import nki.language as nl
import nkicpu
from nkicpu.profile import dma_kinds, is_dma_lane, profile_capture
from nkicpu.timeline import plot_timeline


@nki.jit
def scale_shift(x, w, b):
    """x * w + b, returned with a copy of x: DMAs in program order: load x, load w, load b,
    an on-chip copy, store the result, store the copy of x."""
    xs = nl.ndarray((128, 512), x.dtype, buffer=nl.sbuf)
    ws = nl.ndarray((128, 512), x.dtype, buffer=nl.sbuf)
    bs = nl.ndarray((128, 512), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(xs, x)
    nisa.dma_copy(ws, w)
    nisa.dma_copy(bs, b)
    y = nl.ndarray((128, 512), x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(y, xs, ws, nl.multiply)
    y2 = nl.ndarray((128, 512), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(y2, y)
    nisa.tensor_tensor(y2, y2, bs, nl.add)
    out = nl.ndarray((128, 512), x.dtype, buffer=nl.shared_hbm, name="out")
    nisa.dma_copy(out, y2)
    x_copy = nl.ndarray((128, 512), x.dtype, buffer=nl.shared_hbm, name="x_copy")
    nisa.dma_copy(x_copy, xs)
    return out, x_copy


@pytest.fixture(scope="module")
def cap():
    rng = np.random.default_rng(0)
    return nkicpu.capture(scale_shift)(*(rng.standard_normal((128, 512)).astype(np.float32) for _ in range(3)))


@pytest.fixture(scope="module")
def prof(cap):
    return profile_capture(cap)


def _dmas(cap):
    return [i for i in cap.instructions if i.engine == "dma"]


def test_dma_kinds_names_each_dma(cap):
    dmas = _dmas(cap)
    # the record holds the kernel's six DMAs in program order: three argument loads first
    assert len(dmas) == 6
    assert [d.reads[0].alloc for d in dmas[:3]] == [cap.arguments[k] for k in (0, 1, 2)]
    kinds = dma_kinds(cap, {0: "x", 1: "weights"}, {"x_copy": "copies"})
    assert [kinds.get(d.index) for d in dmas] == ["x", "weights", "small loads", None, "stores", "copies"]
    assert set(kinds) == {d.index for d in dmas} - {dmas[3].index}    # DMAs only, the on-chip one left out
    # an output the caller does not name is a store; an argument it does not map a small load
    assert [dma_kinds(cap, {}).get(d.index) for d in dmas] == ["small loads"] * 3 + [None, "stores", "stores"]


@nki.jit
def double_in_place(x):
    """x doubled and written back into x, an argument the kernel returns (as the NKI library's
    kernels return the caches they update)."""
    xs = nl.ndarray((128, 512), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(xs, x)
    nisa.tensor_tensor(xs, xs, xs, nl.add)
    nisa.dma_copy(x, xs)
    return x


def test_a_dma_that_writes_an_argument_is_a_store():
    cap = nkicpu.capture(double_in_place)(np.ones((128, 512), np.float32))
    load, store = _dmas(cap)
    assert dma_kinds(cap, {0: "x"}) == {load.index: "x", store.index: "stores"}
    assert dma_kinds(cap, {0: "x"}, {0: "x back"}) == {load.index: "x", store.index: "x back"}


def test_dma_kinds_run_in_the_order_the_kinds_are_named(cap):
    """A timeline colours kinds in order of first appearance: the same call on two kernels whose
    DMAs come in different orders must give the same kinds the same colours."""
    kinds = dma_kinds(cap, {1: "weights", 0: "x"}, {"out": "results"})
    assert list(dict.fromkeys(kinds.values())) == ["weights", "x", "results", "small loads", "stores"]


def test_dma_kinds_refuses_unknown_names(cap):
    with pytest.raises(ValueError, match="no kernel argument"):
        dma_kinds(cap, {7: "state"})
    with pytest.raises(ValueError, match="no shared_hbm tensor named"):
        dma_kinds(cap, {}, {"new_state": "state"})


def _bars(fig):
    """{(lane, start µs): (fill rgba, hatch)} of every bar the figure draws."""
    ax = fig.axes[0]
    lanes = [t.get_text() for t in ax.get_yticklabels()]
    bars = {}
    for coll in ax.collections:
        for path, face in zip(coll.get_paths(), np.broadcast_to(coll.get_facecolors(), (len(coll.get_paths()), 4))):
            (x0, y0), (_, y1) = path.vertices.min(axis=0), path.vertices.max(axis=0)
            bars[lanes[round((y0 + y1) / 2)], round(x0, 9)] = (tuple(face), coll.get_hatch())
    return bars


def test_bars_take_their_kinds_colour_and_the_legend_lists_the_kinds(cap, prof):
    kinds = dma_kinds(cap, {0: "x", 1: "weights"}, {"x_copy": "copies"})
    fig = plot_timeline(prof, dma_kinds=kinds)
    legend = fig.axes[0].get_legend()
    entries = [t.get_text() for t in legend.get_texts()]
    assert entries == ["x", "weights", "copies", "small loads", "stores"]   # in the order named
    key = {text.get_text(): (tuple(patch.get_facecolor()), patch.get_hatch())
           for text, patch in zip(legend.get_texts(), legend.get_patches())}
    bars = _bars(fig)
    plain = to_rgba("tab:blue")
    engines = {face for (lane, _), (face, _) in bars.items() if not is_dma_lane(lane)}
    for e in prof.events[:len(cap.instructions)]:
        if is_dma_lane(e["lane"]):
            kind = kinds.get(e["args"]["index"])
            assert bars[e["lane"], round(e["start_us"], 9)] == (key[kind] if kind else (plain, None)), kind
    fills = [face for face, _ in key.values()]
    assert len(set(fills)) == len(fills) and not set(fills) & (engines | {plain})
    hatches = [hatch for _, hatch in key.values()]
    assert len(set(hatches)) == len(hatches), "each kind has a hatch of its own, a second cue"


def test_the_legend_shows_only_the_kinds_present(cap, prof):
    dmas = _dmas(cap)
    fig = plot_timeline(prof, dma_kinds={dmas[1].index: "weights", dmas[4].index: "stores"})
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["weights", "stores"]


def test_the_legend_covers_no_bar_and_no_label_and_the_lanes_keep_their_size(cap, prof):
    plain = plot_timeline(prof)
    fig = plot_timeline(prof, dma_kinds=dma_kinds(cap, {0: "x", 1: "weights"}))
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    box = ax.get_legend().get_window_extent(renderer)
    labels = [ax.xaxis.label] + ax.get_xticklabels() + ax.get_yticklabels() + ax.texts
    assert not box.overlaps(ax.get_window_extent(renderer)), "the legend is outside the axes"
    assert not any(box.overlaps(t.get_window_extent(renderer)) for t in labels if t.get_text())
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1), "inside the figure"
    size = [f.axes[0].get_position().height * f.get_figheight() for f in (plain, fig)]
    assert size[0] == pytest.approx(size[1]), "the legend gets room of its own, not the lanes'"


def test_without_kinds_nothing_changes(prof):
    fig = plot_timeline(prof)
    assert fig.axes[0].get_legend() is None
    assert {style for (lane, _), style in _bars(fig).items() if is_dma_lane(lane)} == {(to_rgba("tab:blue"), None)}


def test_kinds_of_another_profile_are_refused(prof):
    with pytest.raises(ValueError, match="not DMAs of this profile"):
        plot_timeline(prof, dma_kinds={10_000: "weights"})
