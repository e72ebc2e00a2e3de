"""Every nkicpu instruction against NumPy, in fp32 and in bf16.

The numerics contract (nkicpu/isa.py): engines compute in fp32 and round once to dst.dtype (bf16
round-to-nearest-even through ml_dtypes); fp32 -> int is RNE and saturates; DMA converts src ->
fp32 -> dst; same-dtype copies are bit-exact; TensorE accumulates in fp32. Where NumPy's fp32
arithmetic is correctly rounded (+, -, *, /, max, min) the expected value is computed with it and
compared bit for bit; transcendental functions are compared with a float64 formula written here at
fp32 tolerance, and their bf16 results must equal the fp32 results of the same kernel rounded once
to bf16.
"""
import enum
import inspect
import math

import numpy as np
import pytest

import nkicpu
from nkicpu_testing import (BF16, DTYPE_IDS, F32, FLOAT_DTYPES, assert_bits_equal, bits, load, nisa, nki, nl,
                            rand, run, store)

U = 2.0 ** -24  # fp32 unit roundoff


# -- the API surface ----------------------------------------------------------------------------

# Signatures as the Neuron SDK 2.32 API stubs spell them (nki/api/nki/{isa,language}/__init__.py).
SDK_2_32 = {
    nisa: {
        "dma_copy": "dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown, "
                    "engine=engine.unknown, name=None",
        "tensor_copy": "dst, src, engine=engine.unknown, name=None",
        "memset": "dst, value, engine=engine.unknown, name=None",
        "iota": "dst, pattern, offset=0, channel_multiplier=0, name=None",
        "nc_matmul": "dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, "
                     "is_transpose=False, accumulate=None, tile_position=(), tile_size=(), "
                     "perf_mode=matmul_perf_mode.none, name=None",
        "nc_transpose": "dst, data, engine=engine.unknown, name=None",
        "activation": "dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, "
                      "reduce_cmd=reduce_cmd.idle, name=None",
        "activation_reduce": "dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None",
        "tensor_tensor": "dst, data1, data2, op, engine=engine.unknown, name=None",
        "tensor_scalar": "dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, "
                         "engine=engine.unknown, name=None",
        "scalar_tensor_tensor": "dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None",
        "tensor_reduce": "dst, op, data, axis, negate=False, keepdims=False, name=None",
        "reciprocal": "dst, data, name=None",
        "dma_transpose": "dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error, "
                         "name=None",
        "core_barrier": "data, cores, engine=engine.gpsimd, name=None",
        "sendrecv": "src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma, name=None",
    },
    nl: {
        "ndarray": "shape, dtype, buffer=sbuf, name='', address=None",
        "zeros": "shape, dtype, buffer=sbuf, name=''",
        "full": "shape, fill_value, dtype, buffer=sbuf, name=''",
        "ds": "start, size",
        "affine_range": "start, stop=None, step=1",
        "program_id": "axis=0",
        "num_programs": "axes=0",
        "program_ndim": "",
        "device_print": "print_prefix, tensor",
    },
    nl.NkiTensor: {
        "ap": "self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None",
        "slice": "self, dim, start, end, step=1",
        "reshape_dim": "self, dim, shape",
        "flatten_dims": "self, start_dim, end_dim",
    },
    nki: {"jit": "fn=None, **kwargs", "simulate": "kernel"},
}


def _spelled(f):
    def default(d):
        if isinstance(d, enum.Enum):
            return d.name if isinstance(d, type(nl.sbuf)) else f"{type(d).__name__}.{d.name}"
        return repr(d)
    out = []
    for p in inspect.signature(f).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            out.append(f"**{p.name}")
        else:
            out.append(p.name if p.default is p.empty else f"{p.name}={default(p.default)}")
    return ", ".join(out)


@pytest.mark.parametrize("owner,name", [(o, n) for o, names in SDK_2_32.items() for n in names],
                         ids=[n for names in SDK_2_32.values() for n in names])
def test_signature_matches_the_sdk(owner, name):
    """Same names, argument order and defaults as the documented API (the SDK 2.32 stubs)."""
    assert _spelled(getattr(owner, name)) == SDK_2_32[owner][name]


def fp32_then(dtype, values):
    """What an engine writes: fp32 values rounded once to `dtype`."""
    return np.asarray(values, dtype=F32).astype(dtype)


def nan_payload(dtype):
    """A quiet NaN with a non-default payload, as the dtype's own bits."""
    return np.array([0x7FC00123 if dtype == F32 else 0x7FC3], dtype=np.uint32 if dtype == F32 else np.uint16).view(dtype)[0]


def special_values(dtype, shape):
    x = rand(shape, dtype)
    flat = x.reshape(-1)
    flat[:5] = [np.inf, -np.inf, -0.0, 0.0, nan_payload(dtype)]
    return x


# -- dma_copy ---------------------------------------------------------------------------------

@nki.jit
def roundtrip_kernel(x, dtype):
    return store(load(x, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [np.int32], ids=DTYPE_IDS + ["int32"])
def test_dma_copy_same_dtype_is_bit_exact(dtype):
    if dtype == np.int32:
        x = np.random.default_rng(0).integers(-2**31, 2**31, (16, 24), dtype=np.int64).astype(np.int32)
    else:
        x = special_values(dtype, (16, 24))
    assert_bits_equal(run(roundtrip_kernel, x, dtype), x)


def test_dma_copy_fp32_to_bf16_rounds_to_nearest_even():
    one = F32(1.0)
    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1 + 2**-8 + 2**-20], F32)  # two exact ties, one above
    x = np.concatenate([ties, rand(60, F32)]).reshape(4, 16)
    got = run(roundtrip_kernel, x, BF16)
    assert_bits_equal(got, x.astype(BF16))
    # The ties really are ties: RNE keeps 1.0 / goes to 1 + 2^-6, truncation would not.
    assert got.ravel()[0] == one and got.ravel()[1] == F32(1 + 2**-6) and got.ravel()[3] == F32(1 + 2**-7)


@pytest.mark.parametrize("src_dtype,dst_dtype", [(BF16, F32), (np.int32, F32), (np.int32, BF16), (F32, np.int32),
                                                 (BF16, np.int32), (F32, np.uint8)],
                         ids=["bf16-fp32", "int32-fp32", "int32-bf16", "fp32-int32", "bf16-int32", "fp32-uint8"])
def test_dma_copy_converts_through_fp32(src_dtype, dst_dtype):
    if src_dtype == np.int32:
        x = np.array([2**24 + 1, -(2**24 + 1), 2**30 + 5, 7, -3, 0, 255, 2**31 - 1], np.int32).reshape(2, 4)
    else:
        x = np.array([2.5, 3.5, -2.5, -0.4, 1e10, -1e10, 7.0, 300.0], F32).astype(src_dtype).reshape(2, 4)
    got = run(roundtrip_kernel, x, dst_dtype)
    via_fp32 = x.astype(np.float64).astype(F32)  # src -> fp32 (exact for floats, RNE for int32)
    if np.issubdtype(dst_dtype, np.integer):
        # fp32 -> int: round half to even (Python's round), saturate to the integer range.
        info = np.iinfo(dst_dtype)
        want = np.array([min(max(round(float(v)), info.min), info.max) for v in via_fp32.ravel()], dst_dtype).reshape(x.shape)
    else:
        want = via_fp32.astype(dst_dtype)
    assert_bits_equal(got, want)


def test_dma_copy_strided_and_permuted_hbm_views():
    x = rand((8, 12), F32)
    hidden = rand((2, 256), BF16, seed=1)

    @nki.jit
    def k(x, hidden):
        strided = store(load(x[1:7:2, ::3]))
        transposed = store(load(x.permute((1, 0))))
        # The LIB decode layout: hidden [B, H] viewed as [128, B, H/128] so that h = h0 * H1 + h1.
        B, H = hidden.shape
        tiled = store(load(hidden.reshape((B, 128, H // 128)).permute((1, 0, 2))))
        row = store(load(x[3]))                       # an HBM integer index drops the dim: [12]
        # Write two SBUF tiles into interleaved columns of one output.
        inter = nl.ndarray((8, 24), x.dtype, buffer=nl.shared_hbm)
        a, b = load(x), load(x)
        nisa.dma_copy(dst=inter[:, 0::2], src=a)
        nisa.dma_copy(dst=inter[:, 1::2], src=b)
        return strided, transposed, tiled, row, inter

    strided, transposed, tiled, row, inter = run(k, x, hidden)
    assert_bits_equal(strided, x[1:7:2, ::3])
    assert_bits_equal(transposed, x.T)
    assert_bits_equal(tiled, hidden.reshape(2, 128, 2).transpose(1, 0, 2))
    assert row.shape == (12,)
    assert_bits_equal(row, x[3])
    want = np.empty((8, 24), F32)
    want[:, 0::2] = x
    want[:, 1::2] = x
    assert_bits_equal(inter, want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
def test_dma_copy_access_patterns(dtype):
    """`.ap()` reads flat storage: a stride-0 pattern broadcasts a row to every partition."""
    P, F = 16, 10
    row = rand((1, F), dtype)
    x = rand((6, F), dtype, seed=2)

    @nki.jit
    def k(row, x):
        bcast = nl.ndarray((P, F), row.dtype)
        nisa.dma_copy(dst=bcast, src=row.ap([[0, P], [1, F]]))
        window = nl.ndarray((3, 4), x.dtype)
        nisa.dma_copy(dst=window, src=x.ap([[F, 3], [2, 4]], offset=F + 1))
        return store(bcast), store(window)

    bcast, window = run(k, row, x)
    assert_bits_equal(bcast, np.broadcast_to(row, (P, F)).copy())
    flat = x.ravel()
    assert_bits_equal(window, flat[F + 1 + np.arange(3)[:, None] * F + np.arange(4)[None, :] * 2])


def test_dma_copy_sbuf_to_sbuf_and_hbm_to_hbm():
    x = rand((8, 16), F32)

    @nki.jit
    def k(x):
        a = load(x)
        b = nl.ndarray((8, 16), nl.bfloat16)
        nisa.dma_copy(dst=b, src=a)                 # SBUF -> SBUF, converting
        direct = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=direct, src=x)            # HBM -> HBM
        return store(b), direct

    c = nkicpu.capture(k)(x)
    b, direct = c.outputs
    assert_bits_equal(b, x.astype(BF16))
    assert_bits_equal(direct, x)
    assert {i.engine for i in c.instructions} == {"dma"}
    assert {(i.reads[0].buffer, i.writes[0].buffer) for i in c.instructions} >= {("sbuf", "sbuf"), ("private_hbm", "shared_hbm")}


# -- tensor_copy ------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["vector", "scalar", "gpsimd"])
@pytest.mark.parametrize("dtype", [F32, BF16, np.int32], ids=["fp32", "bf16", "int32"])
def test_tensor_copy_same_dtype_is_bit_exact(engine, dtype):
    if dtype == np.int32:
        x = (np.arange(64, dtype=np.int64) * 33554467 + 2**30 + 1).astype(np.int32).reshape(8, 8)  # > 2^24
    else:
        x = special_values(dtype, (8, 8))

    eng = getattr(nisa.engine, engine)   # host code: kernel code may not call getattr

    @nki.jit
    def k(x):
        a = load(x)
        b = nl.ndarray(x.shape, x.dtype)
        nisa.tensor_copy(dst=b, src=a, engine=eng)
        return store(b)

    c = nkicpu.capture(k)(x)
    assert_bits_equal(c.outputs, x)
    assert [i.engine for i in c.instructions if i.opcode == "tensor_copy"] == [engine]


@pytest.mark.parametrize("src_dtype,dst_dtype", [(F32, BF16), (np.int32, BF16), (BF16, np.int32), (np.int32, F32)],
                         ids=["fp32-bf16", "int32-bf16", "bf16-int32", "int32-fp32"])
def test_tensor_copy_converts_via_fp32(src_dtype, dst_dtype):
    if src_dtype == np.int32:
        x = np.array([2**24 + 1, -(2**24 + 3), 2**30 + 5, 7, 257, -258, 0, 1], np.int32).reshape(2, 4)
    else:
        x = np.array([2.5, 3.5, -2.5, 1.0 + 2**-8, 1e3, -7.25, 0.5, 1.5], F32).astype(src_dtype).reshape(2, 4)

    @nki.jit
    def k(x, dst_dtype):
        b = nl.ndarray(x.shape, dst_dtype)
        nisa.tensor_copy(dst=b, src=load(x))
        return store(b)

    via_fp32 = x.astype(np.float64).astype(F32)
    if np.issubdtype(dst_dtype, np.integer):
        want = np.array([round(float(v)) for v in via_fp32.ravel()], dst_dtype).reshape(x.shape)
    else:
        want = via_fp32.astype(dst_dtype)
    assert_bits_equal(run(k, x, dst_dtype), want)


def test_tensor_copy_through_psum():
    """PSUM holds any dtype; Vector writes it and ScalarE evicts it, bit-exact for equal dtypes."""
    x = special_values(BF16, (32, 48))

    @nki.jit
    def k(x):
        ps = nl.ndarray(x.shape, x.dtype, buffer=nl.psum)
        nisa.tensor_copy(dst=ps, src=load(x), engine=nisa.engine.vector)
        back = nl.ndarray(x.shape, x.dtype)
        nisa.tensor_copy(dst=back, src=ps, engine=nisa.engine.scalar)
        return store(back)

    assert_bits_equal(run(k, x), x)


# -- memset, iota -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
def test_memset_float(dtype):
    value = -0.1

    @nki.jit
    def k(dtype):
        a = nl.ndarray((16, 20), dtype)
        nisa.memset(dst=a, value=value)
        b = nl.ndarray((16, 20), dtype)
        nisa.memset(dst=b, value=value, engine=nisa.engine.gpsimd)
        ps = nl.ndarray((16, 20), dtype, buffer=nl.psum)
        nisa.memset(dst=ps, value=value)
        c = nl.ndarray((16, 20), dtype)
        nisa.tensor_copy(dst=c, src=ps)
        return store(a), store(b), store(c)

    want = np.full((16, 20), F32(value)).astype(dtype)
    for got in run(k, dtype):
        assert_bits_equal(got, want)


@pytest.mark.parametrize("dtype,value", [(np.int32, 2**30 + 3), (np.int32, -7), (np.uint8, 200)])
def test_memset_int_is_exact(dtype, value):
    @nki.jit
    def k(dtype):
        a = nl.ndarray((4, 5), dtype)
        nisa.memset(dst=a, value=value)
        return store(a)

    assert_bits_equal(run(k, dtype), np.full((4, 5), value, dtype))


@pytest.mark.parametrize("dtype", [np.int32, F32, BF16], ids=["int32", "fp32", "bf16"])
def test_iota(dtype):
    P = 8
    pattern = [[-1, 2], [5, 4]]          # value = offset + p * channel_multiplier - i + 5 j
    offset, cm = 250, 3

    @nki.jit
    def k(dtype):
        flat = nl.ndarray((P, 8), dtype)
        nisa.iota(dst=flat, pattern=pattern, offset=offset, channel_multiplier=cm)
        shaped = nl.ndarray((P, 2, 4), dtype)
        nisa.iota(dst=shaped, pattern=pattern, offset=offset, channel_multiplier=cm)
        one_d = nl.ndarray((P, 8), dtype)
        nisa.iota(dst=one_d, pattern=[[1, 8]])
        return store(flat), store(shaped), store(one_d)

    c = nkicpu.capture(k)(dtype)
    flat, shaped, one_d = c.outputs
    p, i, j = np.meshgrid(np.arange(P), np.arange(2), np.arange(4), indexing="ij")
    ints = offset + cm * p - i + 5 * j
    want = ints.astype(np.int32) if dtype == np.int32 else ints.astype(F32).astype(dtype)  # int32 -> fp32 -> dst
    assert_bits_equal(shaped, want)
    assert_bits_equal(flat, want.reshape(P, 8))
    assert_bits_equal(one_d, np.broadcast_to(np.arange(8), (P, 8)).astype(F32).astype(dtype))
    if dtype == BF16:
        assert not np.array_equal(shaped.astype(np.int64), ints)  # values above 256 really were rounded
    assert {i.engine for i in c.instructions if i.opcode == "iota"} == {"gpsimd"}


# -- nc_matmul --------------------------------------------------------------------------------

def fp32_matmul_bound(s, m):
    """Worst-case error of an fp32 dot product of K terms: (K + 1) u sum |s_k m_k| (products and sums rounded)."""
    K = s.shape[0]
    return (K + 1) * U * (np.abs(s.astype(np.float64)).T @ np.abs(m.astype(np.float64)))


@nki.jit
def matmul_kernel(s, m):
    ps = nl.ndarray((s.shape[1], m.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=load(s), moving=load(m))
    out = nl.ndarray(ps.shape, nl.float32)
    nisa.tensor_copy(dst=out, src=ps)
    return store(out)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
def test_nc_matmul_computes_stationary_T_at_moving(dtype):
    s, m = rand((96, 40), dtype), rand((96, 200), dtype, seed=1)
    with nkicpu.isa.fp32_matmul_numerics("exact"):   # the default fp32 mode: tests/test_fp32_matmul.py
        got = run(matmul_kernel, s, m)
    ref = s.astype(np.float64).T @ m.astype(np.float64)
    assert got.dtype == F32 and got.shape == (40, 200)
    assert np.all(np.abs(got - ref) <= fp32_matmul_bound(s, m))


def small_ints(shape, seed):
    """Integer-valued fp32 data: every sum below is exact in fp32, so results compare exactly."""
    return np.random.default_rng(seed).integers(-3, 4, size=shape).astype(F32)


@pytest.mark.parametrize("first,second,want_sum", [(None, None, True), (False, True, True), (None, False, False),
                                                   (False, False, False), (False, None, True)])
def test_nc_matmul_accumulate_flags(first, second, want_sum):
    """None infers per PSUM location: a first write overwrites (fresh PSUM is NaN), later ones accumulate."""
    s1, m1, s2, m2 = small_ints((32, 16), 1), small_ints((32, 64), 2), small_ints((32, 16), 3), small_ints((32, 64), 4)

    @nki.jit
    def k(s1, m1, s2, m2):
        ps = nl.ndarray((16, 64), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=load(s1), moving=load(m1), accumulate=first)
        nisa.nc_matmul(dst=ps, stationary=load(s2), moving=load(m2), accumulate=second)
        out = nl.ndarray(ps.shape, nl.float32)
        nisa.tensor_copy(dst=out, src=ps)
        return store(out)

    c = nkicpu.capture(k)(s1, m1, s2, m2)
    a1, a2 = s1.T @ m1, s2.T @ m2
    assert_bits_equal(c.outputs, a1 + a2 if want_sum else a2)
    assert [i.args["accumulate"] for i in c.instructions if i.opcode == "nc_matmul"] == [False, want_sum]


def test_nc_matmul_accumulate_none_is_per_location():
    s, m1, m2 = small_ints((16, 8), 1), small_ints((16, 32), 2), small_ints((16, 64), 3)

    @nki.jit
    def k(s, m1, m2):
        ps = nl.ndarray((8, 64), nl.float32, buffer=nl.psum)
        st = load(s)
        nisa.nc_matmul(dst=ps[:, 0:32], stationary=st, moving=load(m1))   # writes columns 0..31
        nisa.nc_matmul(dst=ps, stationary=st, moving=load(m2))            # 0..31 accumulate, 32..63 first write
        out = nl.ndarray(ps.shape, nl.float32)
        nisa.tensor_copy(dst=out, src=ps)
        return store(out)

    want = s.T @ m2
    want[:, :32] += s.T @ m1
    assert_bits_equal(run(k, s, m1, m2), want)


def test_nc_matmul_fresh_psum_tile_per_accumulation_group():
    """A new PSUM tile per group starts a new sum; reusing one tile with accumulate=None keeps adding."""
    G, KT = 3, 2
    s = small_ints((G * KT * 16, 8), 5)
    m = small_ints((G * KT * 16, 24), 6)

    @nki.jit
    def k(s, m, fresh):
        out = nl.ndarray((G, 8, 24), nl.float32, buffer=nl.shared_hbm)
        shared = nl.ndarray((8, 24), nl.float32, buffer=nl.psum)
        for g in range(G):
            ps = nl.ndarray((8, 24), nl.float32, buffer=nl.psum) if fresh else shared
            for kt in range(KT):
                r0 = (g * KT + kt) * 16
                nisa.nc_matmul(dst=ps, stationary=load(s[r0:r0 + 16, :]), moving=load(m[r0:r0 + 16, :]))
            res = nl.ndarray((8, 24), nl.float32)
            nisa.tensor_copy(dst=res, src=ps)
            nisa.dma_copy(dst=out[g], src=res)
        return out

    groups = [s[g * KT * 16:(g + 1) * KT * 16].T @ m[g * KT * 16:(g + 1) * KT * 16] for g in range(G)]
    assert_bits_equal(run(k, s, m, True), np.stack(groups))
    assert_bits_equal(run(k, s, m, False), np.cumsum(np.stack(groups), axis=0))


def test_nc_matmul_after_memset_overwrites():
    """accumulate=None after a memset infers a first matmul write (matmul onto memset PSUM is undefined on trn2)."""
    s, m = small_ints((16, 8), 1), small_ints((16, 32), 2)

    @nki.jit
    def k(s, m):
        ps = nl.ndarray((8, 32), nl.float32, buffer=nl.psum)
        nisa.memset(dst=ps, value=5.0)
        nisa.nc_matmul(dst=ps, stationary=load(s), moving=load(m))
        out = nl.ndarray(ps.shape, nl.float32)
        nisa.tensor_copy(dst=out, src=ps)
        return store(out)

    assert_bits_equal(run(k, s, m), s.T @ m)


def test_nc_matmul_into_banks_of_a_two_bank_psum_tile_and_tiling_mode():
    s, m = rand((32, 32), BF16), rand((32, 1024), BF16, seed=1)

    @nki.jit
    def k(s, m):
        ps = nl.ndarray((64, 1024), nl.float32, buffer=nl.psum)      # 4 KiB per partition: two banks
        st = load(s)
        nisa.nc_matmul(dst=ps[0:32, 512:1024], stationary=st, moving=load(m[:, 512:1024]))
        # the PE tile of rows 64.. and columns 32..: operands on partitions 64.., dst on PSUM partitions 32..
        s_hi, m_hi = nl.ndarray((96, 32), s.dtype), nl.ndarray((96, 512), m.dtype)
        nisa.dma_copy(dst=s_hi[64:96], src=s)
        nisa.dma_copy(dst=m_hi[64:96], src=m[:, 0:512])
        nisa.nc_matmul(dst=ps[32:64, 0:512], stationary=s_hi[64:96], moving=m_hi[64:96],
                       tile_position=(64, 32), tile_size=(32, 32), is_stationary_onezero=False)
        out = nl.ndarray((32, 1024), nl.float32)
        nisa.tensor_copy(dst=out[:, 512:1024], src=ps[0:32, 512:1024])
        nisa.tensor_copy(dst=out[:, 0:512], src=ps[32:64, 0:512])
        return store(out)

    c = nkicpu.capture(k)(s, m)
    ref = s.astype(np.float64).T @ m.astype(np.float64)
    assert np.all(np.abs(c.outputs - ref) <= fp32_matmul_bound(s, m))
    mms = [i for i in c.instructions if i.opcode == "nc_matmul"]
    assert [i.writes[0].offset for i in mms] == [512, 32 * 1024]
    assert mms[1].args["tile_position"] == (64, 32) and mms[1].args["tile_size"] == (32, 32)
    assert c.peak_psum_banks == 2


# -- nc_transpose -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
def test_nc_transpose_tensor_engine_is_bit_accurate(dtype):
    x = special_values(dtype, (64, 100))     # NaN / Inf transpose bit-accurately on NeuronCore-v3

    @nki.jit
    def k(x):
        ps = nl.ndarray((100, 64), x.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=ps, data=load(x))
        out = nl.ndarray(ps.shape, x.dtype)
        nisa.tensor_copy(dst=out, src=ps)
        return store(out)

    c = nkicpu.capture(k)(x)
    assert_bits_equal(c.outputs, x.T.copy())
    assert [i.engine for i in c.instructions if i.opcode == "nc_transpose"] == ["tensor"]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
def test_nc_transpose_vector_engine(dtype):
    x = special_values(dtype, (16, 32))
    y = rand((8, 2, 3), dtype, seed=3)

    @nki.jit
    def k(x, y):
        t = nl.ndarray((32, 16), x.dtype)
        nisa.nc_transpose(dst=t, data=load(x), engine=nisa.engine.vector)
        ps = nl.ndarray((16, 32), x.dtype, buffer=nl.psum)          # VectorE also reads and writes PSUM
        nisa.nc_transpose(dst=ps, data=t, engine=nisa.engine.vector)
        back = nl.ndarray((16, 32), x.dtype)
        nisa.nc_transpose(dst=back, data=load(x.permute((1, 0))), engine=nisa.engine.vector)
        again = nl.ndarray((16, 32), x.dtype)
        nisa.tensor_copy(dst=again, src=ps)
        flat = nl.ndarray((6, 8), y.dtype)                            # free dims [2, 3] flatten to 6
        nisa.nc_transpose(dst=flat, data=load(y))
        return store(t), store(again), store(back), store(flat)

    c = nkicpu.capture(k)(x, y)
    t, again, back, flat = c.outputs
    assert_bits_equal(t, x.T.copy())
    assert_bits_equal(again, x)
    assert_bits_equal(back, x)
    assert_bits_equal(flat, y.reshape(8, 6).T.copy())
    assert {i.engine for i in c.instructions if i.opcode == "nc_transpose"} == {"vector"}  # [8, 6] picks VectorE


# -- activation -------------------------------------------------------------------------------

def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


# float64 formulas of every activation nkicpu defines, with an input range inside its valid range.
ACTIVATIONS = {
    "copy": (lambda x: x, -4, 4),
    "square": (lambda x: x * x, -4, 4),
    "exp": (np.exp, -4, 4),
    "log": (np.log, 0.05, 8),
    "sqrt": (np.sqrt, 0.01, 8),
    "rsqrt": (lambda x: 1 / np.sqrt(x), 0.01, 8),
    "reciprocal": (lambda x: 1 / x, 0.1, 8),
    "sigmoid": (_sig, -6, 6),
    "silu": (lambda x: x * _sig(x), -6, 6),
    "silu_dx": (lambda x: _sig(x) * (1 + x * (1 - _sig(x))), -6, 6),
    "softplus": (lambda x: np.log1p(np.exp(x)), -6, 6),
    "tanh": (np.tanh, -4, 4),
    "relu": (lambda x: np.maximum(x, 0), -4, 4),
    "gelu_apprx_tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), -4, 4),
    "gelu": (lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))), -4, 4),
    "gelu_apprx_sigmoid": (lambda x: x * _sig(1.702 * x), -6, 6),
    "sign": (np.sign, -4, 4),
    "abs": (np.abs, -4, 4),
    "sin": (np.sin, -math.pi, math.pi),
    "arctan": (np.arctan, -math.pi / 2, math.pi / 2),
}


def test_every_activation_function_is_tested():
    assert set(ACTIVATIONS) == {name for name, op in nkicpu.ops.OPS.items() if op.act}


@nki.jit
def activation_kernel(x, op):
    xs = load(x)
    y32 = nl.ndarray(x.shape, nl.float32)
    nisa.activation(dst=y32, op=op, data=xs)
    y16 = nl.ndarray(x.shape, nl.bfloat16)
    nisa.activation(dst=y16, op=op, data=xs)
    return store(y32), store(y16)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_function(name, dtype):
    fn, lo, hi = ACTIVATIONS[name]
    x = rand((16, 64), dtype, lo, hi)
    if name == "sign":
        x.reshape(-1)[:3] = 0
    c = nkicpu.capture(activation_kernel)(x, getattr(nl, name))
    y32, y16 = c.outputs
    ref = fn(x.astype(np.float64))
    np.testing.assert_allclose(y32, ref, rtol=1e-5, atol=1e-6)
    assert_bits_equal(y16, y32.astype(BF16))      # fp32 math, one rounding to the bf16 dst
    assert {i.engine for i in c.instructions if i.opcode == "activation"} == {"scalar"}


def test_activation_scale_and_bias_forms():
    P, F = 16, 32
    x = rand((P, F), F32)
    s = rand((P, 1), F32, 0.5, 2, seed=1)
    b = rand((P, 1), F32, seed=2)
    b16 = b.astype(BF16)

    @nki.jit
    def k(x, s, b, b16):
        xs, st, bt, b16t = load(x), load(s), load(b), load(b16)
        outs = []
        for scale, bias in ((1.5, None), (st, bt), (-0.75, 0.25), (st, b16t)):
            y = nl.ndarray(x.shape, nl.float32)
            nisa.activation(dst=y, op=nl.copy, data=xs, scale=scale, bias=bias)
            outs.append(store(y))
        ps = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=ps, src=xs)
        e = nl.ndarray(x.shape, nl.bfloat16)
        nisa.activation(dst=e, op=nl.exp, data=ps, scale=st, bias=bt)     # reads PSUM, writes bf16
        return tuple(outs) + (store(e),)

    plain, tiles, scalars, bf16_bias, e = run(k, x, s, b, b16)
    assert_bits_equal(plain, x * F32(1.5))
    assert_bits_equal(tiles, x * s + b)                                   # scale first, then bias
    assert_bits_equal(scalars, x * F32(-0.75) + F32(0.25))
    assert_bits_equal(bf16_bias, x * s + b16.astype(F32))
    ref = np.exp(x.astype(np.float64) * s + b)
    np.testing.assert_allclose(e.astype(np.float64), ref, rtol=2 ** -8)   # one bf16 rounding


def test_activation_reduce_commands():
    """reset_reduce / reduce / idle / reset on ScalarE's per-lane accumulators, read out through reduce_res."""
    P = 8
    x1, x2 = rand((P, 2, 3), F32), rand((P, 6), F32, seed=1)

    @nki.jit
    def k(x1, x2):
        a, b = load(x1), load(x2)
        y1 = nl.ndarray(a.shape, nl.float32)
        y2 = nl.ndarray(b.shape, nl.float32)
        r = []
        for _ in range(4):
            r.append(nl.ndarray((P, 1), nl.float32))
        r16 = nl.ndarray((P, 1), nl.bfloat16)
        nisa.activation(dst=y1, op=nl.square, data=a, reduce_op=nl.add, reduce_res=r[0],
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)           # sum over both free dims
        nisa.activation(dst=y2, op=nl.exp, data=b, reduce_op=nl.add, reduce_res=r[1],
                        reduce_cmd=nisa.reduce_cmd.reduce)                 # keeps adding
        nisa.activation(dst=y2, op=nl.exp, data=b, reduce_res=r[2])       # idle: reads, leaves them
        nisa.activation(dst=y2, op=nl.exp, data=b, reduce_res=r16)
        nisa.activation(dst=y1, op=nl.square, data=a, reduce_res=r[3], reduce_cmd=nisa.reduce_cmd.reset)
        return store(r[0]), store(r[1]), store(r[2]), store(r[3]), store(r16), store(y1)

    r0, r1, r2, r3, r16, y1 = run(k, x1, x2)
    sq = (x1.astype(np.float64) ** 2).reshape(P, -1).sum(1, keepdims=True)
    ex = np.exp(x2.astype(np.float64)).sum(1, keepdims=True)
    np.testing.assert_allclose(r0, sq, rtol=1e-6)
    np.testing.assert_allclose(r1, sq + ex, rtol=1e-6)
    assert_bits_equal(r2, r1)
    assert_bits_equal(r16, r1.astype(BF16))
    assert_bits_equal(r3, np.zeros((P, 1), F32))
    assert_bits_equal(y1, x1 * x1)


def test_activation_accumulators_are_per_partition_lane():
    """ScalarE has one accumulator per lane (partition): a view of partitions 32..63 uses lanes 32..63."""
    x, y = rand((64, 6), F32), rand((64, 6), F32, seed=1)

    @nki.jit
    def k(x, y):
        a, b = load(x), load(y)
        junk = nl.ndarray((64, 6), nl.float32)
        nisa.activation(dst=junk, op=nl.copy, data=a, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        r = nl.ndarray((32, 1), nl.float32)
        nisa.activation(dst=junk[32:64], op=nl.copy, data=b[32:64], reduce_op=nl.add, reduce_res=r,
                        reduce_cmd=nisa.reduce_cmd.reduce)
        return store(r)

    want = x[32:64].astype(np.float64).sum(1, keepdims=True) + y[32:64].sum(1, keepdims=True)
    np.testing.assert_allclose(run(k, x, y), want, rtol=1e-6, atol=1e-6)


def test_activation_reduce_resets_first():
    P = 8
    x, junk = rand((P, 12), F32), rand((P, 12), F32, seed=9)
    bias = rand((P, 1), F32, seed=3)

    @nki.jit
    def k(x, junk, bias):
        y = nl.ndarray(x.shape, nl.float32)
        nisa.activation(dst=y, op=nl.copy, data=load(junk), reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)          # leaves junk in the accumulators
        r = nl.ndarray((P, 1), nl.float32)
        nisa.activation_reduce(dst=y, op=nl.tanh, data=load(x), reduce_op=nl.add, reduce_res=r,
                               bias=load(bias), scale=0.5)
        return store(y), store(r)

    y, r = run(k, x, junk, bias)
    ref = np.tanh(x.astype(np.float64) * 0.5 + bias)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r, ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)


# -- tensor_tensor ----------------------------------------------------------------------------

@nki.jit
def tensor_tensor_kernel(a, b, op, out_dtype):
    r = nl.ndarray(a.shape, out_dtype)
    nisa.tensor_tensor(dst=r, data1=load(a), data2=load(b), op=op)
    return store(r)


ARITH = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum}
COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
           "less": np.less, "less_equal": np.less_equal, "logical_and": np.logical_and,
           "logical_or": np.logical_or, "logical_xor": np.logical_xor}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(ARITH))
def test_tensor_tensor_arithmetic(name, dtype):
    a, b = rand((16, 40), dtype), rand((16, 40), dtype, seed=1)
    want = fp32_then(dtype, ARITH[name](a.astype(F32), b.astype(F32)))   # data1 op data2
    assert_bits_equal(run(tensor_tensor_kernel, a, b, getattr(nl, name), dtype), want)


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_tensor_tensor_comparisons_give_one_or_zero(name):
    rng = np.random.default_rng(0)
    a = rng.integers(-1, 2, (8, 32)).astype(F32)   # many ties and zeros
    b = rng.integers(-1, 2, (8, 32)).astype(F32)
    got = run(tensor_tensor_kernel, a, b, getattr(nl, name), F32)
    assert_bits_equal(got, COMPARE[name](a, b).astype(F32))


def test_tensor_tensor_power_runs_on_gpsimd():
    a, b = rand((8, 16), F32, 0.5, 2), rand((8, 16), F32, -2, 2, seed=1)
    c = nkicpu.capture(tensor_tensor_kernel)(a, b, nl.power, F32)
    np.testing.assert_allclose(c.outputs, a.astype(np.float64) ** b, rtol=1e-6)
    assert [i.engine for i in c.instructions if i.opcode == "tensor_tensor"] == ["gpsimd"]


def test_tensor_tensor_int32_is_exact_on_gpsimd():
    a = (np.arange(32, dtype=np.int64).reshape(4, 8) * 1000003 + 2**24 + 1).astype(np.int32)
    b = np.full((4, 8), 7, np.int32)

    @nki.jit
    def k(a, b):
        s = nl.ndarray(a.shape, nl.int32)
        nisa.tensor_tensor(dst=s, data1=load(a), data2=load(b), op=nl.add)                 # GpSimd by default
        p = nl.ndarray(a.shape, nl.int32)
        nisa.tensor_tensor(dst=p, data1=load(a), data2=load(b), op=nl.multiply)
        v = nl.ndarray(a.shape, nl.int32)
        nisa.tensor_tensor(dst=v, data1=load(a), data2=load(b), op=nl.add, engine=nisa.engine.vector)
        return store(s), store(p), store(v)

    c = nkicpu.capture(k)(a, b)
    s, p, v = c.outputs
    assert_bits_equal(s, a + b)
    assert_bits_equal(p, a * b)
    # VectorE does the same add in fp32: RNE to fp32, then back to int32 -- not exact above 2^24.
    fp = a.astype(F32) + b.astype(F32)
    assert_bits_equal(v, fp.astype(np.int32))
    assert not np.array_equal(v, a + b)
    assert [i.engine for i in c.instructions if i.opcode == "tensor_tensor"] == ["gpsimd", "gpsimd", "vector"]


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"])
def test_tensor_tensor_bitvec(name):
    a = np.array([[-1, -256, 0x12345678, 7], [-2**31, 2**31 - 1, 5, -5]], np.int32)
    b = np.array([[3, 4, 0x0F0F0F0F, 1], [1, 30, 2, 31]], np.int32)
    u, ub = a.view(np.uint32), b.view(np.uint32)
    want = {"bitwise_and": u & ub, "bitwise_or": u | ub, "bitwise_xor": u ^ ub,
            "left_shift": u << ub, "right_shift": u >> ub}[name].view(np.int32)   # logical shifts
    assert_bits_equal(run(tensor_tensor_kernel, a, b, getattr(nl, name), np.int32), want)


def test_tensor_tensor_psum_operand_and_broadcast_view():
    P, F = 16, 24
    a, w = rand((P, F), F32), rand((P, 1), F32, seed=1)

    @nki.jit
    def k(a, w):
        ps = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=ps, src=load(a))
        r = nl.ndarray((P, F), nl.bfloat16)
        nisa.tensor_tensor(dst=r, data1=ps, data2=load(w).broadcast(1, F), op=nl.multiply)  # stride-0 operand
        return store(r)

    assert_bits_equal(run(k, a, w), (a * w).astype(BF16))


# -- tensor_scalar ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(ARITH) + ["greater"])
@pytest.mark.parametrize("reverse", [False, True])
def test_tensor_scalar_one_op(name, dtype, reverse):
    x, c = rand((16, 40), dtype), 0.3
    op = getattr(nl, name)   # host code: kernel code may not call getattr

    @nki.jit
    def k(x):
        r = nl.ndarray(x.shape, x.dtype)
        nisa.tensor_scalar(dst=r, data=load(x), op0=op, operand0=c, reverse0=reverse)
        return store(r)

    fn = {**ARITH, "greater": lambda p, q: np.greater(p, q).astype(F32)}[name]
    x32 = x.astype(F32)
    want = fn(F32(c), x32) if reverse else fn(x32, F32(c))
    assert_bits_equal(run(k, x), fp32_then(dtype, want))


def test_tensor_scalar_two_ops_with_tile_operands():
    P = 16
    x, t0, t1 = rand((P, 30), F32), rand((P, 1), F32, seed=1), rand((P, 1), F32, seed=2)

    @nki.jit
    def k(x, t0, t1):
        xs, a, b = load(x), load(t0), load(t1)
        outs = []
        for kw in (dict(op0=nl.multiply, operand0=a, op1=nl.add, operand1=b),
                   dict(op0=nl.multiply, operand0=a, op1=nl.subtract, operand1=b, reverse1=True),
                   dict(op0=nl.subtract, operand0=a, reverse0=True, op1=nl.maximum, operand1=0.0)):
            r = nl.ndarray(x.shape, nl.float32)
            nisa.tensor_scalar(dst=r, data=xs, **kw)
            outs.append(store(r))
        e = nl.ndarray(x.shape, nl.float32)
        nisa.tensor_scalar(dst=e, data=xs, op0=nl.multiply, operand0=a, op1=nl.add, operand1=b,
                           engine=nisa.engine.scalar)
        outs.append(store(e))
        return tuple(outs)

    fma, rev1, rev0, on_scalar = run(k, x, t0, t1)
    assert_bits_equal(fma, x * t0 + t1)
    assert_bits_equal(rev1, t1 - x * t0)
    assert_bits_equal(rev0, np.maximum(t0 - x, F32(0)))
    assert_bits_equal(on_scalar, fma)


@pytest.mark.parametrize("name,operand0", [("abs", None), ("rsqrt", 0), ("reciprocal", None), ("rsqrt", 0.0)])
def test_tensor_scalar_unary(name, operand0):
    x = rand((8, 32), F32, 0.25, 4)
    x[0, :4] *= -1 if name == "abs" else 1
    eng = nisa.engine.gpsimd if name == "rsqrt" and operand0 == 0.0 else nisa.engine.unknown  # precise GpSimd rsqrt
    op = getattr(nl, name)   # host code: kernel code may not call getattr

    @nki.jit
    def k(x):
        r = nl.ndarray(x.shape, nl.float32)
        nisa.tensor_scalar(dst=r, data=load(x), op0=op, operand0=operand0, engine=eng)
        return store(r)

    ref = {"abs": np.abs, "rsqrt": lambda v: 1 / np.sqrt(v), "reciprocal": lambda v: 1 / v}[name](x.astype(np.float64))
    np.testing.assert_allclose(run(k, x), ref, rtol=2e-7)


def test_tensor_scalar_rounds_once_to_bf16():
    x = rand((32, 64), BF16)
    a, b = 1.37, 0.013

    @nki.jit
    def k(x):
        r = nl.ndarray(x.shape, nl.bfloat16)
        nisa.tensor_scalar(dst=r, data=load(x), op0=nl.multiply, operand0=a, op1=nl.add, operand1=b)
        return store(r)

    got = run(k, x)
    want = (x.astype(F32) * F32(a) + F32(b)).astype(BF16)
    twice = ((x.astype(F32) * F32(a)).astype(BF16).astype(F32) + F32(b)).astype(BF16)
    assert_bits_equal(got, want)
    assert not np.array_equal(bits(want), bits(twice))   # the data tell one rounding from two


# -- scalar_tensor_tensor ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
def test_scalar_tensor_tensor(dtype):
    P, F = 16, 48
    x, y, g = rand((P, F), dtype), rand((P, F), dtype, seed=1), rand((P, 1), F32, seed=2)
    g16 = g.astype(BF16)

    @nki.jit
    def k(x, y, g, g16):
        xs, ys, gt, g16t = load(x), load(y), load(g), load(g16)
        outs = []
        for kw in (dict(op0=nl.multiply, operand0=gt, op1=nl.add),                      # x * g + y (decay+update)
                   dict(op0=nl.multiply, operand0=0.7, op1=nl.subtract, reverse1=True),  # y - x * 0.7
                   dict(op0=nl.subtract, operand0=gt, reverse0=True, op1=nl.maximum),    # max(g - x, y)
                   dict(op0=nl.multiply, operand0=g16t, op1=nl.add)):                    # any-dtype operand0 tile
            r = nl.ndarray(x.shape, x.dtype)
            nisa.scalar_tensor_tensor(dst=r, data=xs, operand1=ys, **kw)
            outs.append(store(r))
        return tuple(outs)

    x32, y32 = x.astype(F32), y.astype(F32)
    fma, rev1, rev0, g16_out = run(k, x, y, g, g16)
    assert_bits_equal(fma, fp32_then(dtype, x32 * g + y32))
    assert_bits_equal(rev1, fp32_then(dtype, y32 - x32 * F32(0.7)))
    assert_bits_equal(rev0, fp32_then(dtype, np.maximum(g - x32, y32)))
    assert_bits_equal(g16_out, fp32_then(dtype, x32 * g16.astype(F32) + y32))
    if dtype == BF16:  # one rounding, not one per op
        twice = ((x32 * g).astype(BF16).astype(F32) + y32).astype(BF16)
        assert not np.array_equal(bits(fma), bits(twice))


# -- tensor_reduce ----------------------------------------------------------------------------

REDUCE = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum, "multiply": np.multiply, "subtract": np.subtract}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(REDUCE))
def test_tensor_reduce(name, dtype):
    P = 8
    x = rand((P, 4, 6), dtype, 0.5, 1.5) if name == "multiply" else rand((P, 4, 6), dtype)
    op = getattr(nl, name)   # host code: kernel code may not call getattr

    @nki.jit
    def k(x):
        xs = load(x)
        last = nl.ndarray((P, 4), nl.float32)
        nisa.tensor_reduce(dst=last, op=op, data=xs, axis=2)
        kept = nl.ndarray((P, 4, 1), nl.float32)
        nisa.tensor_reduce(dst=kept, op=op, data=xs, axis=(2,), keepdims=True)
        both = nl.ndarray((P, 1), nl.float32)
        nisa.tensor_reduce(dst=both, op=op, data=xs, axis=(1, 2), negate=True)
        both16 = nl.ndarray((P, 1), nl.bfloat16)
        nisa.tensor_reduce(dst=both16, op=op, data=xs, axis=[1, 2], negate=True)
        return store(last), store(kept), store(both), store(both16)

    last, kept, both, both16 = run(k, x)
    x64 = x.astype(np.float64)
    ufunc = REDUCE[name]
    np.testing.assert_allclose(last, ufunc.reduce(x64, axis=2), rtol=1e-5, atol=1e-6)
    assert_bits_equal(kept, last[:, :, None])
    np.testing.assert_allclose(both, -ufunc.reduce(x64.reshape(P, -1), axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    assert_bits_equal(both16, both.astype(BF16))


def test_tensor_reduce_bitvec_and_all_free_axes_of_4d():
    x = np.random.default_rng(0).integers(-2**31, 2**31, (4, 2, 3, 5), dtype=np.int64).astype(np.int32)

    @nki.jit
    def k(x):
        r = nl.ndarray((4, 1), nl.int32)
        nisa.tensor_reduce(dst=r, op=nl.bitwise_or, data=load(x), axis=(1, 2, 3))
        return store(r)

    assert_bits_equal(run(k, x), np.bitwise_or.reduce(x.reshape(4, -1), axis=1, keepdims=True))


# -- reciprocal -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
def test_reciprocal(dtype):
    x = rand((16, 32), dtype, 0.1, 8)
    x[0, :8] *= -1

    @nki.jit
    def k(x):
        r = nl.ndarray(x.shape, x.dtype)
        nisa.reciprocal(dst=r, data=load(x))
        return store(r)

    c = nkicpu.capture(k)(x)
    assert_bits_equal(c.outputs, fp32_then(dtype, F32(1) / x.astype(F32)))   # IEEE fp32 division, one rounding
    assert [i.engine for i in c.instructions if i.opcode == "reciprocal"] == ["vector"]
