"""Where a launch's modeled time goes (nkicpu.profile): covered time, DMA parts per core, the HBM
scratch chain, what the programs of an LNC grid both read or write, and lower bounds that hold for
every order of a launch's instructions.

Each analysis is checked against what it must agree with: a brute-force count, the profile's own
timeline and HBM bytes, or a kernel built so that the answer follows from its code.
"""
import numpy as np
import pytest

import nkicpu
from nkicpu import costs
from nkicpu.profile import (BOUNDS, PATH_PARTS, core_parts, covered_us, critical_path, critical_path_parts,
                            dma_parts, event_end, is_dma_lane, lower_bounds, no_dma_spans, profile_capture,
                            scratch_chain, shared_reads, shared_writes)
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
    step = BY_NAME["5_two_cores"]
    p = profile_capture(nkicpu.capture(step.load_kernel())(*step.arguments(shape, pipeline_inputs(shape))))
    assert p.cores == 2
    parts = critical_path_parts(p)
    assert sum(us for _, us in parts.values()) == pytest.approx(p.total_us)
    assert parts["moving"][0] > 0 and parts["tensor"][0] > 0
    for e, label, _ in critical_path(p):
        assert e["lane"].startswith(("c0 ", "c1 "))
        assert is_dma_lane(e["lane"]) == (label in (PATH_PARTS["moving"], PATH_PARTS["latency"]))


# -- lower bounds for every order -------------------------------------------------------------------

@nki.jit
def two_loads_add_store(x, y):
    """Two loads, VectorE adds them, one store: the DMAs' work decides the floor."""
    s = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=load(x), data2=load(y), op=nl.add)
    return store(s)


@nki.jit
def dependent_steps(x, n):
    """n VectorE instructions, each reading the last one's result (no DMA: x is only a shape)."""
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.memset(t, 1.0, engine=nisa.engine.vector)
    for _ in range(n - 1):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    return x


@nki.jit
def independent_steps(x, n):
    """n VectorE instructions on n tiles of their own, none waiting for another (no DMA)."""
    for _ in range(n):
        nisa.memset(nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf), 1.0, engine=nisa.engine.vector)
    return x


def _modeled(c):
    p = profile_capture(c)
    return {costs.BEST: p.best_us, costs.LIKELY: p.total_us}


@pytest.mark.parametrize("band", costs.BANDS)
def test_each_bound_of_a_small_kernel_is_its_hand_count(band):
    x, y = rand((128, 2048), F32), rand((128, 2048), F32, seed=1)
    c = nkicpu.capture(two_loads_add_store)(x, y)
    load_x, load_y, add, st = c.instructions
    rate = costs.dma_bytes_per_us(band)
    t = {i.index: costs.transfer(i, band) for i in (load_x, load_y, st)}
    assert all(v.max_bytes_per_us == rate for v in t.values())        # 128 partitions: all 16 engines
    alone = {k: v.latency_us + v.work_bytes / rate for k, v in t.items()}
    hand = costs.SEMAPHORE_US if band == costs.LIKELY else 0.0        # VectorE waits on a DMA queue
    after_load = hand + costs.engine_us(add, band) + alone[st.index]
    want = {"bytes": 3 * x.nbytes / rate,
            "engine": alone[load_x.index] + after_load,               # the add: after a load, then the store
            "chain": alone[load_x.index] + after_load,
            # both loads' work, then what follows them (with the store's work too, nothing follows)
            "last_dma": t[load_x.index].latency_us
                        + (t[load_x.index].work_bytes + t[load_y.index].work_bytes) / rate + after_load}
    want["floor"] = want["last_dma"]
    (got,) = lower_bounds(c, band)
    parts = got.pop("last_dma_parts")
    assert got == pytest.approx(want)
    assert got["floor"] <= _modeled(c)[band]
    # last_dma's terms: both loads, the first one's latency, their work, what follows them
    assert parts["dmas"] == 2 and parts["last"] in (load_x.index, load_y.index)
    assert parts["start"] + parts["work"] + parts["after"] == pytest.approx(got["last_dma"])


@pytest.mark.parametrize("band", costs.BANDS)
def test_a_chain_of_dependent_instructions_bounds_by_its_sum(band):
    n, x = 6, rand((128, 512), F32)
    for kernel, chain_of in ((dependent_steps, sum), (independent_steps, max)):
        c = nkicpu.capture(kernel)(x, n)
        us = [costs.engine_us(i, band) for i in c.instructions]
        (got,) = lower_bounds(c, band)
        assert got["chain"] == pytest.approx(chain_of(us))
        assert got["engine"] == pytest.approx(sum(us))       # one engine does all of them
        assert got["bytes"] == got["last_dma"] == 0.0


@nki.jit
def three_activations(x):
    """ScalarE: exp, sigmoid, exp of one VectorE tile; program order loads a table three times."""
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.memset(t, 1.0, engine=nisa.engine.vector)
    for op in (nl.exp, nl.sigmoid, nl.exp):
        nisa.activation(dst=nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf), op=op, data=t)
    return x


def test_scalare_pays_one_table_load_per_table_in_any_order():
    c = nkicpu.capture(three_activations)(rand((128, 512), F32))
    fill, *acts = c.instructions
    modeled = _modeled(c)
    for band in costs.BANDS:
        ins_us = sum(costs.engine_us(i, band) for i in acts)
        (got,) = lower_bounds(c, band)
        if band == costs.LIKELY:          # exp and sigmoid once each; program order pays 3 loads
            assert got["engine"] == pytest.approx(ins_us + 2 * costs.ACT_TABLE_SWITCH_US)
            assert modeled[band] >= ins_us + 3 * costs.ACT_TABLE_SWITCH_US
        else:                             # no table loads: the fill, then the three in a row
            assert got["engine"] == pytest.approx(costs.engine_us(fill, band) + ins_us)
        assert got["floor"] == got["engine"] <= modeled[band]


@nki.jit
def software_dge_loads(x, n):
    """n loads whose descriptors GpSimd writes (dge_mode=swdge), no compute."""
    for _ in range(n):
        nisa.dma_copy(dst=nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf), src=x, dge_mode=nisa.dge_mode.swdge)
    return x


@pytest.mark.parametrize("band", costs.BANDS)
def test_software_dge_descriptors_come_before_their_dma_and_busy_gpsimd(band):
    n, x = 12, rand((128, 64), F32)
    c = nkicpu.capture(software_dge_loads)(x, n)
    t = costs.transfer(c.instructions[0], band)
    (got,) = lower_bounds(c, band)
    assert got["engine"] == pytest.approx(n * costs.SWDGE_GPSIMD_US)
    assert got["chain"] == pytest.approx(costs.SWDGE_GPSIMD_US + t.latency_us + t.work_bytes / t.max_bytes_per_us)
    assert got["floor"] <= _modeled(c)[band]


@pytest.mark.parametrize("cores", [1, 2])
def test_the_floor_is_never_above_the_modeled_time(cores):
    """A stage kernel and the fused kernel at a tiny shape, on one core and two, both estimates."""
    from kernels.configs import GDNShape, model_shard
    from kernels.gdn_block import gdn_block_tkg
    from kernels.reference import make_inputs, pipeline_inputs
    from kernels.registry import BY_NAME
    shape = model_shard("Qwen3.5-0.8B", 8).with_batch(1)
    stage = BY_NAME["gated_delta_rule"]
    tiny = make_inputs(GDNShape(B=2, H=128, nk=2, nv=4, dk=32, dv=32, K=4, name="tiny"), seed=1)
    captures = [nkicpu.capture(gdn_block_tkg[cores] if cores > 1 else gdn_block_tkg)(*tiny.values())]
    if cores == 1:
        captures.append(nkicpu.capture(stage.load_kernel())(*stage.arguments(shape, pipeline_inputs(shape))))
    for c in captures:
        modeled = _modeled(c)
        for band in costs.BANDS:
            bounds = lower_bounds(c, band)
            assert len(bounds) == cores
            for b in bounds:
                assert set(b) == set(BOUNDS) | {"floor", "last_dma_parts"}
                assert b["floor"] == max(b[k] for k in BOUNDS) <= modeled[band]
                assert b["floor"] > 0.5 * modeled[band]        # not vacuous
