"""in_proj v3: v2 with the matmul turned around: hidden^T stationary, the weight chunk moving
([128, <= 512] columns), so the sums land row-major, [B, 512] per PSUM bank, and leave as rows."""
import nki
import nki.isa as nisa
import nki.language as nl

from .in_proj_v1 import load_inputs
from .in_proj_v2 import GROUP, weight_chunks


def project_v3(out, hidden_T, W):
    """out [B, N] @ HBM = hidden @ W: per 512 channels, the chunk loads of v2, one
    matmul per chunk row into one PSUM bank, one eviction and one row store."""
    H, N = W.shape
    pmax = nl.tile_size.pmax
    KT = H // pmax
    B = hidden_T.shape[2]
    W3 = W.reshape((pmax, KT, N))                  # W3[p, kt, c] = W[p * KT + kt, c]
    for g0 in range(0, N, GROUP):
        width = min(GROUP, N - g0)
        acc = nl.ndarray((B, width), dtype=nl.float32, buffer=nl.psum)
        chunks = weight_chunks(KT, width)
        for i in range(len(chunks)):
            kt0, g = chunks[i]
            w = nl.ndarray((pmax, g, width), dtype=W.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=w, src=W3[:, kt0:kt0 + g, g0:g0 + width])
            for j in range(g):
                nisa.nc_matmul(dst=acc, stationary=hidden_T[:, kt0 + j, :],
                               moving=w[:, j, :], accumulate=(kt0 + j > 0))
        rows = nl.ndarray((B, width), dtype=out.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=rows, src=acc)
        nisa.dma_copy(dst=out[:, g0:g0 + width], src=rows)


@nki.jit
def in_proj_kernel(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b):
    """in_proj v3: hidden stationary, the weights moving in large DMAs, HBM -> HBM.

    Dimensions:
        B: batch (<= 128), H: hidden size (a multiple of 128), N: a weight's columns.

    Args:
        hidden: [B, 1, H] @ HBM, bf16.
        W_in_qkv, W_in_z, W_in_a, W_in_b: [H, N] @ HBM, bf16 (nn.Linear weights transposed).

    Returns:
        mixed_qkv, z, a, b: [B, N] @ shared HBM, bf16 (fp32 sums, one rounding).

    Notes:
        - (H / 128) * ceil(N / 512) matmuls per weight, about a quarter of v2's; the [B, 512] sums
          leave as B contiguous rows, no transposing store.

    Pseudocode:
        for W, out in weights and outputs:
            for g0 in range(0, N, 512):
                acc = sum over kt of hidden_T[:, kt, :].T @ W[rows(kt), g0:g0 + 512]
                out[:, g0:g0 + 512] = acc.astype(bf16)
    """
    outs, weights, hidden_T = load_inputs(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b)
    for i in range(len(outs)):
        project_v3(outs[i], hidden_T, weights[i])
    return outs[0], outs[1], outs[2], outs[3]
