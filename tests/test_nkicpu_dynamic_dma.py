"""DMA gathers and scatters by runtime index: `.ap(..., scalar_offset=...)` / `vector_offset=` on the
src (gather) or dst (scatter) of `nisa.dma_copy`, `oob_mode` skip and error, the DGE modes they take,
and how the cost model orders them (nkicpu/indirect.py, nkicpu/isa.py dma_copy, nkicpu/schedule.py
rule 2).

Sources: SDK isa stub (nki/api/nki/isa/__init__.py) dma_copy ("the src and dst tensors can have a
dynamic start address", "gather or scatter", "oob_mode.skip"); nki/deep-dives/nki-dge.rst ("How
.ap() Affects DGE Mode"); nki/deep-dives/nki-aps.rst ("Dynamic Access with scalar_offset and
vector_offset"); the NKI library skips padding rows that way (core/moe/moe_cte/bwmm_shard_on_block.py,
experimental/transformer/attention_block_tkg.py).
"""
import re

import numpy as np
import pytest

import nkicpu
from nkicpu.errors import DmaIndexError
from nkicpu.schedule import dependencies, schedule
from nkicpu_testing import F32, NkiValidationError, assert_bits_equal, bits, load, nisa, nki, nl, rand, store

I32 = np.int32
SKIP, ERROR = nisa.oob_mode.skip, nisa.oob_mode.error
N, F = 8, 16              # pool rows, elements per row


def pool_values(seed=1):
    """A pool whose bits a stray write would change: random values, with -0.0 and a NaN payload."""
    pool = rand((N, F), seed=seed)
    pool[0, 0], pool[N - 1, F - 1] = -0.0, np.uint32(0x7FC01234).view(F32)
    return pool


def index_tile(index, rows):
    """An SBUF int32 index tile of `rows` partitions, loaded from a kernel argument."""
    t = nl.ndarray((rows, 1), index.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=index)
    return t


# -- kernels ----------------------------------------------------------------------------------

@nki.jit
def scatter_scalar(pool, rows, slot, oob, dge, trigger):
    """Write `rows` ([R, F]) into rows slot .. slot+R-1 of `pool` in place."""
    R = rows.shape[0]
    nisa.dma_copy(dst=pool.ap([[F, R], [1, F]], 0, scalar_offset=index_tile(slot, 1), indirect_dim=0),
                  src=load(rows), oob_mode=oob, dge_mode=dge, engine=trigger)
    return pool


@nki.jit
def scatter_vector(pool, rows, slots, oob, dge):
    """Partition p of `rows` ([P, F]) goes to row slots[p] of `pool`, in place."""
    P = rows.shape[0]
    nisa.dma_copy(dst=pool.ap([[F, P], [1, F]], 0, vector_offset=index_tile(slots, P), indirect_dim=0),
                  src=load(rows), oob_mode=oob, dge_mode=dge)
    return pool


@nki.jit
def gather_scalar(pool, old, slot, oob, dge, trigger):
    """Rows slot .. slot+R-1 of `pool` over a tile holding `old` ([R, F])."""
    R = old.shape[0]
    t = load(old)
    nisa.dma_copy(dst=t, src=pool.ap([[F, R], [1, F]], 0, scalar_offset=index_tile(slot, 1), indirect_dim=0),
                  oob_mode=oob, dge_mode=dge, engine=trigger)
    return store(t)


@nki.jit
def gather_vector(pool, old, slots, oob, dge):
    """Partition p: row slots[p] of `pool`, over a tile holding `old` ([P, F])."""
    P = old.shape[0]
    t = load(old)
    nisa.dma_copy(dst=t, src=pool.ap([[F, P], [1, F]], 0, vector_offset=index_tile(slots, P), indirect_dim=0),
                  oob_mode=oob, dge_mode=dge)
    return store(t)


UNKNOWN, HWDGE, SWDGE, NONE = (nisa.dge_mode.unknown, nisa.dge_mode.hwdge, nisa.dge_mode.swdge,
                               nisa.dge_mode.none)
NO_ENGINE = nisa.engine.unknown


def run_scatter_scalar(pool, rows, slot, oob=ERROR, dge=UNKNOWN, trigger=NO_ENGINE):
    return nki.simulate(scatter_scalar)(pool, rows, np.array([[slot]], I32), oob, dge, trigger)


def run_scatter_vector(pool, rows, slots, oob=ERROR, dge=UNKNOWN):
    return nki.simulate(scatter_vector)(pool, rows, np.array(slots, I32).reshape(-1, 1), oob, dge)


def run_gather_scalar(pool, old, slot, oob=ERROR, dge=UNKNOWN, trigger=NO_ENGINE):
    return nki.simulate(gather_scalar)(pool, old, np.array([[slot]], I32), oob, dge, trigger)


def run_gather_vector(pool, old, slots, oob=ERROR, dge=UNKNOWN):
    return nki.simulate(gather_vector)(pool, old, np.array(slots, I32).reshape(-1, 1), oob, dge)


# -- scatter against NumPy --------------------------------------------------------------------

def test_scalar_offset_scatter_writes_rows_at_the_slot():
    pool, rows = pool_values(), rand((2, F), seed=2)
    want = pool.copy()
    want[5:7] = rows
    assert_bits_equal(run_scatter_scalar(pool.copy(), rows, 5), want)


def test_vector_offset_scatter_writes_one_row_per_partition():
    pool, rows = pool_values(), rand((4, F), seed=2)
    slots = [6, 1, 3, 0]
    want = pool.copy()
    want[slots] = rows
    assert_bits_equal(run_scatter_vector(pool.copy(), rows, slots), want)


def test_the_partition_step_of_a_vector_offset_dst_is_ignored():
    """nki-aps.rst: "the stride specified in the leading dimension of the pattern in the .ap() is currently
    ignored" (the NKI library writes 1 there, experimental/transformer/attention_block_tkg.py); 0 is no
    broadcast dst."""
    @nki.jit
    def k(pool, rows, slots):
        nisa.dma_copy(dst=pool.ap([[0, 2], [1, F]], 0, vector_offset=index_tile(slots, 2), indirect_dim=0),
                      src=load(rows))
        return pool

    pool, rows = pool_values(), rand((2, F), seed=2)
    want = pool.copy()
    want[[5, 2]] = rows
    assert_bits_equal(nki.simulate(k)(pool.copy(), rows, np.array([[5], [2]], I32)), want)


def test_a_scatter_into_an_argument_updates_the_callers_array_and_only_its_rows():
    """nkicpu writes kernel-modified arguments back (as the SDK simulator does); the rows the scatter
    does not write keep their exact bits (-0.0 and a NaN payload included)."""
    pool, rows = pool_values(), rand((2, F), seed=3)
    caller = pool.copy()
    run_scatter_vector(caller, rows, [4, 2])
    want = pool.copy()
    want[[4, 2]] = rows
    assert_bits_equal(caller, want)
    assert np.array_equal(bits(caller[[0, 1, 3, 5, 6, 7]]), bits(pool[[0, 1, 3, 5, 6, 7]]))
    caller = pool.copy()
    run_scatter_scalar(caller, rows, 6)
    want = pool.copy()
    want[6:8] = rows
    assert_bits_equal(caller, want)


def test_a_scatter_converts_dtypes_as_a_direct_dma_does():
    @nki.jit
    def k(pool, rows, slot):
        nisa.dma_copy(dst=pool.ap([[F, 1], [1, F]], 0, scalar_offset=index_tile(slot, 1), indirect_dim=0),
                      src=load(rows))
        return pool

    pool, rows = np.zeros((N, F), F32), rand((1, F)).astype(np.float16)
    got = nki.simulate(k)(pool, rows, np.array([[2]], I32))
    assert_bits_equal(got[2:3], rows.astype(F32))


def test_the_base_tensor_is_the_view_ap_is_called_on():
    """The NKI library scatters into `V_cache.reshape((B * S_max_ctx, d_head)).ap(..., vector_offset=...)`
    (experimental/transformer/attention_block_tkg.py): rows are rows of the reshape."""
    @nki.jit
    def k(cache, rows, slots):
        flat = cache.reshape((4 * 3, F))
        nisa.dma_copy(dst=flat.ap([[1, 2], [1, F]], 0, vector_offset=index_tile(slots, 2), indirect_dim=0),
                      src=load(rows))
        return cache

    cache, rows = np.zeros((4, 3, F), F32), rand((2, F))
    got = nki.simulate(k)(cache, rows, np.array([[7], [11]], I32))
    want = np.zeros((12, F), F32)
    want[[7, 11]] = rows
    assert_bits_equal(got, want.reshape(4, 3, F))


# -- oob_mode=skip ----------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-1, N, 2 ** 31 - 1])
def test_skip_scalar_moves_nothing(bad):
    pool, rows, old = pool_values(), rand((2, F), seed=2), rand((2, F), seed=4)
    caller = pool.copy()
    assert_bits_equal(run_scatter_scalar(caller, rows, bad, oob=SKIP), pool)
    assert_bits_equal(caller, pool)
    assert_bits_equal(run_gather_scalar(pool, old, bad, oob=SKIP), old)


def test_skip_scalar_counts_the_pattern_leaving_the_tensor():
    """Two rows from slot N-1 would end past the pool: the whole transfer is skipped."""
    pool, rows = pool_values(), rand((2, F), seed=2)
    assert_bits_equal(run_scatter_scalar(pool.copy(), rows, N - 1, oob=SKIP), pool)


def test_skip_vector_skips_only_the_partitions_out_of_range():
    pool, rows, old = pool_values(), rand((4, F), seed=2), rand((4, F), seed=4)
    slots = [3, -1, N, 0]
    want = pool.copy()
    want[[3, 0]] = rows[[0, 3]]
    assert_bits_equal(run_scatter_vector(pool.copy(), rows, slots, oob=SKIP), want)
    want = old.copy()                                 # partitions 1 and 2 keep their old contents
    want[[0, 3]] = pool[[3, 0]]
    assert_bits_equal(run_gather_vector(pool, old, slots, oob=SKIP), want)


def test_skip_takes_the_library_s_uint32_max_padding_index():
    """attention_block_tkg.py: "skip writes for invalid batch (position_id = uint32_max)"."""
    pool, rows = pool_values(), rand((2, F), seed=2)
    got = nki.simulate(scatter_vector)(pool.copy(), rows, np.array([[5], [2 ** 32 - 1]], np.uint32), SKIP, UNKNOWN)
    want = pool.copy()
    want[5] = rows[0]
    assert_bits_equal(got, want)


def test_skip_on_a_dma_without_a_dynamic_index_changes_nothing():
    """oob_mode.skip skips a transfer "for a given dynamic address or index when it is out of bound"
    (dma_copy docs): a static DMA has none, so it copies as under error."""
    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x, oob_mode=SKIP)
        return store(t)

    x = rand((4, F))
    assert_bits_equal(nki.simulate(k)(x), x)


# -- oob_mode=error: DmaIndexError ------------------------------------------------------------

def _expect(call, arg, index, partition, where="outside"):
    with pytest.raises(DmaIndexError) as info:
        call()
    e = info.value
    assert isinstance(e, IndexError)
    assert (e.instruction, e.argument, e.index, e.partition) == ("nisa.dma_copy", arg, index, partition)
    message = str(e)
    at = "scalar_offset" if partition is None else f"vector_offset partition {partition}"
    assert message.startswith(f"nisa.dma_copy: {arg} index {index} is {where} dim 0 of arg0[{N}, {F}] ({N} rows) "
                              f"at {at}"), message
    assert "oob_mode=error" in message
    return message


@pytest.mark.parametrize("bad", [-1, N])
def test_error_names_the_scalar_index(bad):
    pool, one = pool_values(), rand((1, F))
    message = _expect(lambda: run_scatter_scalar(pool.copy(), one, bad), "dst", bad, None)
    assert "; valid indices are 0..7 (oob_mode=error" in message
    _expect(lambda: run_gather_scalar(pool, one, bad), "src", bad, None)


@pytest.mark.parametrize("bad", [-1, N])
def test_error_names_the_vector_index_and_its_partition(bad):
    pool, rows = pool_values(), rand((4, F))
    _expect(lambda: run_scatter_vector(pool.copy(), rows, [0, 1, bad, 3]), "dst", bad, 2)
    _expect(lambda: run_gather_vector(pool, rows, [0, bad, 2, 3]), "src", bad, 1)


def test_error_names_the_rows_at_which_the_pattern_fits():
    pool = pool_values()
    message = _expect(lambda: run_gather_scalar(pool, rand((2, F)), N - 1), "src", N - 1, None, where="inside")
    assert (f"but there the pattern [[{F}, 2], [1, {F}]] from element 0 leaves the tensor's {N * F} elements; "
            f"valid indices are 0..6") in message
    message = _expect(lambda: run_gather_scalar(pool, rand((2, F)), N), "src", N, None)
    assert "valid indices are 0..6 (at other rows the pattern" in message


def test_error_leaves_the_callers_array_alone():
    pool = pool_values()
    caller = pool.copy()
    with pytest.raises(DmaIndexError):
        run_scatter_vector(caller, rand((2, F)), [1, -1])
    assert_bits_equal(caller, pool)


# -- the DGE modes (nki-dge.rst, 'How .ap() Affects DGE Mode') ---------------------------------

def test_vector_offset_with_hwdge_is_refused():
    with pytest.raises(NkiValidationError, match=r"\[indirect-dge\] .*vector_offset .*needs software DGE"):
        run_scatter_vector(pool_values(), rand((2, F)), [0, 1], dge=HWDGE)
    with pytest.raises(NkiValidationError, match=r"\[indirect-dge\] .*not none"):
        run_gather_vector(pool_values(), rand((2, F)), [0, 1], dge=NONE)


@pytest.mark.parametrize("trigger", [nisa.engine.sync, nisa.engine.scalar], ids=["sync", "scalar"])
def test_scalar_offset_runs_on_hwdge_from_either_trigger(trigger):
    pool, rows = pool_values(), rand((1, F))
    want = pool.copy()
    want[3] = rows[0]
    assert_bits_equal(run_scatter_scalar(pool.copy(), rows, 3, dge=HWDGE, trigger=trigger), want)
    assert_bits_equal(run_gather_scalar(pool, rows, 3, dge=HWDGE, trigger=trigger), pool[3:4])


@pytest.mark.parametrize("dge", [UNKNOWN, SWDGE], ids=["unknown", "swdge"])
def test_scalar_offset_runs_on_the_other_dge_modes(dge):
    pool = pool_values()
    assert_bits_equal(run_gather_scalar(pool, rand((1, F)), 2, dge=dge), pool[2:3])


def test_a_dynamic_offset_without_a_dge_is_refused():
    with pytest.raises(NkiValidationError, match=r"\[indirect-dge\] .*dynamic start address.*not none"):
        run_scatter_scalar(pool_values(), rand((1, F)), 0, dge=NONE)


# -- the record and the schedule ----------------------------------------------------------------

@nki.jit
def gather_scatter_gather(pool, slots):
    """Gather row slots[0] (static pattern at row 0), scatter it to row slots[1] (static pattern at row
    1), gather row slots[2] (static pattern at row 2): disjoint patterns, rows only the run knows."""
    a = index_tile(slots[0:1], 1)
    b = index_tile(slots[1:2], 1)
    c = index_tile(slots[2:3], 1)
    t = nl.ndarray((1, F), pool.dtype, buffer=nl.sbuf)
    u = nl.ndarray((1, F), pool.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=pool.ap([[F, 1], [1, F]], 0, scalar_offset=a, indirect_dim=0))
    nisa.dma_copy(dst=pool.ap([[F, 1], [1, F]], F, scalar_offset=b, indirect_dim=0), src=t)
    nisa.dma_copy(dst=u, src=pool.ap([[F, 1], [1, F]], 2 * F, scalar_offset=c, indirect_dim=0))
    nisa.dma_copy(dst=u, src=pool[5:6])                  # a static read of the pool after them
    return store(u)


def test_an_indirect_access_is_recorded_at_its_pattern_and_marked_dynamic():
    cap = nkicpu.capture(gather_scatter_gather)(pool_values(), np.array([[4], [1], [0]], I32))
    gather, scatter = cap.instructions[3], cap.instructions[4]
    src, dst = gather.reads[0], scatter.writes[0]
    assert (src.dynamic, src.offset, src.pattern, src.nbytes) == ("scalar", 0, ((F, 1), (1, F)), F * 4)
    assert (dst.dynamic, dst.offset, dst.pattern) == ("scalar", F, ((F, 1), (1, F)))
    assert list(src.indices()) == list(range(4 * F, 5 * F))            # row 4, where it really read
    assert list(dst.indices()) == list(range(2 * F, 3 * F))            # row 1 + 1 (static offset F)
    assert gather.reads[1].alloc == cap.instructions[0].writes[0].alloc  # it reads its index tile
    assert gather.writes[0].dynamic is None


def test_indirect_accesses_wait_for_every_access_of_their_tensor():
    cap = nkicpu.capture(gather_scatter_gather)(pool_values(), np.array([[4], [1], [0]], I32))
    slots = schedule(cap.instructions, {a: i.shape for a, i in cap.allocations.items()})
    gather, scatter, later, static = 3, 4, 5, 6
    assert gather in slots[scatter].deps          # write after read, though the patterns are disjoint
    assert scatter in slots[later].deps           # read after write
    assert scatter in slots[static].deps          # a static read after an indirect write
    assert gather not in dependencies(cap.instructions)[later]    # two reads do not conflict
    what_if = dependencies(cap.instructions, dynamic_waits=False)   # rows known: no such waits
    assert scatter not in what_if[later] and scatter in dependencies(cap.instructions)[later]


def test_two_indirect_writes_do_not_wait_for_each_other():
    """The one assumption of rule 2: two scatters of a tensor are not ordered (a gather still
    waits for both)."""
    @nki.jit
    def k(pool, slots):
        t = load(pool[0:1])
        a, b = index_tile(slots[0:1], 1), index_tile(slots[1:2], 1)
        for idx in (a, b):
            nisa.dma_copy(dst=pool.ap([[F, 1], [1, F]], 0, scalar_offset=idx, indirect_dim=0), src=t)
        u = nl.ndarray((1, F), pool.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=pool.ap([[F, 1], [1, F]], 0, scalar_offset=a, indirect_dim=0))
        return store(u)

    ins = nkicpu.capture(k)(pool_values(), np.array([[3], [5]], I32)).instructions
    first, second, gather = [i.index for i in ins if i.opcode == "dma_copy"][-4:-1]
    deps = dependencies(ins)
    assert first not in deps[second]
    assert {first, second} <= set(deps[gather])


def test_an_indirect_write_waits_for_static_reads_and_writes():
    @nki.jit
    def k(pool, slot):
        t = load(pool[0:1])                                    # static read of row 0
        nisa.dma_copy(dst=pool[6:7], src=t)                    # static write of row 6
        nisa.dma_copy(dst=pool.ap([[F, 1], [1, F]], 3 * F, scalar_offset=index_tile(slot, 1), indirect_dim=0),
                      src=t)
        return pool

    ins = nkicpu.capture(k)(pool_values(), np.array([[1]], I32)).instructions
    assert {0, 1, 2} <= set(dependencies(ins)[3])     # the read, the write and its index load


def test_a_vector_offset_dma_at_dge_unknown_gets_gpsimd_descriptors():
    cap = nkicpu.capture(gather_vector)(pool_values(), rand((2, F)), np.array([[1], [2]], I32), ERROR, UNKNOWN)
    gather = next(i.index for i in cap.instructions if any(a.dynamic for a in i.reads))
    slots = schedule(cap.instructions)
    work = [s for s in slots if s.work]
    assert [(s.work, s.lane, s.index) for s in work] == [("SWDGE descriptors", "GpSimd", gather)]
    assert slots[gather].lane == "DMA GpSimd"
    assert nkicpu.costs.dge_mode(cap.instructions[gather]) == "swdge"
    # a scalar_offset DMA at unknown is left to the compiler (no GpSimd work)
    cap = nkicpu.capture(gather_scalar)(pool_values(), rand((1, F)), np.array([[1]], I32), ERROR, UNKNOWN,
                                        NO_ENGINE)
    assert not [s for s in schedule(cap.instructions) if s.work]


# -- LNC grids: no waits across cores, races checked at the rows really touched -------------------

def _grid(body):
    @nki.jit
    def k(pool, slots):
        return body(pool, slots, nl.program_id(0))
    return k[2]


def _scatter_own_row_read_row(read_row):
    """Program 0 scatters to row slots[0] (static pattern at row 0); program 1 then reads `read_row`."""
    def body(pool, slots, i):
        out = nl.ndarray((1, F), pool.dtype, buffer=nl.shared_hbm)
        if i == 0:
            t = load(pool[7:8])
            nisa.dma_copy(dst=pool.ap([[F, 1], [1, F]], 0, scalar_offset=index_tile(slots[0:1], 1), indirect_dim=0),
                          src=t)
        else:
            nisa.dma_copy(dst=out, src=load(pool[read_row:read_row + 1]))
        return out
    return body


def test_grid_race_checks_use_the_rows_an_indirect_write_touched():
    pool = pool_values()
    slots = np.array([[3]], I32)
    nki.simulate(_grid(_scatter_own_row_read_row(0)))(pool.copy(), slots)   # row 0 is only the pattern's
    with pytest.raises(NkiValidationError, match=r"\[lnc-race\] nisa.dma_copy in program 1: reads 16 element"):
        nki.simulate(_grid(_scatter_own_row_read_row(3)))(pool.copy(), slots)


def test_no_conservative_waits_across_cores():
    cap = nkicpu.capture(_grid(_scatter_own_row_read_row(0)))(pool_values(), np.array([[3]], I32))
    deps = dependencies(cap.instructions)
    core = [i.core for i in cap.instructions]
    for i, ins in enumerate(cap.instructions):
        assert all(core[d] == core[i] for d in deps[i]), (i, deps[i])
