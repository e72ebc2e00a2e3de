"""Composition step 1, `gdn_tkg`: stages 4 and 5 in one kernel, the delta-rule output kept on chip.

Stage 4's body from HBM (gated_delta_rule_hbm) and RMSNormGated (rmsnorm_gated_tile, through
rmsnorm_gated_to_hbm) run back to back on the same channel-major tiles: o never goes to HBM
and back, and one launch replaces two.
"""
import nki
import nki.language as nl

from .checks import expect, expect_dtype, expect_shape
from .gated_delta_rule import check_delta_rule_inputs, gated_delta_rule_hbm
from .rmsnorm_gated import rmsnorm_gated_to_hbm


def gdn_tkg_hbm(out, new_state, q, k, v, a, b, z, A_log, dt_bias, norm_weight, recurrent_state):
    """The body of `gdn_tkg`, writing into HBM tensors the caller allocated (shared HBM or scratch).

    Args as `gdn_tkg`; out [B, 1, nv * dv] and new_state [B, nv, dk, dv] @ HBM are written.
    """
    o = gated_delta_rule_hbm(new_state, q, k, v, a, b, A_log, dt_bias, recurrent_state)
    rmsnorm_gated_to_hbm(out, o, z, norm_weight)


@nki.jit
def gdn_tkg(q, k, v, a, b, z, A_log, dt_bias, norm_weight, recurrent_state):
    """Stages 4 and 5 fused, HBM to HBM: gates, l2norm, the gated delta rule and RMSNormGated.

    Dimensions:
        B: batch; nv: value heads (<= 128); dk, dv: head dims (<= 128); value_dim = nv * dv

    Args:
        q, k: [B, nv, dk] @ HBM, bf16, queries and keys already repeated to the value heads.
        v: [B, nv, dv] @ HBM, bf16.
        a, b: [B, nv] @ HBM, bf16, the in_proj_a and in_proj_b outputs.
        z: [B, value_dim] @ HBM, bf16, the in_proj_z output.
        A_log, dt_bias: [nv] @ HBM, fp32.
        norm_weight: [dv] @ HBM, fp32.
        recurrent_state: [B, nv, dk, dv] @ HBM, fp32, read only.

    Returns:
        out: [B, 1, value_dim] @ shared HBM, bf16, rmsnorm(o) * norm_weight * silu(z).
        recurrent_state: [B, nv, dk, dv] @ shared HBM, fp32, the new state (a new tensor).

    Notes:
        - Rejects (AssertionError naming the argument) what either stage kernel rejects, and z not
          [B, value_dim] bf16, norm_weight not [dv] fp32.
        - o is rounded to bf16 once, as the stage-4 kernel stores it, so the result equals the two
          stage kernels run back to back.

    Pseudocode:
        o, recurrent_state = gated_delta_rule(q, k, v, a, b, A_log, dt_bias, recurrent_state)
        out = rmsnorm_gated(o, z, norm_weight)
    """
    check_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    B, nv, dk = q.shape
    dv = v.shape[2]
    expect_shape(z, "z", (B, nv * dv))
    expect_dtype(z, "z", nl.bfloat16)
    expect(tuple(norm_weight.shape) == (dv,), "norm_weight", f"shape [{dv}] (head_v_dim)",
           list(norm_weight.shape))
    expect_dtype(norm_weight, "norm_weight", nl.float32)
    out = nl.ndarray((B, 1, nv * dv), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    new_state = nl.ndarray((B, nv, dk, dv), nl.float32, buffer=nl.shared_hbm, name="new_state")
    gdn_tkg_hbm(out, new_state, q, k, v, a, b, z, A_log, dt_bias, norm_weight, recurrent_state)
    return out, new_state
