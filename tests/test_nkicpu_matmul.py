"""A tiled bf16 matmul on nkicpu: the numbers, and the instruction stream the cost model will see.

    out[M, N] = lhsT[K, M].T @ rhs[K, N]      (bf16 in, fp32 out)

TensorE contracts over the partition dim, at most 128 rows per nc_matmul, and writes at most 512
fp32 columns -- one 2 KiB PSUM bank per partition. So K = 512 is four 128-row tiles accumulated in
PSUM, and N = 1024 is two 512-column banks, each with its own accumulator.

Tolerance. A bf16 x bf16 product is exact in fp32 (two 8-bit significands make at most 16 bits),
so the only error is the fp32 summation of the K products (inside nc_matmul and across the PSUM
accumulation): at worst K u sum_k |lhsT[k, m] rhs[k, n]| with u = 2^-24 (K u = 3e-5), and in
practice about sqrt(K) u = 1.4e-6 of the result's scale for random signs. We require the
worst-case bound elementwise, and |error| <= 1e-5 * max|result| as one scale-relative number.
Both are far below a bf16 ulp of the result (2^-8 relative): a kernel that rounded its result to
bf16, or accumulated in bf16, fails -- the test checks that margin too.
"""
import numpy as np
import pytest

import nkicpu
from nkicpu_testing import BF16, F32, nisa, nki, nl, rand


@nki.jit
def matmul_bf16(lhsT, rhs):
    """out = lhsT.T @ rhs for bf16 inputs, accumulated in fp32 PSUM.

    Dimensions:
        K: contraction, a multiple of 128; M: output rows, at most 128; N: output columns, a multiple of 512.
    Args:
        lhsT: [K, M] @ HBM, bf16 -- the left operand already transposed, so that K lies on partitions.
        rhs:  [K, N] @ HBM, bf16.
    Returns:
        out: [M, N] @ shared HBM, fp32.
    Notes:
        Each lhsT tile is loaded once and is the stationary operand for every column block; each
        512-column block of out owns one PSUM bank for the whole K loop.
    Pseudocode:
        out = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    """
    K, M = lhsT.shape
    K_rhs, N = rhs.shape
    TILE_K = nl.tile_size.pmax                # 128 contraction rows per nc_matmul (the partition dim)
    TILE_N = nl.tile_size.gemm_moving_fmax    # 512 fp32 columns: one PSUM bank per partition
    assert K == K_rhs and K % TILE_K == 0 and N % TILE_N == 0 and M <= nl.tile_size.gemm_stationary_fmax

    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    # One fp32 accumulator per 512-column block of the output, each in its own PSUM bank.
    acc = []
    for _ in range(N // TILE_N):
        acc.append(nl.ndarray((M, TILE_N), nl.float32, buffer=nl.psum))

    for k in range(K // TILE_K):
        # The stationary operand: 128 rows of lhsT, loaded once and used for every column block.
        lhsT_tile = nl.ndarray((TILE_K, M), lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * TILE_K:(k + 1) * TILE_K, :])
        for n in range(N // TILE_N):
            # The moving operand: the matching 128 x 512 block of rhs.
            rhs_tile = nl.ndarray((TILE_K, TILE_N), rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=rhs_tile, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
            # The first k-tile overwrites the bank, the others add to it.
            nisa.nc_matmul(dst=acc[n], stationary=lhsT_tile, moving=rhs_tile, accumulate=(k > 0))

    for n in range(N // TILE_N):
        # DMA cannot read PSUM: evict each bank to SBUF, then store it.
        res = nl.ndarray((M, TILE_N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc[n])
        nisa.dma_copy(dst=out[:, n * TILE_N:(n + 1) * TILE_N], src=res)
    return out


K, N = 512, 1024


@pytest.fixture(scope="module", params=[64, 128], ids=["M64", "M128"])
def run(request):
    M = request.param
    lhsT, rhs = rand((K, M), BF16, seed=1), rand((K, N), BF16, seed=2)
    return lhsT, rhs, nkicpu.capture(matmul_bf16)(lhsT, rhs)


def test_matches_numpy_to_fp32_accumulation_error(run):
    lhsT, rhs, c = run
    a, b = lhsT.astype(np.float64), rhs.astype(np.float64)
    ref = a.T @ b
    err = np.abs(c.outputs.astype(np.float64) - ref)
    assert c.outputs.dtype == F32 and c.outputs.shape == ref.shape
    assert np.all(err <= K * 2.0 ** -24 * (np.abs(a).T @ np.abs(b)))     # worst-case fp32 summation bound
    tol = 1e-5 * np.abs(ref).max()
    assert err.max() <= tol
    # The tolerance is tight: rounding the result to bf16 (or accumulating in bf16) would break it.
    assert np.abs(ref.astype(BF16).astype(np.float64) - ref).max() > 10 * tol


def test_instruction_counts_and_engines(run):
    lhsT, rhs, c = run
    M = lhsT.shape[1]
    k_tiles, n_banks = K // nl.tile_size.pmax, N // nl.tile_size.gemm_moving_fmax
    ops = [i.opcode for i in c.instructions]
    assert ops.count("dma_copy") == k_tiles + k_tiles * n_banks + n_banks     # lhsT tiles, rhs blocks, stores
    assert ops.count("nc_matmul") == k_tiles * n_banks
    assert ops.count("tensor_copy") == n_banks
    assert len(ops) == ops.count("dma_copy") + ops.count("nc_matmul") + ops.count("tensor_copy")
    engines = {op: {i.engine for i in c.instructions if i.opcode == op} for op in set(ops)}
    assert engines == {"dma_copy": {"dma"}, "nc_matmul": {"tensor"}, "tensor_copy": {"vector"}}
    for i in c.instructions:
        if i.opcode == "nc_matmul":
            assert (i.args["K"], i.args["M"], i.args["N"]) == (128, M, 512)
            assert [a.dtype for a in i.reads] == ["bfloat16", "bfloat16"] and i.writes[0].dtype == "float32"


def test_hbm_bytes(run):
    lhsT, rhs, c = run
    dmas = [i for i in c.instructions if i.opcode == "dma_copy"]
    read = sum(a.nbytes for i in dmas for a in i.reads if a.buffer.endswith("hbm"))
    written = sum(a.nbytes for i in dmas for a in i.writes if a.buffer.endswith("hbm"))
    assert read == lhsT.nbytes + rhs.nbytes                 # every input byte read exactly once
    assert written == c.outputs.nbytes


def test_two_psum_banks_each_accumulated_over_k(run):
    lhsT, rhs, c = run
    k_tiles = K // nl.tile_size.pmax
    assert c.peak_psum_banks == N // nl.tile_size.gemm_moving_fmax == 2
    banks = {}
    for i in c.instructions:
        if i.opcode == "nc_matmul":
            w = i.writes[0]
            assert w.buffer == "psum" and w.nbytes // w.partitions == nl.tile_size.psum_bank_fmax_bytes
            banks.setdefault(w.alloc, []).append(i.args["accumulate"])
    assert len(banks) == 2
    for flags in banks.values():
        assert flags == [False] + [True] * (k_tiles - 1)    # overwrite, then accumulate
    evicted = {i.reads[0].alloc for i in c.instructions if i.opcode == "tensor_copy"}
    assert evicted == set(banks)
    assert c.peak_sbuf_bytes <= nl.tile_size.sbuf_fmax_bytes
