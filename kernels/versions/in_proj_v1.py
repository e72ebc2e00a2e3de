"""in_proj v1: the straightforward kernel. Weight stationary, one small DMA per weight block.

Each [128, <= 128] block of a weight is loaded on its own, is the stationary operand of one matmul
against hidden^T, and the [channels, B] sums are stored transposed into the [B, N] output rows.
"""
import nki
import nki.isa as nisa
import nki.language as nl

from ..checks import expect, expect_dtype, expect_multiple, expect_rank
from ..in_proj import load_hidden_T


def check_inputs(hidden, weights):
    """The versions' checks, an assertion naming the argument: hidden [B <= 128, 1, H], H a
    multiple of 128, weights (name, W) [H, N], everything bf16. Returns (B, H)."""
    expect_rank(hidden, "hidden", 3)
    B, S, H = hidden.shape
    expect(S == 1, "hidden", "one decode token, shape [B, 1, H]", f"shape {list(hidden.shape)}")
    expect_multiple(H, nl.tile_size.pmax, "hidden", "hidden size H")
    expect(B <= nl.tile_size.pmax, "hidden", "batch B <= 128 (one matmul operand)", B)
    expect_dtype(hidden, "hidden", nl.bfloat16)
    for arg, W in weights:
        expect_rank(W, arg, 2)
        expect(W.shape[0] == H, arg, f"{H} rows (H of hidden), shape [H, N]",
               f"shape {list(W.shape)}")
        expect_dtype(W, arg, nl.bfloat16)
    return B, H


def load_inputs(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b):
    """Check the arguments, allocate the four outputs, load hidden^T [128, KT, B].
    Returns (outs, weights, hidden_T)."""
    weights = (("W_in_qkv", W_in_qkv), ("W_in_z", W_in_z), ("W_in_a", W_in_a),
               ("W_in_b", W_in_b))
    B, H = check_inputs(hidden, weights)
    outs = []
    for arg, W in weights:
        outs.append(nl.ndarray((B, W.shape[1]), dtype=nl.bfloat16, buffer=nl.shared_hbm))
    pmax = nl.tile_size.pmax
    hidden_T = load_hidden_T(nl.ndarray((pmax, B, H // pmax), dtype=nl.bfloat16,
                                        buffer=nl.sbuf), hidden)
    return outs, (W_in_qkv, W_in_z, W_in_a, W_in_b), hidden_T


def project_v1(out, hidden_T, W):
    """out [B, N] @ HBM = hidden @ W: per 128 channels, KT block loads and matmuls,
    one store."""
    H, N = W.shape
    pmax = nl.tile_size.pmax
    KT = H // pmax
    B = hidden_T.shape[2]
    W3 = W.reshape((pmax, KT, N))                  # W3[p, kt, c] = W[p * KT + kt, c]
    for c0 in range(0, N, pmax):
        n = min(pmax, N - c0)
        acc = nl.ndarray((n, B), dtype=nl.float32, buffer=nl.psum)
        for kt in range(KT):
            w = nl.ndarray((pmax, n), dtype=W.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=w, src=W3[:, kt, c0:c0 + n])
            nisa.nc_matmul(dst=acc, stationary=w, moving=hidden_T[:, kt, :],
                           accumulate=(kt > 0))
        res = nl.ndarray((n, B), dtype=out.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[:, c0:c0 + n].permute((1, 0)), src=res)


@nki.jit
def in_proj_kernel(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b):
    """in_proj v1: the four decode projections, weight stationary, HBM -> HBM.

    Dimensions:
        B: batch (<= 128), H: hidden size (a multiple of 128), N: a weight's columns.

    Args:
        hidden: [B, 1, H] @ HBM, bf16.
        W_in_qkv, W_in_z, W_in_a, W_in_b: [H, N] @ HBM, bf16 (nn.Linear weights transposed).

    Returns:
        mixed_qkv, z, a, b: [B, N] @ shared HBM, bf16 (fp32 sums, one rounding).

    Notes:
        - One [128, <= 128] weight block per DMA (runs of <= 256 bytes per partition), one matmul
          per block (weight stationary, hidden_T moving), one transposing store per 128 channels.

    Pseudocode:
        for W, out in weights and outputs:
            for c0 in range(0, N, 128):
                acc = sum over kt of W[rows(kt), c0:c0 + 128].T @ hidden_T[:, kt, :]
                out[:, c0:c0 + 128] = acc.T.astype(bf16)
    """
    outs, weights, hidden_T = load_inputs(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b)
    for i in range(len(outs)):
        project_v1(outs[i], hidden_T, weights[i])
    return outs[0], outs[1], outs[2], outs[3]
