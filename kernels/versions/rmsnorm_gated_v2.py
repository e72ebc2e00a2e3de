"""Stage 5, version 2: version 1 with its activations moved as HBM rows (kernels.layout).

Contiguous row DMAs and TensorE transposes replace the transposing access patterns, whose
2-byte descriptors took almost all of version 1's time. The math is version 1's.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from ..layout import load_channel_major, store_rows
from .rmsnorm_gated_v1 import check_rmsnorm_args, norm_gate


@nki.jit
def rmsnorm_gated_v2(o, z, norm_weight):
    """Gated RMSNorm over head_v_dim, HBM to HBM: rows in and out, the math of version 1.

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
        rstd = 1 / sqrt(ones((dv, dv)).T @ (x * x) / dv + 1e-6)
        y = x * rstd * norm_weight[:, None] * silu(z.reshape(B * nv, dv).T)
        out = y.T.astype(bf16).reshape(B, 1, nv * dv)
    """
    B, nv, dv = check_rmsnorm_args(o, z, norm_weight)
    R = B * nv

    out = nl.ndarray((B, 1, nv * dv), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    # whole rows, one contiguous run per partition, turned channel-major by TensorE
    x = nl.ndarray((dv, R), nl.bfloat16, name="x")
    load_channel_major(x, o.reshape((R, dv)))
    g = nl.ndarray((dv, R), nl.bfloat16, name="g")
    load_channel_major(g, z.reshape((R, dv)))
    w = nl.ndarray((dv, 1), nl.float32, name="w")
    nisa.dma_copy(w, norm_weight.reshape((dv, 1)))

    y = nl.ndarray((dv, R), nl.bfloat16, name="y")
    norm_gate(y, x, g, w)                 # version 1's math

    store_rows(out.reshape((R, dv)), y)
    return out
