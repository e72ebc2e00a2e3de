"""The layer's input RMSNorm on chip: hidden as the projections take it, normalised in SBUF.

transformers' `Qwen3NextRMSNorm` / `Qwen3_5RMSNorm` (the decoder layer's `input_layernorm`) in
fp32: x * rsqrt(mean_H(x^2) + eps) * (1 + w), rounded once to bf16; the weight is stored
zero-centred. The tokens sit as in_proj's hidden_T ([128, KT, N]: partition p holds features
p * KT .. p * KT + KT - 1 of every column), so the mean over H is a sum over each partition's KT
features (VectorE) and then across the partitions, which TensorE does as an all-ones matmul that
leaves every partition the column's total, already broadcast for the products after it.

Building blocks:
  load_norm_row(weight)                 input_norm_weight [H] @ HBM -> 1 + w as a [128, KT] tile
  input_rmsnorm(hidden_T, w1)           a new [128, KT, N] bf16 view: the normalised tokens
"""
import nki.isa as nisa
import nki.language as nl

from .checks import expect_shape
from .rmsnorm_gated import _eps, _ones

# SBUF per partition of each fp32 temporary (the squares, the scaled tokens): columns go in chunks
# this size, so that a batch of 512 tokens at H = 5120 does not take 80 KiB twice.
NORM_CHUNK_BYTES = 8 * 1024


def load_norm_row(weight):
    """input_norm_weight [H] @ HBM (fp32) as 1 + w in hidden_T's layout: a new [128, KT] fp32
    tile, feature p * KT + kt at [p, kt] (one DMA, a KT * 4 byte run per partition, then one
    VectorE add)."""
    pmax = nl.tile_size.pmax
    KT = weight.shape[0] // pmax
    w1 = nl.ndarray((pmax, KT), nl.float32, name="input_norm_w1")
    nisa.dma_copy(dst=w1, src=weight.reshape((pmax, KT)))
    nisa.tensor_scalar(w1, w1, op0=nl.add, operand0=1.0)
    return w1


def input_rmsnorm(hidden_T, w1):
    """RMSNorm of every token column of hidden_T, with transformers' semantics.

    Dimensions:
        H = 128 * KT: hidden size; N: token columns (B * T, <= 512).

    Args:
        hidden_T (nl.ndarray): [128, KT, N] @ SBUF, bf16, in_proj.load_tokens' view:
            hidden_T[p, kt, n] = hidden[n, p * KT + kt].
        w1 (nl.ndarray): [128, KT] @ SBUF, fp32, 1 + input_norm_weight (load_norm_row).

    Returns:
        A new [128, KT, N] bf16 view, laid out as hidden_T: the normalised tokens.

    Notes:
        - fp32 throughout, one rounding to bf16 at the end, as transformers computes
          (hidden.float() * rsqrt(variance + eps)) * (1 + weight.float()), then .to(bf16).
        - eps = rmsnorm_gated.RMSNORM_EPS (1e-6), every Qwen3.5 and Qwen3-Next config's
          rms_norm_eps; the all-ones tile and eps as the gated norm builds them (GpSimd).

    Pseudocode:
        x = hidden_T.astype(float32)                          # [128, KT, N]
        ss = ones((128, 128)).T @ x.square().sum(axis=1)       # [128, N], on every partition
        rstd = 1 / sqrt(ss / H + eps)
        out = (x * rstd[:, None, :] * w1[:, :, None]).astype(bf16)
    """
    P, KT, N = hidden_T.shape
    expect_shape(w1, "w1", (P, KT))
    ones = _ones(None, P)
    x = hidden_T.permute((0, 2, 1))                       # [128, N, KT]: contiguous tile order
    chunks = _column_chunks(N, KT)
    own = nl.ndarray((P, N), nl.float32, name="hidden_ss")          # each partition's sums
    for i in range(len(chunks)):
        n0, nc = chunks[i]
        sq = nl.ndarray((P, nc, KT), nl.float32, name="hidden_sq")
        nisa.tensor_tensor(sq, x[:, n0:n0 + nc], x[:, n0:n0 + nc], op=nl.multiply)
        nisa.tensor_reduce(own[:, n0:n0 + nc], op=nl.add, data=sq, axis=2)
    ss = nl.ndarray((P, N), nl.float32, buffer=nl.psum, name="hidden_ss_all")
    nisa.nc_matmul(ss, ones, own)
    eps = _eps(P)
    rstd = nl.ndarray((P, N), nl.float32, name="hidden_rstd")
    nisa.activation(rstd, op=nl.rsqrt, data=ss, bias=eps, scale=1.0 / (P * KT))
    out = nl.ndarray((P, N, KT), nl.bfloat16, name="hidden_normed")
    for i in range(len(chunks)):
        n0, nc = chunks[i]
        scaled = nl.ndarray((P, nc, KT), nl.float32, name="hidden_scaled")
        nisa.tensor_tensor(scaled, x[:, n0:n0 + nc],
                           rstd[:, n0:n0 + nc].expand_dim(2).broadcast(2, KT), op=nl.multiply)
        nisa.tensor_tensor(out[:, n0:n0 + nc], scaled, w1.expand_dim(1).broadcast(1, nc),
                           op=nl.multiply)
    return out.permute((0, 2, 1))


def _column_chunks(N, KT):
    """(first column, columns) of the chunks whose fp32 temporaries, KT features per column,
    stay within NORM_CHUNK_BYTES per partition."""
    per_chunk = max(1, NORM_CHUNK_BYTES // (4 * KT))
    chunks = []
    for n0 in range(0, N, per_chunk):
        chunks.append((n0, min(per_chunk, N - n0)))
    return chunks
