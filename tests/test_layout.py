"""kernels/layout.py: HBM rows <-> channel-major SBUF tiles (load_channel_major, store_rows).

Round trips must be bit-exact (bf16 and fp32, including -0.0, subnormals and infinities), the tile
in between must be exactly the channel-major transpose, and every HBM DMA must move one contiguous
run per partition: the whole row, or a piece of at least MIN_PIECE_BYTES when few rows are cut
over more partitions. Shapes: one row, rows not a multiple of 128, more than 128 rows, C = 128 * T,
channel tiles narrower than 128 (the tail tiles of the callers), the [R, C, K] form (conv_state,
conv_weight, hidden), and column-slice views.
"""
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
import nki.isa as nisa
import nki.language as nl
import nkicpu
from kernels.layout import MIN_PIECE_BYTES, load_channel_major, store_rows
from tests.gdn_testing import hbm_runs

BF16 = ml_dtypes.bfloat16

# (rows R, channels C, inner dim K or None, channels per tile P, dtype)
CASES = [
    (1, 128, None, 128, BF16),          # one row, one tile
    (8, 1280, None, 128, BF16),         # a decode batch, T = 10, rows cut into 5 pieces of 512 B
    (8, 6144, None, 128, BF16),         # rows cut into 16 pieces of 768 B
    (300, 256, None, 128, BF16),        # R > 128, not a multiple of 128
    (200, 384, None, 128, np.float32),  # fp32, R > 128
    (3, 160, None, 80, BF16),           # 80-channel tiles (a caller's tail tile)
    (6, 16, None, 16, BF16),            # tiny head dim
    (3, 15, None, 5, BF16),             # odd rows and odd channels per tile: bf16 transposes go fp32
    (8, 1280, 4, 128, BF16),            # conv_state: rows cut into 10 pieces of 1 KiB
    (1, 6144, 4, 128, BF16),            # one long conv_state row over 48 partitions
    (130, 256, 3, 128, BF16),           # K = 3, R > 128
    (48, 128, 4, 128, np.float32),      # conv_weight as rows [T, 128, K]
    (8, 128, 40, 128, BF16),            # hidden [B, 128, KT] at H = 5120
    (130, 128, 8, 128, BF16),           # hidden-like, K * rows beyond one PSUM bank
    (5, 96, 2, 48, np.float32),         # fp32 with K, narrow tiles
]


def case_id(case):
    R, C, K, P, dtype = case
    return f"R{R}-C{C}" + (f"-K{K}" if K else "") + f"-P{P}-{np.dtype(dtype).name}"


def rows_of(case, seed=0):
    """Random rows with -0.0, subnormals, the largest finite values and infinities sprinkled in."""
    R, C, K, P, dtype = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((R, C) + ((K,) if K else ()), dtype=np.float32)
    specials = np.array([-0.0, 1e-40, -1e-40, 3.0e38, -3.0e38, np.inf, -np.inf], np.float32)
    flat = x.reshape(-1)
    every = np.arange(3, flat.size, 11)
    flat[every] = np.resize(specials, every.size)
    return x.astype(dtype)


def channel_major(x, P):
    """What the tile must hold: [R, C(, K)] -> [P, nt, R(, K)], channel t * P + p on partition p."""
    R, C = x.shape[:2]
    t = x.reshape((R, C // P, P) + x.shape[2:])
    return np.ascontiguousarray(np.moveaxis(t, (0, 1, 2), (2, 1, 0)))


@nki.jit
def round_trip(src, P, tile_dtype):
    """load_channel_major, a raw copy of the tile out, then store_rows of the tile."""
    R, C = src.shape[0], src.shape[1]
    shape = (P, C // P, R) + tuple(src.shape[2:])
    dtype = nl.bfloat16 if tile_dtype == "bfloat16" else src.dtype
    tile = nl.ndarray(shape, dtype, name="tile")
    load_channel_major(tile, src)
    tile_out = nl.ndarray(shape, dtype, buffer=nl.shared_hbm, name="tile_out")
    nisa.dma_copy(tile_out, tile)
    rows = nl.ndarray(src.shape, dtype, buffer=nl.shared_hbm, name="rows")
    store_rows(rows, tile)
    return tile_out, rows


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_round_trip_is_bit_exact(case):
    x = rows_of(case)
    before = x.copy()
    tile, rows = nki.simulate(round_trip)(x, case[3], "same")
    assert np.array_equal(x.view(np.uint8), before.view(np.uint8)), "the input was written"
    want = channel_major(x, case[3])
    assert tile.dtype == x.dtype and tile.shape == want.shape
    assert np.array_equal(tile.view(np.uint8), want.view(np.uint8)), "tile is not the channel-major transpose"
    assert rows.dtype == x.dtype and rows.shape == x.shape
    assert np.array_equal(rows.view(np.uint8), x.view(np.uint8)), "round trip is not bit-exact"


def test_2d_tile_without_tile_axis():
    """A [P, R] tile (T = 1 left out), as gated_delta_rule and rmsnorm_gated pass them."""

    @nki.jit
    def kernel(src):
        R, C = src.shape
        tile = nl.ndarray((C, R), src.dtype)
        load_channel_major(tile, src)
        tile_out = nl.ndarray((C, R), src.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(tile_out, tile)
        rows = nl.ndarray((R, C), src.dtype, buffer=nl.shared_hbm)
        store_rows(rows, tile)
        return tile_out, rows

    x = rows_of((200, 64, None, 64, BF16))
    tile, rows = nki.simulate(kernel)(x)
    assert np.array_equal(tile.view(np.uint16), x.T.view(np.uint16))
    assert np.array_equal(rows.view(np.uint16), x.view(np.uint16))


def test_fp32_rows_round_once_into_a_bf16_tile():
    """An fp32 source into a bf16 tile (rmsnorm_gated's fp32 o): one rounding, in the eviction."""
    case = (130, 256, None, 128, np.float32)
    x = rows_of(case, seed=1)
    tile, rows = nki.simulate(round_trip)(x, 128, "bfloat16")
    x16 = x.astype(BF16)
    assert tile.dtype == BF16
    assert np.array_equal(tile.view(np.uint16), channel_major(x16, 128).view(np.uint16))
    assert np.array_equal(rows.view(np.uint16), x16.view(np.uint16))


@nki.jit
def by_column_slices(src, widths):
    """The callers' pattern: channel ranges of one tensor (full tiles, then a narrower tail tile)
    through column-slice views, each loaded and stored on its own."""
    R = src.shape[0]
    out = nl.ndarray(src.shape, src.dtype, buffer=nl.shared_hbm)
    c0 = 0
    for P, T in widths:
        c1 = c0 + P * T
        tile = nl.ndarray((P, T, R) + tuple(src.shape[2:]), src.dtype)
        load_channel_major(tile, src[:, c0:c1])
        store_rows(out[:, c0:c1], tile)
        c0 = c1
    return out


@pytest.mark.parametrize("K", [None, 4])
def test_column_slices_with_a_tail_tile(K):
    x = rows_of((8, 128 * 3 + 80, K, 128, BF16), seed=2)
    out = nki.simulate(by_column_slices)(x, ((128, 2), (128, 1), (80, 1)))
    assert np.array_equal(out.view(np.uint16), x.view(np.uint16))


# --- the DMAs: contiguous runs per partition -------------------------------------------------------

@nki.jit
def load_then_store(src, P):
    """Nothing but the two building blocks: every DMA here is one of theirs."""
    R, C = src.shape[0], src.shape[1]
    tile = nl.ndarray((P, C // P, R) + tuple(src.shape[2:]), src.dtype, name="tile")
    load_channel_major(tile, src)
    rows = nl.ndarray(src.shape, src.dtype, buffer=nl.shared_hbm, name="rows")
    store_rows(rows, tile)
    return rows


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_every_dma_moves_one_long_contiguous_run_per_partition(case):
    """One DMA per 128 rows each way; each moves one contiguous HBM run per partition: the whole
    row (C * K * itemsize bytes) or an equal piece of it of at least MIN_PIECE_BYTES."""
    R, C, K, P, dtype = case
    row_bytes = C * (K or 1) * np.dtype(dtype).itemsize
    x = rows_of(case)
    c = nkicpu.capture(load_then_store)(x, P)
    assert np.array_equal(c.outputs.view(np.uint8), x.view(np.uint8))
    dmas = [i for i in c.instructions if i.opcode == "dma_copy"]
    loads = [i for i in dmas if i.writes[0].on_chip]
    stores = [i for i in dmas if i.reads[0].on_chip]
    assert len(loads) == len(stores) == -(-R // nl.tile_size.pmax) and len(dmas) == len(loads) + len(stores)
    for ins in dmas:
        partitions, run, contiguous = hbm_runs(ins)
        assert contiguous, f"not one HBM run per partition: {ins.reads[0].pattern} -> {ins.writes[0].pattern}"
        whole_row = run == row_bytes
        assert whole_row or (MIN_PIECE_BYTES <= run < row_bytes and row_bytes % run == 0), (run, row_bytes)
        assert partitions <= nl.tile_size.pmax


@pytest.mark.parametrize("case, partitions, run", [
    ((8, 384, None, 128, BF16), 8, 768),       # 768 B rows of 3 tiles: too short to cut
    ((8, 1280, None, 128, BF16), 40, 512),     # 2.5 KiB rows in 5 pieces
    ((8, 6144, None, 128, BF16), 128, 768),    # 12 KiB rows in 16 pieces: all 128 partitions
    ((8, 1280, 4, 128, BF16), 80, 1024),       # 10 KiB conv_state rows in 10 pieces, one tile each
    ((1, 6144, 4, 128, BF16), 48, 1024),       # one 48 KiB row in 48 pieces
    ((16, 8192, 4, 128, BF16), 128, 8192),     # 64 KiB rows in 8 pieces: all 128 partitions
    ((200, 6144, None, 128, BF16), 128, 12288),  # a full chunk of 128 rows is not cut
])
def test_few_rows_are_cut_over_more_partitions(case, partitions, run):
    """A DMA gets one DMA engine per 8 partitions, so few long rows are cut into pieces of whole
    channel tiles, at least MIN_PIECE_BYTES each, over up to 128 partitions."""
    c = nkicpu.capture(load_then_store)(rows_of(case), case[3])
    first_load = next(i for i in c.instructions if i.opcode == "dma_copy")
    assert hbm_runs(first_load) == (partitions, run, True)


def test_column_slices_of_wider_rows_take_one_partition_per_row():
    """A DMA's HBM side must have the SBUF side's partition count in dim 0, and pieces of a column
    slice cannot be stacked onto partitions by a reshape: such rows are not cut (J = 1)."""
    x = rows_of((8, 2560, 4, 128, BF16), seed=3)
    c = nkicpu.capture(by_column_slices)(x, ((128, 10), (128, 10)))
    assert np.array_equal(c.outputs.view(np.uint16), x.view(np.uint16))
    dmas = [i for i in c.instructions if i.opcode == "dma_copy"]
    assert [hbm_runs(i) for i in dmas] == [(8, 10 * 128 * 4 * 2, True)] * 4
    whole = nkicpu.capture(load_then_store)(x[:, :1280], 128)    # the same rows on their own: cut in 10
    assert hbm_runs(next(i for i in whole.instructions if i.opcode == "dma_copy")) == (80, 1024, True)


@pytest.mark.parametrize("case", [(1, 256, None, 128, BF16), (3, 15, None, 5, BF16)], ids=case_id)
def test_odd_bf16_transposes_run_in_fp32(case):
    """PSUM takes bf16 writes only as whole 4-byte words per partition: an odd number of rows
    (loading) or of channels per tile (storing) transposes in fp32 instead, still bit-exact."""
    R, C, K, P, dtype = case
    x = rows_of(case, seed=4)
    c = nkicpu.capture(load_then_store)(x, P)
    assert np.array_equal(c.outputs.view(np.uint16), x.view(np.uint16))
    transposes = [i for i in c.instructions if i.opcode == "nc_transpose"]
    loads, stores = transposes[:C // P], transposes[C // P:]
    assert all(i.writes[0].dtype == ("float32" if R % 2 else "bfloat16") for i in loads)
    assert all(i.writes[0].dtype == ("float32" if P % 2 else "bfloat16") for i in stores)
    widen = [i for i in c.instructions if i.opcode == "tensor_copy" and i.engine == "gpsimd"]
    assert len(widen) == P % 2 and all(i.writes[0].dtype == "float32" for i in widen)


def test_instruction_plan():
    """8 rows of 6144 bf16 channels (48 tiles): per direction one DMA, 3 transposes (48 tiles in
    16 pieces of 3), and one PSUM eviction (all 3 fit a bank each way)."""
    c = nkicpu.capture(load_then_store)(rows_of((8, 6144, None, 128, BF16)), 128)
    counts = Counter((i.engine, i.opcode) for i in c.instructions)
    assert counts == {("dma", "dma_copy"): 2, ("tensor", "nc_transpose"): 6, ("vector", "tensor_copy"): 2}
    assert c.peak_psum_banks <= 2


def test_evictions_alternate_vector_and_scalar_engines():
    """Evictions of one call take turns on VectorE and ScalarE, so two can run at once; converting
    ones (fp32 rows into a bf16 tile) too: both engines cast through fp32 (layout.evict)."""
    x = rows_of((300, 256, 4, 128, BF16))
    evictions = [i.engine for i in nkicpu.capture(load_then_store)(x, 128).instructions
                 if i.opcode == "tensor_copy"]
    assert evictions == ["vector", "scalar", "vector"] * 2       # 3 chunks of rows, loaded then stored
    x32 = rows_of((300, 256, None, 128, np.float32))
    converting = [i for i in nkicpu.capture(round_trip)(x32, 128, "bfloat16").instructions
                  if i.opcode == "tensor_copy" and i.reads[0].dtype != i.writes[0].dtype]
    assert {i.engine for i in converting} == {"vector", "scalar"}


# --- validation -------------------------------------------------------------------------------

@nki.jit
def load_into(src, shape):
    tile = nl.ndarray(shape, nl.bfloat16)
    load_channel_major(tile, src)
    out = nl.ndarray(shape, nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(out, tile)
    return out


@nki.jit
def store_from(shape, rows_shape):
    tile = nl.ndarray(shape, nl.bfloat16)
    nisa.memset(tile, 0.0)
    rows = nl.ndarray(rows_shape, nl.bfloat16, buffer=nl.shared_hbm)
    store_rows(rows, tile)
    return rows


BAD = {
    "C != nt * P": (lambda: nki.simulate(load_into)(np.zeros((4, 256), BF16), (128, 1, 4)),
                   r"dst: expected nt \* P = 256 channels"),
    "wrong rows": (lambda: nki.simulate(load_into)(np.zeros((4, 256), BF16), (128, 2, 5)),
                   r"dst: expected \[P, nt\] then src's rows and inner dim \[4, 1\], got \[128, 2, 5, 1\]"),
    "K missing": (lambda: nki.simulate(load_into)(np.zeros((4, 128, 3), BF16), (128, 1, 4)),
                  r"dst: expected \[P, nt\] then src's rows and inner dim \[4, 3\]"),
    "src rank": (lambda: nki.simulate(load_into)(np.zeros((4,), BF16), (4, 1)),
                 r"src: expected HBM rows \[R, C\] or \[R, C, K\], got shape \[4\]"),
    "src dtype": (lambda: nki.simulate(load_into)(np.zeros((4, 128), np.int32), (128, 4)),
                  r"src: expected dtype bfloat16 or float32, got int32"),
    "store C != nt * P": (lambda: nki.simulate(store_from)((128, 2, 4), (4, 128)),
                         r"src: expected nt \* P = 128 channels"),
    "store rank": (lambda: nki.simulate(store_from)((128, 4), (4, 128, 1, 1)),
                   r"dst: expected HBM rows \[R, C\] or \[R, C, K\]"),
}


@pytest.mark.parametrize("case", list(BAD), ids=[c.replace(" ", "-") for c in BAD])
def test_rejects(case):
    call, message = BAD[case]
    with pytest.raises(AssertionError, match=message):
        call()
