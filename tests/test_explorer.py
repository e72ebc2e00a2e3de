"""Reducing a Neuron Explorer export to events (nkicpu.explorer), then the same Profile, plot and trace.

The fixtures under tests/fixtures/ are HAND-MADE from the documented schema (see the "_comment"
in each file); they are not real captures, so nothing here is labelled "measured".
"""
import json
import os
import sys

import pytest

from nkicpu import explorer
from nkicpu.profile import Profile, lane_cores
from nkicpu.timeline import plot_timeline, trace_events

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
LABEL = "hand-made fixture from the documented schema (not a capture)"


def _tables():
    with open(os.path.join(FIXTURES, "explorer_tables.json")) as f:
        data = json.load(f)
    return data["Instruction"], data["DmaPacketAggregated"]


def _by_lane(events):
    lanes = {}
    for e in events:
        lanes.setdefault(e["lane"], []).append(e)
    return lanes


def test_table_rows_reduce_to_lanes():
    events = explorer.reduce_rows(*_tables())
    lanes = _by_lane(events)
    assert set(lanes) == {"TensorE", "TensorE load", "VectorE", "ScalarE", "GpSimd", "DMA qSyncIO0", "DMA qActIO0"}
    assert [e["name"] for e in lanes["TensorE"]] == ["MATMUL"]
    assert [e["name"] for e in lanes["TensorE load"]] == ["LDWEIGHTS"]
    assert not any("SEMAPHORE" in e["name"] for e in events)       # waits are not work
    assert "SyncE" not in lanes                                      # its only row was a semaphore wait
    assert min(e["start_us"] for e in events) == 0.0                 # the first DMA starts at 0
    matmul = lanes["TensorE"][0]
    assert matmul["start_us"] == pytest.approx(2.96) and matmul["dur_us"] == pytest.approx(0.215)
    assert matmul["args"]["nki_source_location"] == "kernels/in_proj.py:42"
    assert lanes["DMA qSyncIO0"][0]["name"] == "hidden"
    assert lanes["DMA qSyncIO0"][0]["args"]["transfer_bytes"] == 131072


def test_an_lnc2_capture_reduces_to_lanes_per_core():
    instructions, dma = _tables()
    for rows in (instructions, dma):
        rows[:] = [dict(r, pcore_idx=core) for core in (0, 1) for r in rows]   # both cores ran the rows
    events = explorer.reduce_rows(instructions, dma)
    lanes = _by_lane(events)
    single = _by_lane(explorer.reduce_rows(*_tables()))
    assert set(lanes) == {f"c{core} {lane}" for core in (0, 1) for lane in single}
    assert [e["name"] for e in lanes["c1 TensorE"]] == [e["name"] for e in single["TensorE"]]
    p = Profile.from_events(events, LABEL, cores=lane_cores(events))
    assert p.cores == 2 and "on 2 cores" in p.summary()
    assert lane_cores(explorer.reduce_rows(*_tables())) == 1


def test_json_export_reduces_to_lanes():
    events = explorer.read_json(os.path.join(FIXTURES, "explorer_profile.json"))
    lanes = _by_lane(events)
    assert set(lanes) == {"TensorE", "TensorE load", "VectorE", "ScalarE", "GpSimd", "SyncE"}
    assert len(lanes["TensorE"]) == 2 and lanes["SyncE"][0]["name"] == "DMA_TRIGGER"
    assert min(e["start_us"] for e in events) == 0.0                 # the dropped semaphore wait came first
    assert max(e["start_us"] + e["dur_us"] for e in events) == pytest.approx(2.2)


def test_profile_plot_and_trace_from_a_reduced_export():
    p = Profile.from_events(explorer.reduce_rows(*_tables()), LABEL)
    assert p.label == LABEL and p.summary().splitlines()[0].startswith(LABEL)
    assert p.total_us == pytest.approx(5.1)
    assert p.busy["DMA qSyncIO0"] == pytest.approx(2.8 / 5.1)       # its two transfers overlap: counted once
    assert p.roofline_us is None and "n/a" in p.summary()
    title = plot_timeline(p, title="in_proj").axes[0].get_title()
    assert LABEL in title and "modeled" not in title
    trace = trace_events(p)
    rows = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"DMA qSyncIO0", "DMA qSyncIO0 (2)", "TensorE"} <= rows  # the overlapping transfers got two rows
    assert json.loads(json.dumps(trace)) == trace


def test_load_a_json_export():
    p = explorer.load(os.path.join(FIXTURES, "explorer_profile.json"), label=LABEL)
    assert p.label == LABEL and p.instructions == 7


def test_parquet_needs_pyarrow_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if pyarrow were not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match="pip install pyarrow"):
        explorer.read_parquet(str(tmp_path))


def test_a_real_export_is_labelled_measured():
    assert explorer.MEASURED.startswith("measured on trn2")
