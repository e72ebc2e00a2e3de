"""Where a launch's modeled time goes (nkicpu.profile): covered time, DMA parts per core, the HBM
scratch chain, and what the programs of an LNC grid both read or write.

Each analysis is checked against what it must agree with: a brute-force count, the profile's own
timeline and HBM bytes, or a kernel built so that the answer follows from its code.
"""
import numpy as np
import pytest

import nkicpu
from nkicpu import costs
from nkicpu.profile import (PATH_PARTS, core_parts, covered_us, critical_path, critical_path_parts, dma_parts,
                            event_end, is_dma_lane, no_dma_spans, profile_capture, scratch_chain, shared_reads,
                            shared_writes)
from nkicpu_testing import F32, allocation_id, load, nisa, nki, nl, rand, store


@nki.jit
def load_compute_store(x):
    """A load, two compute instructions, a store: time with and without DMA moving data."""
    t = load(x)
    nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    return store(t)


@nki.jit
def through_scratch(x):
    """x -> SBUF -> an HBM scratch the kernel allocates -> SBUF -> out: two scratch transfers in a chain."""
    scratch = nl.ndarray(x.shape, x.dtype, buffer=nl.private_hbm, name="scratch")
    nisa.dma_copy(dst=scratch, src=load(x))
    return store(load(scratch))


@nki.jit
def halves(x):
    """Each program of a grid reads all of x and writes its own row of `out` (its program id)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="out")
    i = nl.program_id(0)
    t = load(x)
    nisa.dma_copy(dst=out[i:i + 1], src=t[i:i + 1])
    return out


@nki.jit
def both_write_all(x):
    """Every program writes all of `out` with the same bits (a duplicate write, not a race)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="out")
    nisa.dma_copy(dst=out, src=load(x))
    return out


def test_covered_time_counts_overlaps_once():
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 90, size=40)
    spans = [(int(s), int(s + d)) for s, d in zip(starts, rng.integers(0, 12, size=40))]
    grid = np.zeros(110, dtype=bool)                      # brute force: unit cells under some span
    for s, e in spans:
        grid[s:e] = True
    assert covered_us(spans) == grid.sum()
    assert covered_us([]) == 0.0


def test_dma_parts_add_up_and_agree_with_the_timeline():
    c = nkicpu.capture(load_compute_store)(rand((128, 512), F32))
    p = profile_capture(c)
    for band in costs.BANDS:
        d = dma_parts(c, band)
        assert d["full_rate"] + d["below_rate"] + d["no_dma"] == pytest.approx(d["total"])
        hbm = p.hbm_read_bytes + p.hbm_write_bytes
        assert d["full_rate"] == pytest.approx(hbm / costs.dma_bytes_per_us(band))
        assert d["below_rate"] >= 0 and d["no_dma"] > 0  # the compute runs with no DMA moving
    likely = dma_parts(c)
    assert likely["total"] == pytest.approx(p.total_us)
    gaps = no_dma_spans(p)
    assert sum(end - start for start, end in gaps) == pytest.approx(likely["no_dma"])
    dma = [e for e in p.events if e["lane"].startswith("DMA")]
    for start, end in gaps:                               # no DMA event overlaps a gap
        assert all(event_end(e) <= start or e["start_us"] >= end for e in dma)


def test_a_grid_splits_per_core_and_dma_parts_refuses_it():
    c = nkicpu.capture(halves[2])(rand((2, 64), F32))
    parts = core_parts(c)
    assert len(parts) == 2
    for core, d in enumerate(parts):
        mine = [i for i in c.instructions if i.core == core]
        assert d["full_rate"] == pytest.approx(sum(sum(costs.hbm_bytes(i)) for i in mine)
                                               / costs.dma_bytes_per_us(costs.LIKELY))
    assert max(d["total"] for d in parts) == pytest.approx(profile_capture(c).total_us)
    with pytest.raises(ValueError, match=r"dma_parts: the capture is a launch on 2 cores; use core_parts"):
        dma_parts(c)


def test_scratch_chain_follows_the_scratch_transfers():
    x = rand((128, 256), F32)
    c = nkicpu.capture(through_scratch)(x)
    p = profile_capture(c)
    transfers, nbytes, on_chain, latency = scratch_chain(c, p)
    assert (transfers, nbytes, on_chain) == (2, 2 * x.nbytes, 2)   # the store to it, the load back
    alloc = allocation_id(c, "scratch")
    scratch = [e for e, i in zip(p.events, c.instructions) if alloc in (i.reads[0].alloc, i.writes[0].alloc)]
    assert latency == pytest.approx(sum(e["args"]["latency_us"] for e in scratch))
    no_scratch = nkicpu.capture(load_compute_store)(x)
    assert scratch_chain(no_scratch, profile_capture(no_scratch)) == (0, 0, 0, 0.0)


def test_what_the_programs_of_a_grid_both_read_and_write():
    x = rand((2, 64), F32)
    c = nkicpu.capture(halves[2])(x)
    assert shared_reads(c) == {0: x.nbytes}               # both programs read all of x
    assert shared_writes(c, "out") == 0                   # each its own row
    dup = nkicpu.capture(both_write_all[2])(x)
    assert shared_writes(dup, "out") == x.size
    single = nkicpu.capture(halves)(x)
    assert shared_reads(single) == {0: 0}
    with pytest.raises(ValueError, match=r"expected one tensor named 'nothing', got 0"):
        shared_writes(c, "nothing")


def test_the_critical_path_of_an_lnc2_launch_names_each_cores_lanes():
    """gdn_block_tkg[2] (composition step 6): lanes are "c0 DMA q0", "c1 TensorE" ...; the path's
    parts add up to the likely total, and its DMA steps are the DMA lanes' events."""
    from kernels.configs import model_shard
    from kernels.reference import pipeline_inputs
    from kernels.registry import BY_NAME
    shape = model_shard("Qwen3.5-0.8B", 8).with_batch(1)
    step = BY_NAME["6_lnc2"]
    p = profile_capture(nkicpu.capture(step.load_kernel())(*step.arguments(shape, pipeline_inputs(shape))))
    assert p.cores == 2
    parts = critical_path_parts(p)
    assert sum(us for _, us in parts.values()) == pytest.approx(p.total_us)
    assert parts["moving"][0] > 0 and parts["tensor"][0] > 0
    for e, label, _ in critical_path(p):
        assert e["lane"].startswith(("c0 ", "c1 "))
        assert is_dma_lane(e["lane"]) == (label in (PATH_PARTS["moving"], PATH_PARTS["latency"]))
