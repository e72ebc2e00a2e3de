"""Stage 5 of the GDN decode step: RMSNormGated, `rmsnorm(o) * norm_weight * silu(z)` per head.

Channel-major, like every stage: a value head's dv channels sit on partitions, (head, batch) in the
free dim, so the mean over dv is a reduction across partitions. TensorE does it: an all-ones
[dv, dv] fp32 stationary times the squares gives every partition the sum of squares of its column.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from .checks import expect, expect_dtype, expect_rank, expect_shape
from .layout import load_channel_major, store_rows

RMSNORM_EPS = 1e-6      # config.rms_norm_eps of every Qwen3-Next / Qwen3.5 model


def rmsnorm_gated_tile(out, o, z, w, ones=None, rstd=None):
    """Gated RMSNorm of channel-major SBUF tiles: out = o * rsqrt(mean_dv(o^2) + eps) * w * silu(z).

    The building block of stage 5, called by the standalone kernel and by the fused decode kernel.
    It writes `out` and allocates only its own temporaries (constants, fp32 intermediates, PSUM).

    Dimensions:
        dv: head_v_dim, on partitions (<= 128)
        nv: value heads in this tile
        B: batch (tokens)

    Args:
        out (nl.ndarray): [dv, nv, B] @ SBUF, written; bf16 for the GDN block (any float dtype).
        o (nl.ndarray): [dv, nv, B] @ SBUF, bf16 (or fp32, rounded to bf16 first, as the delta-rule
            stage stores o in bf16), the core attention output; o[j, h, b] = o_hbm[b, h, j].
        z (nl.ndarray): [dv, nv, B] @ SBUF, bf16, the gate; z[j, h, b] = z_hbm[b, h*dv + j].
        w (nl.ndarray): [dv, 1] @ SBUF, fp32, norm_weight as a per-partition scalar operand.
        ones (nl.ndarray): optional [dv, dv] @ SBUF, fp32, all ones, from a caller that has one
            (the fused kernel reuses the delta rule's); built here if None.
        rstd (nl.ndarray): optional [dv, nv, B] @ SBUF, fp32, `rmsnorm_rstd(o, ones)` computed
            ahead by the caller; computed here if None.

    Returns:
        None; `out` holds the result.

    Notes:
        - dv <= 128 (one head is one partition tile); out, o, z have the same [dv, nv, B] shape
          (views of any layout, e.g. a head slice or a permuted [dv, B, nv] tile).
        - The free dim (nv, B) goes in chunks of at most psum_bank_fmax (head, batch) columns, one
          PSUM bank each.
        - All math in fp32, one rounding to out.dtype at the end. o = 0 gives out = 0 exactly;
          ScalarE's rsqrt is valid on [2^-87, 2^97], so mean(o^2) + eps stays inside for any
          |o| up to ~1e14.

    Pseudocode:
        x = o.astype(bf16).astype(float32)                 # [dv, nv, B]
        ss = ones((dv, dv)).T @ (x * x)                     # every partition holds sum_j x[j]^2
        rstd = 1 / sqrt(ss / dv + eps)
        gwo = silu(z.astype(float32)) * w[:, :, None] * x
        out[...] = (gwo * rstd).astype(out.dtype)
    """
    dv, nv, B = o.shape
    expect_shape(out, "out", (dv, nv, B))
    expect_shape(z, "z", (dv, nv, B))
    expect_shape(w, "w", (dv, 1))
    expect_dtype(o, "o", (nl.bfloat16, nl.float32))
    expect_dtype(w, "w", nl.float32)

    if o.dtype == nl.float32:
        # the delta-rule stage stores o in bf16; an fp32 o is rounded the same way first
        o_bf16 = nl.ndarray((dv, nv, B), nl.bfloat16, name="o_bf16")
        nisa.tensor_copy(o_bf16, o)
        o = o_bf16

    # Constants on GpSimd (otherwise idle), so VectorE can start squaring at once.
    if rstd is None:
        ones = _ones(ones, dv)
        eps = _eps(dv)
    else:
        expect_shape(rstd, "rstd", (dv, nv, B))

    chunks = _column_chunks(nv, B)
    for i in range(len(chunks)):
        h0, hn, b0, bn = chunks[i]
        o_c = o[:, h0:h0 + hn, b0:b0 + bn]
        z_c = z[:, h0:h0 + hn, b0:b0 + bn]
        if rstd is None:
            ss = _sum_squares(o_c, ones)

        # independent of the sum: silu(z) * w * o, while TensorE reduces
        gate = nl.ndarray((dv, hn, bn), nl.float32, name="gate")
        nisa.activation(gate, op=nl.silu, data=z_c)
        gwo = nl.ndarray((dv, hn, bn), nl.float32, name="gwo")
        nisa.scalar_tensor_tensor(gwo, data=gate, op0=nl.multiply, operand0=w,
                                  op1=nl.multiply, operand1=o_c)

        if rstd is None:
            rstd_c = nl.ndarray((dv, hn, bn), nl.float32, name="rstd")
            _rsqrt_mean(rstd_c, ss, eps)
        else:
            rstd_c = rstd[:, h0:h0 + hn, b0:b0 + bn]

        # the one rounding, to out's dtype
        nisa.tensor_tensor(out[:, h0:h0 + hn, b0:b0 + bn], gwo, rstd_c, op=nl.multiply)


def rmsnorm_rstd(o, ones):
    """rsqrt(mean_dv(o^2) + eps) of every (head, batch) column of o [dv, nv, B] @ SBUF (bf16), on
    every partition: a new [dv, nv, B] fp32 tile for `rmsnorm_gated_tile(..., rstd=)`, so that a
    caller whose z comes after o can run ScalarE's rsqrt before silu(z) (two function tables:
    after silu the rsqrt would load its table again). The same instructions as the tile's own."""
    dv, nv, B = o.shape
    expect_dtype(o, "o", nl.bfloat16)
    ones = _ones(ones, dv)
    eps = _eps(dv)
    rstd = nl.ndarray((dv, nv, B), nl.float32, name="rstd")
    chunks = _column_chunks(nv, B)
    for i in range(len(chunks)):
        h0, hn, b0, bn = chunks[i]
        ss = _sum_squares(o[:, h0:h0 + hn, b0:b0 + bn], ones)
        _rsqrt_mean(rstd[:, h0:h0 + hn, b0:b0 + bn], ss, eps)
    return rstd


def _ones(ones, dv):
    """The caller's [dv, dv] all-ones fp32 tile, or a new one (GpSimd)."""
    if ones is None:
        ones = nl.ndarray((dv, dv), nl.float32, name="ones")
        nisa.memset(ones, 1.0, engine=nisa.engine.gpsimd)
    expect_shape(ones, "ones", (dv, dv))
    return ones


def _eps(dv):
    """[dv, 1] fp32 RMSNORM_EPS, the rsqrt's bias (GpSimd)."""
    eps = nl.ndarray((dv, 1), nl.float32, name="eps")
    nisa.memset(eps, RMSNORM_EPS, engine=nisa.engine.gpsimd)
    return eps


def _column_chunks(nv, B):
    """(h0, hn, b0, bn): the (head, batch) columns of one PSUM bank of fp32 sums each."""
    fmax = nl.tile_size.psum_bank_fmax
    b_chunk = min(B, fmax)
    h_chunk = max(1, fmax // b_chunk)
    chunks = []
    for h0 in range(0, nv, h_chunk):
        for b0 in range(0, B, b_chunk):
            chunks.append((h0, min(h_chunk, nv - h0), b0, min(b_chunk, B - b0)))
    return chunks


def _sum_squares(o_c, ones):
    """Sum of squares over dv (partitions): square on VectorE, then ones^T @ sq on TensorE; the
    sum lands on every partition of a PSUM tile, already broadcast for the products after it."""
    dv, hn, bn = o_c.shape
    sq = nl.ndarray((dv, hn, bn), nl.float32, name="sq")
    nisa.tensor_tensor(sq, o_c, o_c, op=nl.multiply)
    ss = nl.ndarray((dv, hn, bn), nl.float32, buffer=nl.psum, name="ss")
    nisa.nc_matmul(ss, ones, sq)
    return ss


def _rsqrt_mean(rstd, ss, eps):
    """rstd = rsqrt(ss / dv + eps) (ScalarE), read straight from PSUM."""
    nisa.activation(rstd, op=nl.rsqrt, data=ss, bias=eps, scale=1.0 / ss.shape[0])


@nki.jit
def rmsnorm_gated_kernel(o, z, norm_weight):
    """Stage 5 standalone, HBM to HBM: gated RMSNorm over head_v_dim, flattened head-major.

    Dimensions:
        B: batch; nv: value heads; dv: head_v_dim (<= 128); value_dim = nv * dv

    Args:
        o (nl.ndarray): [B, nv, dv] @ HBM, bf16 (fp32 accepted: rounded to bf16 first), the
            delta-rule output.
        z (nl.ndarray): [B, value_dim] @ HBM, bf16, the z projection (value heads in order).
        norm_weight (nl.ndarray): [dv] @ HBM, fp32, the plain RMSNorm weight (not 1 + w).

    Returns:
        out (nl.ndarray): [B, 1, value_dim] @ shared HBM, bf16; out[b, 0, h*dv + j].

    Notes:
        - Rejects (an assertion naming the argument): wrong ranks, dv > 128, z.shape[0] != B,
          z.shape[1] != nv * dv, norm_weight not [dv], dtypes other than the above.
        - o, z and out move as HBM rows through kernels.layout (contiguous row DMAs, TensorE
          transposes to and from the channel-major [dv, (b, h)] tiles of the building block).
        - eps = RMSNORM_EPS, norm before gate, one rounding to bf16 at the end.

    Pseudocode:
        x = o.astype(bf16).astype(float32)                           # [B, nv, dv]
        x = x / sqrt(mean(x ** 2, axis=-1, keepdims=True) + 1e-6)
        y = x * norm_weight * silu(z.reshape(B, nv, dv).astype(float32))
        out = y.astype(bf16).reshape(B, 1, nv * dv)
    """
    expect_rank(o, "o", 3)
    expect_rank(z, "z", 2)
    expect_rank(norm_weight, "norm_weight", 1)
    B, nv, dv = o.shape
    expect(dv <= nl.tile_size.pmax, "o", f"head_v_dim o.shape[2] <= {nl.tile_size.pmax}", dv)
    expect(z.shape[0] == B, "z", f"batch z.shape[0] == o.shape[0] = {B}", z.shape[0])
    expect(z.shape[1] == nv * dv, "z", f"value_dim z.shape[1] == nv * dv = {nv} * {dv} = {nv * dv}",
           z.shape[1])
    expect_shape(norm_weight, "norm_weight", (dv,))
    expect_dtype(o, "o", (nl.bfloat16, nl.float32))
    expect_dtype(z, "z", nl.bfloat16)
    expect_dtype(norm_weight, "norm_weight", nl.float32)

    out = nl.ndarray((B, 1, nv * dv), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    # channel-major, the (b, h) pairs in HBM's row order: [dv, B, nv]
    o_sb = nl.ndarray((dv, B, nv), nl.bfloat16, name="o_sb")     # an fp32 o is rounded here
    load_channel_major(o_sb.reshape((dv, B * nv)), o.reshape((B * nv, dv)))
    rmsnorm_gated_to_hbm(out, o_sb, z, norm_weight)
    return out


def rmsnorm_gated_to_hbm(out, o, z, norm_weight):
    """RMSNormGated of an on-chip o with z and norm_weight from HBM, the result stored to HBM.

    Called by the standalone entry point (o loaded from HBM) and by gdn_tkg (o straight from the
    delta rule).

    Args:
        out (nl.ndarray): [B, 1, nv * dv] @ HBM, bf16, written.
        o (nl.ndarray): [dv, B, nv] @ SBUF, bf16, channel-major, the (b, h) pairs in row order.
        z (nl.ndarray): [B, nv * dv] @ HBM, bf16.
        norm_weight (nl.ndarray): [dv] @ HBM, fp32.
    """
    dv, B, nv = o.shape
    z_sb = nl.ndarray((dv, B, nv), nl.bfloat16, name="z_sb")
    load_channel_major(z_sb.reshape((dv, B * nv)), z.reshape((B * nv, dv)))
    w_sb = load_norm_weight(norm_weight)
    out_sb = nl.ndarray((dv, B, nv), nl.bfloat16, name="out_sb")
    # the building block takes [dv, nv, B] views of these [dv, B, nv] tiles
    rmsnorm_gated_tile(out_sb.permute((0, 2, 1)), o.permute((0, 2, 1)), z_sb.permute((0, 2, 1)),
                       w_sb)
    store_rows(out.reshape((B * nv, dv)), out_sb.reshape((dv, B * nv)))


def load_norm_weight(norm_weight):
    """norm_weight [dv] @ HBM as the [dv, 1] fp32 SBUF tile `rmsnorm_gated_tile` takes as `w`."""
    dv = norm_weight.shape[0]
    w = nl.ndarray((dv, 1), nl.float32, name="norm_weight")
    nisa.dma_copy(w, norm_weight.reshape((dv, 1)))
    return w
