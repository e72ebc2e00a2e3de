"""The nisa instructions outside nkicpu/isa.py (tensor_tensor_scan, tensor_scalar_reduce,
range_select, tensor_partition_reduce, affine_select, tensor_copy_predicated, max8,
nc_find_index8, nc_stream_shuffle), nc_matmul(is_transpose=True) and indirect `.ap()` DMA: each
against NumPy, its rules (CASES, which tests/test_nkicpu_rules.py counts as covered), and its record.
"""
import re

import numpy as np
import pytest

import nkicpu
from nkicpu import costs
from nkicpu_testing import BF16, F32, assert_bits_equal, hbm, load, nisa, nki, nl, ps, rand, run, sb, store
from test_nkicpu_isa import _spelled


U32 = np.uint32
FP32_MIN = np.finfo(F32).min

# Signatures as the SDK isa stub spells them (aws-neuron-sdk nki/api/nki/isa/__init__.py at 81ce03a);
# its `cmp_op=equal` / `reduce_op=maximum` are the nl operators, and range_select's `on_false_value=...`
# is FP32_MIN, the one value its docs allow.
SIGNATURES = {
    "tensor_tensor_scan": "dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None",
    "tensor_scalar_reduce": "dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False, "
                            "reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, name=None",
    "range_select": "dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.reset_reduce, "
                    "reduce_res=None, reduce_op=nl.maximum, range_start=0, on_false_value=-3.4028234663852886e+38, "
                    "name=None",
    "tensor_partition_reduce": "dst, op, data, name=None",
    "affine_select": "dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=nl.equal, offset=0, "
                     "name=None",
    "tensor_copy_predicated": "dst, src, predicate, reverse_pred=False, name=None",
    "max8": "dst, src, name=None",
    "nc_find_index8": "dst, data, vals, name=None",
    "nc_stream_shuffle": "dst, src, shuffle_mask, name=None",
}


@pytest.mark.parametrize("name", SIGNATURES)
def test_signature_matches_the_sdk(name):
    assert _spelled(getattr(nisa, name)) == SIGNATURES[name]


def opcodes(kernel, *args):
    """(opcode, engine) of every non-DMA instruction a kernel records, and the modeled cost of each is positive."""
    capture = nkicpu.capture(kernel)(*args)
    out = []
    for ins in capture.instructions:
        if ins.engine != "dma":
            assert costs.engine_us(ins, costs.BEST) > 0 and costs.engine_us(ins, costs.LIKELY) > 0
            out.append((ins.opcode, ins.engine))
    return out


# -- tensor_tensor_scan -------------------------------------------------------------------------

@nki.jit
def scan_kernel(a, b, h0, reverse0, reverse1):
    y = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    init = load(h0) if h0.shape[1] == 1 else 0.5
    nisa.tensor_tensor_scan(dst=y, data0=load(a), data1=load(b), initial=init, op0=nl.multiply, op1=nl.subtract,
                            reverse0=reverse0, reverse1=reverse1)
    return store(y)


@pytest.mark.parametrize("reverse1", [False, True])
@pytest.mark.parametrize("tile_initial", [False, True])
def test_tensor_tensor_scan_is_the_documented_recurrence(tile_initial, reverse1):
    a, b = rand((16, 3, 5)), rand((16, 3, 5), seed=1)
    h0 = rand((16, 1), seed=2) if tile_initial else np.zeros((16, 2), F32)
    got = run(scan_kernel, a, b, h0, False, reverse1)
    A, B = a.reshape(16, -1), b.reshape(16, -1)
    h = h0[:, 0] if tile_initial else np.full(16, 0.5, F32)
    want = np.empty_like(A)
    for i in range(A.shape[1]):
        x = A[:, i] * h
        h = (B[:, i] - x) if reverse1 else (x - B[:, i])
        want[:, i] = h
    assert_bits_equal(got, want.reshape(a.shape))
    assert opcodes(scan_kernel, a, b, h0, False, reverse1) == [("tensor_tensor_scan", "vector")]


def test_tensor_tensor_scan_rounds_each_output_once_to_bf16():
    a, b = rand((8, 32), BF16), rand((8, 32), BF16, seed=1)
    got = run(scan_kernel, a, b, np.zeros((8, 2), BF16), True, False)
    ref = run(scan_kernel, a.astype(F32), b.astype(F32), np.zeros((8, 2), F32), True, False)
    assert_bits_equal(got, ref.astype(BF16))      # the state stays fp32 between steps


# -- tensor_scalar_reduce / range_select (VectorE accumulators) -------------------------------

@nki.jit
def scalar_reduce_kernel(x, s, bias):
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    first = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    total = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    neg_max = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    t = load(x)
    nisa.tensor_scalar_reduce(dst=y, data=t, op0=nl.multiply, operand0=load(s), reduce_op=nl.add, reduce_res=first)
    nisa.tensor_scalar_reduce(dst=y, data=t, op0=nl.add, operand0=2.0, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reduce,
                              reduce_res=total)
    nisa.tensor_scalar_reduce(dst=y, data=t, op0=nl.subtract, operand0=1.0, reduce_op=nl.maximum,
                              reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=load(bias), reduce_res=neg_max,
                              reduce_res_negate=True)
    return store(y), store(first), store(total), store(neg_max)


def test_tensor_scalar_reduce_runs_the_accumulator_commands():
    x, s, bias = rand((32, 4, 6)), rand((32, 1), seed=1), rand((32, 1), lo=-9, hi=9, seed=2)
    y, first, total, neg_max = run(scalar_reduce_kernel, x, s, bias)
    X = x.reshape(32, -1)
    assert_bits_equal(y, x - F32(1))
    np.testing.assert_allclose(first[:, 0], (X * s).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(total[:, 0], (X * s).sum(axis=1) + (X + F32(2)).sum(axis=1), rtol=1e-5)
    assert_bits_equal(neg_max[:, 0], -np.maximum(bias[:, 0], (X - F32(1)).max(axis=1)))
    assert [o for o, _ in opcodes(scalar_reduce_kernel, x, s, bias)].count("tensor_scalar_reduce") == 3


@nki.jit
def range_select_kernel(x, lo, hi, range_start):
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    m = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.sbuf)
    nisa.range_select(dst=y, on_true_tile=load(x), comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=load(lo),
                      bound1=load(hi), reduce_res=m, range_start=range_start)
    return store(y), store(m)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_range_select_keeps_the_window_and_reduces_max(dtype):
    P, n, start = 16, 40, 7
    x = rand((P, n), dtype)
    lo = np.random.default_rng(3).integers(start, start + n, (P, 1)).astype(F32)
    hi = lo + np.random.default_rng(4).integers(0, 12, (P, 1)).astype(F32)     # some rows keep nothing
    y, m = run(range_select_kernel, x, lo, hi, start)
    idx = (start + np.arange(n, dtype=F32))[None, :]
    sel = np.where((idx >= lo) & (idx < hi), x.astype(F32), FP32_MIN)
    assert_bits_equal(y, sel.astype(dtype))       # FP32_MIN becomes -inf in bf16, as the docs warn
    assert_bits_equal(m, sel.max(axis=1, keepdims=True))


# -- tensor_partition_reduce / affine_select (GpSimd) -------------------------------------------

@nki.jit
def partition_reduce_kernel(x, op):
    y = nl.ndarray((1,) + x.shape[1:], x.dtype, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(y, op, load(x))
    return store(y)


def test_tensor_partition_reduce():
    x = rand((24, 3, 5))
    np.testing.assert_allclose(run(partition_reduce_kernel, x, nl.add), x.sum(axis=0, keepdims=True), rtol=1e-5)
    assert_bits_equal(run(partition_reduce_kernel, x, nl.maximum), x.max(axis=0, keepdims=True))
    bits = np.random.default_rng(0).integers(0, 2**31, (24, 8), dtype=np.int64).astype(np.int32)
    assert_bits_equal(run(partition_reduce_kernel, bits, nl.bitwise_or), np.bitwise_or.reduce(bits, axis=0)[None])
    assert opcodes(partition_reduce_kernel, x, nl.add) == [("tensor_partition_reduce", "gpsimd")]


@nki.jit
def affine_select_kernel(x, out_dtype):
    y = nl.ndarray(x.shape, out_dtype, buffer=nl.sbuf)
    P, n = x.shape
    nisa.affine_select(dst=y, pattern=[[-1, n]], channel_multiplier=1, on_true_tile=load(x), on_false_value=-9984.0,
                       cmp_op=nl.greater_equal, offset=3)
    return store(y)


@pytest.mark.parametrize("src,dst", [(F32, F32), (BF16, BF16), (F32, BF16), (np.int32, np.int32)])
def test_affine_select_is_a_causal_mask(src, dst):
    x = (rand((16, 24)) * 100).astype(src)
    keep = 3 + np.arange(16)[:, None] - np.arange(24)[None, :] >= 0
    want = np.where(keep, x, np.asarray(-9984.0, F32).astype(dst)) if src == dst else \
        np.where(keep, x.astype(F32), F32(-9984.0)).astype(dst)
    assert_bits_equal(run(affine_select_kernel, x, dst), want.astype(dst))
    assert opcodes(affine_select_kernel, x, dst) == [("affine_select", "gpsimd")]


# -- tensor_copy_predicated ---------------------------------------------------------------------

@nki.jit
def predicated_kernel(old, src, pred, reverse):
    y = load(old)
    value = load(src) if src.ndim == 2 else 7.25
    nisa.tensor_copy_predicated(dst=y, src=value, predicate=load(pred), reverse_pred=reverse)
    return store(y)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("scalar", [False, True])
def test_tensor_copy_predicated(scalar, reverse):
    old, src = rand((16, 20)), rand((16, 20), seed=1)
    pred = np.random.default_rng(2).integers(0, 3, (16, 20)).astype(np.uint8)
    got = run(predicated_kernel, old, np.zeros(1, F32) if scalar else src, pred, reverse)
    mask = (pred != 0) != reverse
    assert_bits_equal(got, np.where(mask, F32(7.25) if scalar else src, old))
    assert opcodes(predicated_kernel, old, src, pred, reverse) == [("tensor_copy_predicated", "vector")]


# -- max8 / nc_find_index8 ----------------------------------------------------------------------

@nki.jit
def top8_kernel(x):
    P = x.shape[0]
    t = load(x)
    vals = nl.ndarray((P, 8), x.dtype, buffer=nl.sbuf)
    idx = nl.ndarray((P, 8), nl.uint32, buffer=nl.sbuf)
    nisa.max8(dst=vals, src=t)
    nisa.nc_find_index8(dst=idx, data=t, vals=vals)
    return store(vals), store(idx)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_max8_and_find_index8_are_a_top8(dtype):
    x = rand((32, 4, 16), dtype)
    x[0, 1, 3] = x[0, 3, 9] = 5   # a tie: find_index8 gives the first occurrence
    vals, idx = run(top8_kernel, x)
    flat = x.reshape(32, -1).astype(F32)
    want_vals = -np.sort(-flat, axis=1)[:, :8]
    assert_bits_equal(vals, want_vals.astype(dtype))
    want_idx = np.array([[np.flatnonzero(row == v)[0] for v in vs] for row, vs in zip(flat, want_vals)], U32)
    assert_bits_equal(idx, want_idx)
    assert opcodes(top8_kernel, x) == [("max8", "vector"), ("nc_find_index8", "vector")]


@nki.jit
def find_missing_kernel(x, v):
    idx = nl.ndarray((x.shape[0], 8), nl.uint16, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=idx, data=load(x), vals=load(v))
    return store(idx)


def test_find_index8_marks_a_missing_value_all_ones():
    x = np.arange(4 * 10, dtype=F32).reshape(4, 10)
    v = np.tile(np.array([3, 1000, 0, 9, 5, 5, -1, 2], F32), (4, 1))
    got = run(find_missing_kernel, x, v)
    want = np.array([[np.flatnonzero(r == e)[0] if e in r else 0xFFFF for e in vs] for r, vs in zip(x, v)], np.uint16)
    assert_bits_equal(got, want)


# -- nc_stream_shuffle --------------------------------------------------------------------------

@nki.jit
def shuffle_kernel(x, mask, dst_start, dst_parts):
    t = load(x)
    y = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=y, value=-1.0)
    nisa.nc_stream_shuffle(dst=y[dst_start:dst_start + dst_parts, :], src=t, shuffle_mask=mask)
    return store(y)


def test_nc_stream_shuffle_permutes_each_quadrant():
    x = rand((64, 6))
    mask = list(np.random.default_rng(0).permutation(32))
    mask[5] = 255
    got = run(shuffle_kernel, x, tuple(mask), 0, 64)
    want = np.full((128, 6), -1.0, F32)
    for p in range(64):
        q, lane = divmod(p, 32)
        if mask[lane] != 255:
            want[p] = x[q * 32 + mask[lane]]
    assert_bits_equal(got, want)
    assert ("nc_stream_shuffle", "vector") in opcodes(shuffle_kernel, x, tuple(mask), 0, 64)


def test_nc_stream_shuffle_broadcasts_a_partition():
    x = rand((1, 6))
    got = run(shuffle_kernel, x, (0,) * 32, 32, 32)
    want = np.full((128, 6), -1.0, F32)
    want[32:64] = x[0]
    assert_bits_equal(got, want)


# -- nc_matmul(is_transpose=True) ---------------------------------------------------------------

@nki.jit
def matmul_transpose_kernel(x, eye):
    K, M = x.shape
    p = nl.ndarray((M, K), x.dtype, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=load(x), moving=load(eye), is_transpose=True)
    y = nl.ndarray((M, K), x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=p)
    return store(y)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_matmul_transpose_mode_is_bit_accurate(dtype):
    x = rand((32, 20), dtype)
    x[0, :3] = [np.inf, -np.inf, np.nan]          # transpose mode moves NaN/Inf as they are
    eye = np.eye(32, dtype=dtype)
    assert_bits_equal(run(matmul_transpose_kernel, x, eye), x.T.copy())
    (ins,) = [i for i in nkicpu.capture(matmul_transpose_kernel)(x, eye).instructions if i.engine == "tensor"]
    assert ins.opcode == "nc_matmul" and ins.args["is_transpose"]
    plain = costs.Instruction(0, "tensor", "nc_matmul", ins.reads, ins.writes, args={})
    want_ratio = costs.MATMUL_FP32_PASSES if dtype == F32 else 1      # transpose mode is one pass, fp32 too
    assert costs.engine_us(plain, costs.BEST) == pytest.approx(want_ratio * costs.engine_us(ins, costs.BEST))


def test_matmul_transpose_needs_an_identity_moving():
    x = rand((8, 4))
    with pytest.raises(NotImplementedError, match="not an identity"):
        run(matmul_transpose_kernel, x, 2 * np.eye(8, dtype=F32))


# -- indirect DMA (.ap with vector_offset / scalar_offset) ------------------------------------

@nki.jit
def gather_kernel(data, indices):
    P, F = indices.shape[0], data.shape[1]
    idx = nl.ndarray((P, 1), nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    dst = nl.ndarray((P, F), data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=dst, src=data.ap(pattern=[[F, P], [1, F]], vector_offset=idx, indirect_dim=0))
    return store(dst)


def test_vector_offset_gathers_rows():
    data = rand((50, 12))
    indices = np.random.default_rng(0).integers(0, 50, (16, 1)).astype(U32)
    assert_bits_equal(run(gather_kernel, data, indices), data[indices[:, 0]])
    with pytest.raises(IndexError, match=r"index 50 is outside dim 0 .*50 rows"):
        run(gather_kernel, data, np.full((16, 1), 50, U32))


@nki.jit
def scalar_offset_kernel(A, row):
    r = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.memset(r, value=row)
    out = nl.ndarray((8, 6), A.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=A.ap(pattern=[[A.shape[2], 8], [1, 6]], offset=2, scalar_offset=r, indirect_dim=1))
    return store(out)


def test_a_gather_reads_its_index_tile():
    """The cost model must order the gather after the DMA that loads its indices."""
    indices = np.zeros((16, 1), U32)
    ins = nkicpu.capture(gather_kernel)(rand((50, 12)), indices).instructions
    load, gather = ins[0], ins[1]
    assert any(r.alloc is load.writes[0].alloc for r in gather.reads)


def test_scalar_offset_counts_rows_of_the_base_tensor():
    A = rand((3, 20, 10))
    # offset + row * prod(A.shape[2:]) + pattern: rows row..row+7 of A's flattened [60, 10], columns 2..7
    want = A.reshape(-1, 10)[5:13, 2:8]
    assert_bits_equal(run(scalar_offset_kernel, A, 5), want)


# -- the rules these instructions enforce -------------------------------------------------------

def _shuffle(src, dst, mask=None):
    nisa.nc_stream_shuffle(dst=dst, src=src, shuffle_mask=[0] * 32 if mask is None else mask)


def _gather(index, pattern=((4, 4), (1, 4)), table=None):
    nisa.dma_copy(dst=sb(4, 4), src=(hbm(8, 4) if table is None else table).ap(pattern, vector_offset=index))


CASES = [
    # (rule, key words of the message, a kernel body that breaks it)
    ("alu-op", r"op0=nl.abs must be a binary arithmetic operator",
     lambda: nisa.tensor_tensor_scan(sb(4, 4), sb(4, 4), sb(4, 4), 0.0, nl.abs, nl.add)),
    ("psum-operands", r"data0 and data1 cannot both be in PSUM",
     lambda: nisa.tensor_tensor_scan(sb(4, 4), ps(4, 4), ps(4, 4), 0.0, nl.multiply, nl.add)),
    ("reduce-op", r"reduce_op must be nl.add, nl.multiply, nl.maximum or nl.minimum, got nl.subtract",
     lambda: nisa.tensor_scalar_reduce(sb(4, 4), sb(4, 4), nl.add, 1.0, nl.subtract)),
    ("range-select-op", r"comp_op0 must be one of .*got nl.not_equal",
     lambda: nisa.range_select(sb(4, 8), sb(4, 8), nl.not_equal, nl.less, sb(4, 1), sb(4, 1))),
    ("range-select-fill", r"on_false_value must be FP32_MIN",
     lambda: nisa.range_select(sb(4, 8), sb(4, 8), nl.less, nl.less, sb(4, 1), sb(4, 1), on_false_value=0.0)),
    ("range-select-dtype", r"bound1 must be a float32 \[4, 1\] tile, got \[4, 1\] bfloat16",
     lambda: nisa.range_select(sb(4, 8), sb(4, 8), nl.less, nl.less, sb(4, 1), sb(4, 1, dtype=nl.bfloat16))),
    ("range-select-index", r"spans 16777210..16777217",
     lambda: nisa.range_select(sb(4, 8), sb(4, 8), nl.less, nl.less, sb(4, 1), sb(4, 1), range_start=2 ** 24 - 6)),
    ("gpsimd-psum", r"affine_select runs on GpSimd",
     lambda: nisa.affine_select(ps(4, 8), [[1, 8]], 0, sb(4, 8), 0.0)),
    ("operand-shape", r"pattern counts make 6 elements per partition; dst has 8",
     lambda: nisa.affine_select(sb(4, 8), [[1, 6]], 0, sb(4, 8), 0.0)),
    ("predicate-dtype", r"predicate must be uint8, uint16, uint32, got int32",
     lambda: nisa.tensor_copy_predicated(sb(4, 4), sb(4, 4), sb(4, 4, dtype=nl.int32))),
    ("predicated-dtype", r"src and dst must share a dtype, got bfloat16 -> float32",
     lambda: nisa.tensor_copy_predicated(sb(4, 4), sb(4, 4, dtype=nl.bfloat16), sb(4, 4, dtype=nl.uint8))),
    ("top8-size", r"src must have 8 to 16384 elements per partition, got 6",
     lambda: nisa.max8(sb(4, 8), sb(4, 6))),
    ("top8-dtype", r"uint16 or uint32, got int32",
     lambda: nisa.nc_find_index8(sb(4, 8, dtype=nl.int32), sb(4, 16), sb(4, 8))),
    ("shuffle-dtype", r"dst must have src's dtype float32, got bfloat16",
     lambda: _shuffle(sb(32, 4), sb(32, 4, dtype=nl.bfloat16))),
    ("shuffle-mask", r"shuffle_mask must be a list of 32 ints",
     lambda: _shuffle(sb(32, 4), sb(32, 4), mask=[0] * 16)),
    ("shuffle-mask", r"makes dst partition 0 read src partition 3; src has 1",
     lambda: _shuffle(sb(1, 4), sb(32, 4), mask=[3] * 32)),
    ("shuffle-start-partition", r"src starts at partition 32; with 64 active partitions the start must be one of "
                                r"\(0, 64\)",
     lambda: _shuffle(sb(64, 4)[32:64], sb(64, 4))),
    ("transpose-dtype", r"dst dtype must equal the stationary's dtype bfloat16 in transpose mode, got float32",
     lambda: nisa.nc_matmul(ps(4, 8), sb(8, 4, dtype=nl.bfloat16), sb(8, 8, dtype=nl.bfloat16), is_transpose=True)),
    ("matmul-contraction", r"the moving of a transpose is a \[8, 8\] identity",
     lambda: nisa.nc_matmul(ps(4, 8), sb(8, 4), sb(8, 4), is_transpose=True)),
    ("indirect-hbm", r"indexes a tensor in HBM, got sbuf",
     lambda: sb(8, 4).ap([[4, 4], [1, 4]], vector_offset=sb(4, 1, dtype=nl.int32))),
    ("indirect-index", r"vector_offset must be an integer tile in SBUF, got float32",
     lambda: _gather(sb(4, 1))),
    ("indirect-index", r"vector_offset must be \[4, 1\]",
     lambda: _gather(sb(2, 1, dtype=nl.int32))),
    ("indirect-dge", r"a vector_offset \(gather / scatter\) DMA needs software DGE: .*not hwdge",
     lambda: nisa.dma_copy(dst=sb(4, 4), src=hbm(8, 4).ap([[4, 4], [1, 4]], vector_offset=sb(4, 1, dtype=nl.int32)),
                           dge_mode=nisa.dge_mode.hwdge)),
    ("indirect-dge", r"a dynamic start address \(scalar_offset\) needs .*not none",
     lambda: nisa.dma_copy(dst=sb(4, 4), src=hbm(8, 4).ap([[4, 4], [1, 4]], scalar_offset=sb(1, 1, dtype=nl.int32)),
                           dge_mode=nisa.dge_mode.none)),
]


@pytest.mark.parametrize("rule,words,body", CASES, ids=[c[0] for c in CASES])
def test_rule(rule, words, body):
    with pytest.raises(nkicpu.NkiValidationError, match=re.escape(f"[{rule}]") + ".*(" + words + ")"):
        nki.simulate(nki.jit(body))()


UNMODELED = [
    ("tensor_scalar_reduce reverse0", lambda: nisa.tensor_scalar_reduce(sb(4, 4), sb(4, 4), nl.subtract, 1.0, nl.add,
                                                                        reverse0=True)),
    ("transpose of fp8", lambda: nisa.nc_matmul(ps(4, 8, dtype=nl.float8_e4m3), sb(8, 4, dtype=nl.float8_e4m3),
                                                sb(8, 8, dtype=nl.float8_e4m3), is_transpose=True)),
    ("register offset", lambda: hbm(8, 4).ap([[4, 4], [1, 4]], scalar_offset=3)),
]


@pytest.mark.parametrize("what,body", UNMODELED, ids=[u[0] for u in UNMODELED])
def test_unmodeled_raises_not_implemented(what, body):
    with pytest.raises(NotImplementedError, match="nkicpu does not model"):
        nki.simulate(nki.jit(body))()
