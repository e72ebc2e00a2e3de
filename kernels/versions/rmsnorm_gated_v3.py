"""Stage 5, version 3: version 2 with the work spread so that the engines overlap.

The products that do not need the sum (silu(z) * w * x) run on ScalarE and VectorE while TensorE
sums, the square moves to VectorE, and one multiply after the rsqrt finishes the chain.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from ..layout import load_channel_major, store_rows
from ..rmsnorm_gated import RMSNORM_EPS
from .rmsnorm_gated_v1 import check_rmsnorm_args


@nki.jit
def rmsnorm_gated_v3(o, z, norm_weight):
    """Gated RMSNorm over head_v_dim, HBM to HBM: the gate while TensorE sums.

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
        - o, z and out move as contiguous HBM rows; TensorE transposes them (kernels.layout).

    Pseudocode:
        x = o.reshape(B * nv, dv).T.astype(float32)                  # [dv, B * nv]
        gwx = silu(z.reshape(B * nv, dv).T) * norm_weight[:, None] * x   # while TensorE sums
        rstd = 1 / sqrt(ones((dv, dv)).T @ (x * x) / dv + 1e-6)
        out = (gwx * rstd).T.astype(bf16).reshape(B, 1, nv * dv)
    """
    B, nv, dv = check_rmsnorm_args(o, z, norm_weight)
    R = B * nv

    out = nl.ndarray((B, 1, nv * dv), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    x = nl.ndarray((dv, R), nl.bfloat16, name="x")
    load_channel_major(x, o.reshape((R, dv)))
    g = nl.ndarray((dv, R), nl.bfloat16, name="g")
    load_channel_major(g, z.reshape((R, dv)))
    w = nl.ndarray((dv, 1), nl.float32, name="w")
    nisa.dma_copy(w, norm_weight.reshape((dv, 1)))

    ones = nl.ndarray((dv, dv), nl.float32, name="ones")
    nisa.memset(ones, 1.0)
    eps = nl.ndarray((dv, 1), nl.float32, name="eps")
    nisa.memset(eps, RMSNORM_EPS)

    # the square on VectorE: ScalarE is free for the SiLU at once
    sq = nl.ndarray((dv, R), nl.float32, name="sq")
    nisa.tensor_tensor(sq, x, x, op=nl.multiply)
    ss = nl.ndarray((dv, R), nl.float32, buffer=nl.psum, name="ss")
    nisa.nc_matmul(ss, ones, sq)

    # independent of the sum: silu(z) * w * x, while TensorE reduces
    gate = nl.ndarray((dv, R), nl.float32, name="gate")
    nisa.activation(gate, op=nl.silu, data=g)
    gwx = nl.ndarray((dv, R), nl.float32, name="gwx")
    nisa.scalar_tensor_tensor(gwx, data=gate, op0=nl.multiply, operand0=w,
                              op1=nl.multiply, operand1=x)

    rstd = nl.ndarray((dv, R), nl.float32, name="rstd")
    nisa.activation(rstd, op=nl.rsqrt, data=ss, bias=eps, scale=1.0 / dv)
    y = nl.ndarray((dv, R), nl.bfloat16, name="y")
    nisa.tensor_tensor(y, gwx, rstd, op=nl.multiply)

    store_rows(out.reshape((R, dv)), y)
    return out
