"""Stage 5, version 1: RMSNormGated written straight from the math, one step after another.

Channel-major like the final kernel (dv on partitions, the (b, h) rows in the free dim), but the
DMAs do the transposes themselves and the engines run the formula in its written order.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from ..checks import expect, expect_dtype, expect_rank, expect_shape
from ..rmsnorm_gated import RMSNORM_EPS


@nki.jit
def rmsnorm_gated_v1(o, z, norm_weight):
    """Gated RMSNorm over head_v_dim, HBM to HBM: straight from the math.

    Dimensions:
        B: batch; nv: value heads; dv: head_v_dim (<= 128); value_dim = nv * dv

    Args:
        o (nl.ndarray): [B, nv, dv] @ HBM, bf16, the delta-rule output.
        z (nl.ndarray): [B, value_dim] @ HBM, bf16, the z projection.
        norm_weight (nl.ndarray): [dv] @ HBM, fp32.

    Returns:
        out (nl.ndarray): [B, 1, value_dim] @ shared HBM, bf16.

    Notes:
        - B * nv <= psum_bank_fmax: one PSUM bank holds every (b, h) column's sum.
        - The DMAs read and write the [dv, B * nv] tiles through transposed access patterns.

    Pseudocode:
        x = o.reshape(B * nv, dv).T.astype(float32)                  # [dv, B * nv]
        rstd = 1 / sqrt(ones((dv, dv)).T @ (x * x) / dv + 1e-6)
        y = x * rstd * norm_weight[:, None] * silu(z.reshape(B * nv, dv).T)
        out = y.T.astype(bf16).reshape(B, 1, nv * dv)
    """
    B, nv, dv = check_rmsnorm_args(o, z, norm_weight)
    R = B * nv

    out = nl.ndarray((B, 1, nv * dv), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    # channel-major through the access pattern: one 2-byte element per descriptor
    x = nl.ndarray((dv, R), nl.bfloat16, name="x")
    nisa.dma_copy(x, o.reshape((R, dv)).permute((1, 0)))
    g = nl.ndarray((dv, R), nl.bfloat16, name="g")
    nisa.dma_copy(g, z.reshape((R, dv)).permute((1, 0)))
    w = nl.ndarray((dv, 1), nl.float32, name="w")
    nisa.dma_copy(w, norm_weight.reshape((dv, 1)))

    y = nl.ndarray((dv, R), nl.bfloat16, name="y")
    norm_gate(y, x, g, w)

    nisa.dma_copy(out.reshape((R, dv)).permute((1, 0)), y)
    return out


def check_rmsnorm_args(o, z, norm_weight):
    """The versions' input contract (one PSUM bank of (b, h) columns); returns (B, nv, dv)."""
    expect_rank(o, "o", 3)
    expect_rank(z, "z", 2)
    B, nv, dv = o.shape
    expect(dv <= nl.tile_size.pmax, "o", f"head_v_dim o.shape[2] <= {nl.tile_size.pmax}", dv)
    fmax = nl.tile_size.psum_bank_fmax
    expect(B * nv <= fmax, "o", f"B * nv <= {fmax} (one PSUM bank)", B * nv)
    expect_shape(z, "z", (B, nv * dv))
    expect_shape(norm_weight, "norm_weight", (dv,))
    expect_dtype(o, "o", nl.bfloat16)
    expect_dtype(z, "z", nl.bfloat16)
    expect_dtype(norm_weight, "norm_weight", nl.float32)
    return B, nv, dv


def norm_gate(y, x, g, w):
    """y = rmsnorm(x) * w * silu(g) on [dv, R] channel-major tiles, in the formula's order."""
    dv, R = x.shape
    ones = nl.ndarray((dv, dv), nl.float32, name="ones")
    nisa.memset(ones, 1.0)
    eps = nl.ndarray((dv, 1), nl.float32, name="eps")
    nisa.memset(eps, RMSNORM_EPS)

    # rstd = rsqrt(mean(x^2) + eps): the sum over partitions is a matmul against ones
    sq = nl.ndarray((dv, R), nl.float32, name="sq")
    nisa.activation(sq, op=nl.square, data=x)
    ss = nl.ndarray((dv, R), nl.float32, buffer=nl.psum, name="ss")
    nisa.nc_matmul(ss, ones, sq)
    rstd = nl.ndarray((dv, R), nl.float32, name="rstd")
    nisa.activation(rstd, op=nl.rsqrt, data=ss, bias=eps, scale=1.0 / dv)

    # then the products, in the formula's order
    xn = nl.ndarray((dv, R), nl.float32, name="xn")
    nisa.tensor_tensor(xn, x, rstd, op=nl.multiply)
    xw = nl.ndarray((dv, R), nl.float32, name="xw")
    nisa.tensor_scalar(xw, xn, op0=nl.multiply, operand0=w)
    gate = nl.ndarray((dv, R), nl.float32, name="gate")
    nisa.activation(gate, op=nl.silu, data=g)
    nisa.tensor_tensor(y, xw, gate, op=nl.multiply)
