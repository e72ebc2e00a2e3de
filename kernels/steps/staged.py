"""Composition steps 0 and 1: the stage kernels launched one after another from the host, every
activation through HBM. Each launch is a standalone `@nki.jit` kernel reading and writing HBM."""
from ..conv1d_decode import conv1d_decode_kernel
from ..gated_delta_rule import gated_delta_rule_kernel
from ..gdn_block_checks import block_dims, check_block_dtypes
from ..gdn_tkg import gdn_tkg
from ..gqa_repeat import gqa_repeat_kernel
from ..in_proj import in_proj_kernel
from ..rmsnorm_gated import rmsnorm_gated_kernel


def _stages_1_to_3(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                   dt_bias, norm_weight, recurrent_state):
    """Launch in_proj, conv1d decode and gqa_repeat; return q, k, v, z, a, b and the new conv
    state."""
    _, _, nk, _, dk, dv, _ = block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                                        conv_state, A_log, dt_bias, norm_weight, recurrent_state)
    check_block_dtypes(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                       dt_bias, norm_weight, recurrent_state)
    mixed_qkv, z, a, b = in_proj_kernel(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b)
    conv_out, new_conv_state = conv1d_decode_kernel(mixed_qkv, conv_weight, conv_state)
    q, k, v = gqa_repeat_kernel(conv_out, nk, dk, dv)
    return q, k, v, z, a, b, new_conv_state


def gdn_block_staged(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                     dt_bias, norm_weight, recurrent_state):
    """Step 0: one GDN decode step as five kernel launches; returns (out, conv_state,
    recurrent_state)."""
    q, k, v, z, a, b, new_conv_state = _stages_1_to_3(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b,
                                                      conv_weight, conv_state, A_log, dt_bias,
                                                      norm_weight, recurrent_state)
    o, new_recurrent_state = gated_delta_rule_kernel(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    out = rmsnorm_gated_kernel(o, z, norm_weight)
    return out, new_conv_state, new_recurrent_state


def gdn_block_staged_tkg(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                         dt_bias, norm_weight, recurrent_state):
    """Step 1: four launches, the last one `gdn_tkg`; returns as gdn_block_staged."""
    q, k, v, z, a, b, new_conv_state = _stages_1_to_3(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b,
                                                      conv_weight, conv_state, A_log, dt_bias,
                                                      norm_weight, recurrent_state)
    out, new_recurrent_state = gdn_tkg(q, k, v, a, b, z, A_log, dt_bias, norm_weight,
                                       recurrent_state)
    return out, new_conv_state, new_recurrent_state
