# Mirrors aws-neuron/aws-neuron-sdk nki/examples/matrix_multiplication/matrix_multiplication_nki_kernels.py
# (nki_matmul_basic_, nki_matmul_tiled_, nki_matmul_fully_optimized_) at commit
# 81ce03ae261e12925e53437a0f690478e6366155. Written for this project, not copied. The example is
# current API (`import nki`, dst-first nisa calls) and is followed as is, except its module-level
# `import numpy as np` (unused by the kernels). nki_matmul_hoist_load_ and
# nki_matmul_block_free_dimension_ add only Python lists of tiles, which the fully optimized one uses too.
"""The SDK matrix-multiplication tutorial kernels: result[M, N] = lhsT[K, M].T @ rhs[K, N]."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def nki_matmul_basic(lhsT, rhs):
    """One [128, 64] x [128, 512] matmul: one PSUM tile, positional nc_matmul(dst, stationary, moving)."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert (K, M, K_, N) == (128, 64, 128, 512), \
        f"expected lhsT [128, 64] and rhs [128, 512], got {lhsT.shape} and {rhs.shape}"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    lhs_tile = nl.ndarray(lhsT.shape, dtype=lhsT.dtype, buffer=nl.sbuf)
    rhs_tile = nl.ndarray(rhs.shape, dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=lhs_tile, src=lhsT)
    nisa.dma_copy(dst=rhs_tile, src=rhs)
    result_psum = nl.ndarray(result.shape, dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(result_psum, lhs_tile, rhs_tile)
    result_sbuf = nl.ndarray(result_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result_sbuf, src=result_psum)
    nisa.dma_copy(dst=result, src=result_sbuf)
    return result


@nki.jit
def nki_matmul_tiled(lhsT, rhs):
    """Tiles of [128 K, 128 M] x [128 K, 512 N], accumulated over K in one PSUM tile per (m, n)."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_, "lhsT and rhs must have the same contraction dimension"
    TILE_M = nl.tile_size.gemm_stationary_fmax
    TILE_K = nl.tile_size.pmax
    TILE_N = nl.tile_size.gemm_moving_fmax
    assert M % TILE_M == 0 and N % TILE_N == 0 and K % TILE_K == 0, f"shapes must tile: {K}, {M}, {N}"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            res_psum = nl.ndarray((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                nisa.nc_matmul(dst=res_psum, stationary=lhsT_tile, moving=rhs_tile)
            res_sb = nl.ndarray(res_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb, src=res_psum)
            nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], src=res_sb)
    return result


@nki.jit
def nki_matmul_fully_optimized(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """Blocked over M, N and K: each K block's partial products (PSUM) are added into SBUF result
    rows [TILE_M, TILES_IN_BLOCK_N, TILE_N] (zeroed first), stored one N block per DMA."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_, "lhsT and rhs must have the same contraction dimension"
    TILE_M = nl.tile_size.gemm_stationary_fmax
    TILE_K = nl.tile_size.pmax
    TILE_N = nl.tile_size.gemm_moving_fmax
    BLOCK_M, BLOCK_N, BLOCK_K = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    assert M % BLOCK_M == 0 and N % BLOCK_N == 0 and K % BLOCK_K == 0, f"shapes must block: {K}, {M}, {N}"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for n in nl.affine_range(N // BLOCK_N):
        n_start, n_end = n * BLOCK_N, (n + 1) * BLOCK_N
        result_m_tiles = []
        for m_tile_idx in nl.affine_range(M // TILE_M):
            result_m_tile = nl.ndarray(shape=(TILE_M, TILES_IN_BLOCK_N, TILE_N), dtype=result.dtype, buffer=nl.sbuf)
            nisa.memset(dst=result_m_tile, value=0.0)
            result_m_tiles.append(result_m_tile)

        for k in nl.sequential_range(K // BLOCK_K):
            rhs_tiles = nl.ndarray(shape=(TILE_K, TILES_IN_BLOCK_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
            for k_tile in range(TILES_IN_BLOCK_K):
                k0 = (k * TILES_IN_BLOCK_K + k_tile) * TILE_K
                nisa.dma_copy(dst=rhs_tiles[0:TILE_K, k_tile, 0:BLOCK_N], src=rhs[k0:k0 + TILE_K, n_start:n_end])
            for m in nl.affine_range(M // BLOCK_M):
                lhsT_tiles = nl.ndarray(shape=(TILE_K, TILES_IN_BLOCK_K, BLOCK_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                for k_tile in nl.affine_range(TILES_IN_BLOCK_K):
                    k0 = (k * TILES_IN_BLOCK_K + k_tile) * TILE_K
                    nisa.dma_copy(dst=lhsT_tiles[0:TILE_K, k_tile, 0:BLOCK_M],
                                  src=lhsT[k0:k0 + TILE_K, m * BLOCK_M:(m + 1) * BLOCK_M])
                for n_tile in nl.affine_range(TILES_IN_BLOCK_N):
                    for m_tile in nl.affine_range(TILES_IN_BLOCK_M):
                        result_tile = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        m0, n0 = m_tile * TILE_M, n_tile * TILE_N
                        for k_tile in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(dst=result_tile, stationary=lhsT_tiles[0:TILE_K, k_tile, m0:m0 + TILE_M],
                                           moving=rhs_tiles[0:TILE_K, k_tile, n0:n0 + TILE_N])
                        # Evict PSUM while accumulating into the SBUF result row.
                        result_m_tile = result_m_tiles[m * TILES_IN_BLOCK_M + m_tile]
                        nisa.tensor_tensor(dst=result_m_tile[0:TILE_M, n_tile, 0:TILE_N],
                                           data1=result_m_tile[0:TILE_M, n_tile, 0:TILE_N], data2=result_tile, op=nl.add)

        for m_tile_idx in nl.affine_range(M // TILE_M):
            block = result_m_tiles[m_tile_idx].reshape((TILE_M, BLOCK_N))
            nisa.dma_copy(dst=result[m_tile_idx * TILE_M:(m_tile_idx + 1) * TILE_M, n_start:n_end],
                          src=block[0:TILE_M, 0:BLOCK_N])
    return result
