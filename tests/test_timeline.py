"""Timelines (matplotlib lanes) and Chrome trace-event JSON for ui.perfetto.dev (nkicpu.timeline)."""
import json

import numpy as np
import pytest
from matplotlib.figure import Figure

import kernels  # noqa: F401  registers nkicpu as `nki` where the Neuron SDK is absent
import nki
import nki.isa as nisa
import nki.language as nl
from nkicpu.profile import MODELED, Profile, profile, profile_instructions
from nkicpu.record import Access, Instruction
from nkicpu.timeline import plot_timeline, trace_events, write_trace


@nki.jit
def scale_rows(x):
    """Two loads, a VectorE and a ScalarE op, one store."""
    a = nl.ndarray((128, 256), x.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, 256), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(a, x[0:128, :])
    nisa.dma_copy(b, x[128:256, :])
    c = nl.ndarray((128, 256), x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(c, a, b, nl.multiply)
    nisa.activation(c, nl.exp, c)
    out = nl.ndarray((128, 256), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, c)
    return out


@pytest.fixture(scope="module")
def prof():
    x = np.random.default_rng(0).uniform(-1, 1, (256, 256)).astype(np.float32)
    return profile(scale_rows)(x)


def _slices(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def _thread_names(trace):
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}


def test_plot_has_a_lane_per_engine_and_active_dma_queue_and_says_modeled(prof):
    fig = plot_timeline(prof, title="scale rows")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    lanes = [t.get_text() for t in ax.get_yticklabels()]
    assert lanes == ["TensorE", "VectorE", "ScalarE", "GpSimd", "DMA q0", "DMA q1", "DMA q2"]
    assert "scale rows" in ax.get_title() and MODELED in ax.get_title()
    assert ax.get_xlabel() == "time (µs)"


def test_plot_and_trace_show_the_band(prof):
    assert prof.best_us < prof.total_us
    title = plot_timeline(prof).axes[0].get_title()
    assert f"best {prof.best_us:.2f} – likely {prof.total_us:.2f} µs" in title
    trace = trace_events(prof)
    assert trace["otherData"]["best_us"] == prof.best_us and trace["otherData"]["total_us"] == prof.total_us
    process = [e for e in trace["traceEvents"] if e["name"] == "process_name"][0]
    assert prof.band() in process["args"]["name"]


def test_a_measured_profile_has_no_band():
    p = Profile.from_events([{"lane": "VectorE", "name": "v", "start_us": 0.0, "dur_us": 2.0, "args": {}}],
                            "hand-made events (not a capture)")
    assert p.best_us is None and p.band() == "total 2.00 µs"
    assert plot_timeline(p).axes[0].get_title().endswith("total 2.00 µs")


def test_two_cores_get_a_lane_set_each():
    def tile(alloc):
        return Access(alloc, "sbuf", "float32", 0, ((512, 128), (1, 512)), 4, 512)
    hbm = Access(9, "shared_hbm", "float32", 0, ((512, 128), (1, 512)), 4)
    ins = [Instruction(0, "dma", "dma_copy", [hbm], [tile(1)], core=0),
           Instruction(1, "vector", "tensor_copy", [tile(1)], [tile(2)], core=0),
           Instruction(2, "dma", "dma_copy", [hbm], [tile(11)], core=1),
           Instruction(3, "vector", "tensor_copy", [tile(11)], [tile(12)], core=1)]
    p = profile_instructions(ins)
    labels = [t.get_text() for t in plot_timeline(p).axes[0].get_yticklabels()]
    assert labels == [f"c{c} {lane}" for c in (0, 1) for lane in ("TensorE", "VectorE", "ScalarE", "GpSimd", "DMA q0")]
    trace = trace_events(p)
    names = _thread_names(trace)
    assert {(names[s["tid"]], s["cat"]) for s in _slices(trace)} == {
        ("c0 DMA q0", "DMA"), ("c0 VectorE", "VectorE"), ("c1 DMA q0", "DMA"), ("c1 VectorE", "VectorE")}


def test_plot_draws_into_a_given_axes(prof):
    fig = Figure()
    ax = fig.add_subplot()
    assert plot_timeline(prof, ax=ax) is fig and ax.get_title().startswith(MODELED)


def test_trace_round_trips_with_one_track_per_lane(prof):
    trace = trace_events(prof)
    assert json.loads(json.dumps(trace)) == trace
    names = _thread_names(trace)
    assert sorted(names.values()) == sorted(prof.busy) and len(set(names.values())) == len(names)
    process = [e for e in trace["traceEvents"] if e["name"] == "process_name"][0]
    assert MODELED in process["args"]["name"]
    for s in _slices(trace):
        assert names[s["tid"]] == s["cat"] or names[s["tid"]].startswith(s["cat"])


def test_trace_times_are_microseconds(prof):
    trace = trace_events(prof)
    by_name = {}
    for s in _slices(trace):
        by_name.setdefault(s["name"], s)
    act = next(e for e in prof.events if e["name"] == "activation exp")
    s = by_name["activation exp"]
    assert s["ts"] == pytest.approx(act["start_us"], abs=1e-3) and s["dur"] == pytest.approx(act["dur_us"], abs=1e-3)
    assert max(s["ts"] + s["dur"] for s in _slices(trace)) == pytest.approx(prof.total_us, abs=1e-3)


def _assert_nested_or_disjoint(trace):
    spans = {}
    for s in _slices(trace):
        spans.setdefault(s["tid"], []).append((round(s["ts"] * 1000), round((s["ts"] + s["dur"]) * 1000)))
    for tid, items in spans.items():
        items.sort()
        for (a0, a1), (b0, b1) in zip(items, items[1:]):
            assert b0 >= a1 or b1 <= a1, f"track {tid}: [{a0}, {a1}] and [{b0}, {b1}] partially overlap"


def test_no_partial_overlaps_even_when_events_overlap():
    events = [{"lane": "DMA qSyncIO0", "name": f"t{i}", "start_us": s, "dur_us": d, "args": {}}
              for i, (s, d) in enumerate([(0.0, 2.0), (1.0, 2.0), (1.5, 0.2), (3.0, 1.0)])]
    events.append({"lane": "VectorE", "name": "v", "start_us": 0.5, "dur_us": 1.0, "args": {}})
    p = Profile.from_events(events, "hand-made events (not a capture)")
    trace = trace_events(p)
    _assert_nested_or_disjoint(trace)
    assert sorted(_thread_names(trace).values()) == ["DMA qSyncIO0", "DMA qSyncIO0 (2)", "DMA qSyncIO0 (3)", "VectorE"]
    assert p.busy["DMA qSyncIO0"] == pytest.approx(1.0)  # 0-3 and 3-4 covered, overlaps counted once
    labels = [t.get_text() for t in plot_timeline(p).axes[0].get_yticklabels()]
    assert labels == ["VectorE", "DMA qSyncIO0", "DMA qSyncIO0 (2)", "DMA qSyncIO0 (3)"]


def test_modeled_trace_has_no_partial_overlaps(prof):
    _assert_nested_or_disjoint(trace_events(prof))


def test_write_trace(prof, tmp_path):
    path = write_trace(prof, tmp_path / "trace.json")
    with open(path) as f:
        assert json.load(f) == trace_events(prof)


def test_critical_path_adds_up_to_the_likely_total():
    """The stage chapters' critical path: consecutive steps back from the last event, whose parts
    (engines, DMA moving, latencies, hand-offs, table loads) sum to the likely time."""
    import kernels  # noqa: F401  registers `nki`
    from kernels.configs import model_shard
    from kernels.conv1d_decode import conv1d_decode_kernel
    from kernels.reference import pipeline_inputs
    from nkicpu.profile import PATH_PARTS, critical_path, critical_path_parts, event_end, profile
    x = pipeline_inputs(model_shard("Qwen3-Next-80B", 4, B=8))
    p = profile(conv1d_decode_kernel)(x["mixed_qkv"], x["conv_weight"], x["conv_state"])
    steps = critical_path(p)
    assert steps[-1][0] is max(p.events, key=event_end)
    assert {label for _, label, _ in steps} <= set(PATH_PARTS.values())
    parts = critical_path_parts(p)
    assert abs(sum(us for _, us in parts.values()) - p.total_us) < 1e-6
    assert parts["latency"][1] > 0 and parts["moving"][1] > 0
