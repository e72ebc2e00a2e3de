"""in_proj v2: v1 with the weight streamed in large DMAs: [128, g, 512] chunks of g rows per
partition (WEIGHT_DMA_BYTES), each feeding the matmuls of four 128-channel blocks."""
import nki
import nki.isa as nisa
import nki.language as nl

from ..in_proj import BF16_BYTES, WEIGHT_DMA_BYTES
from .in_proj_v1 import load_inputs

GROUP = 512     # columns per weight chunk: g rows of 1 KiB per partition


def weight_chunks(KT, width):
    """(first row, rows) of balanced chunks of at most WEIGHT_DMA_BYTES per partition."""
    n_chunks = -(-KT // max(1, min(KT, WEIGHT_DMA_BYTES // (width * BF16_BYTES))))
    chunks = []
    for i in range(n_chunks):
        kt0 = i * KT // n_chunks
        chunks.append((kt0, (i + 1) * KT // n_chunks - kt0))
    return chunks


def project_v2(out, hidden_T, W):
    """out [B, N] @ HBM = hidden @ W: per 512 channels, a few large chunk loads, then
    per 128 channels the matmuls of v1 and one transposing store."""
    H, N = W.shape
    pmax = nl.tile_size.pmax
    KT = H // pmax
    B = hidden_T.shape[2]
    W3 = W.reshape((pmax, KT, N))                  # W3[p, kt, c] = W[p * KT + kt, c]
    for g0 in range(0, N, GROUP):
        width = min(GROUP, N - g0)
        accs = []
        for c0 in range(0, width, pmax):
            accs.append(nl.ndarray((min(pmax, width - c0), B), dtype=nl.float32,
                                   buffer=nl.psum))
        chunks = weight_chunks(KT, width)
        for i in range(len(chunks)):
            kt0, g = chunks[i]
            w = nl.ndarray((pmax, g, width), dtype=W.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=w, src=W3[:, kt0:kt0 + g, g0:g0 + width])
            for j in range(g):
                for t in range(len(accs)):
                    n = accs[t].shape[0]
                    nisa.nc_matmul(dst=accs[t],
                                   stationary=w[:, j, t * pmax:t * pmax + n],
                                   moving=hidden_T[:, kt0 + j, :],
                                   accumulate=(kt0 + j > 0))
        for t in range(len(accs)):
            c0 = g0 + t * pmax
            n = accs[t].shape[0]
            res = nl.ndarray((n, B), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=accs[t])
            nisa.dma_copy(dst=out[:, c0:c0 + n].permute((1, 0)), src=res)


@nki.jit
def in_proj_kernel(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b):
    """in_proj v2: weight stationary as v1, the weights streamed in large DMAs, HBM -> HBM.

    Dimensions:
        B: batch (<= 128), H: hidden size (a multiple of 128), N: a weight's columns.

    Args:
        hidden: [B, 1, H] @ HBM, bf16.
        W_in_qkv, W_in_z, W_in_a, W_in_b: [H, N] @ HBM, bf16 (nn.Linear weights transposed).

    Returns:
        mixed_qkv, z, a, b: [B, N] @ shared HBM, bf16 (fp32 sums, one rounding).

    Notes:
        - Per 512 columns: chunks [128, g, 512] of g consecutive rows per partition, at most
          WEIGHT_DMA_BYTES each; every chunk row feeds four weight-stationary matmuls.

    Pseudocode:
        as v1; the weight blocks of 512 columns come in chunks of g rows.
    """
    outs, weights, hidden_T = load_inputs(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b)
    for i in range(len(outs)):
        project_v2(outs[i], hidden_T, weights[i])
    return outs[0], outs[1], outs[2], outs[3]
