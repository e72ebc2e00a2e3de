"""Stage 4, version 3: version 2 with the state folded, 2 KiB DMA runs (delta_rule_fold)."""
import nki

from .delta_rule_fold import state_fold
from ..gated_delta_rule import check_delta_rule_inputs
from .gated_delta_rule_v2 import batched_kernel


@nki.jit
def gated_delta_rule_v3(q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """Stage 4 HBM to HBM: pairs batched, the state folded, one state buffer.

    Dimensions:
        B: batch; nv: value heads (<= 128); dk: head_k_dim (<= 128); dv: head_v_dim (<= 128)

    Args:
        As gated_delta_rule_kernel.

    Returns:
        o [B, nv, dv] bf16 and new_state [B, nv, dk, dv] fp32 @ shared HBM.

    Notes:
        - Checks as gated_delta_rule_kernel (AssertionError naming the argument).
        - fold = state_fold(dk, dv): F = 4 rows per partition and R = 4 pairs per tile at
          dk = dv = 128, so a state DMA moves F * dv * 4 = 2 KiB per partition and pair.

    Pseudocode:
        as gated_delta_rule_v2 with fold = state_fold(dk, dv)
    """
    check_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    fold = state_fold(q.shape[2], v.shape[2])
    return batched_kernel(q, k, v, a, b, A_log, dt_bias, recurrent_state, fold, 1, 0)
